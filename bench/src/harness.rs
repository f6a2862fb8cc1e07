//! Timing and reporting: warm-up, medians, ratios, pass/fail against targets, and the
//! JSON and markdown reports.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

/// How a target compares the ratio.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Ratio (Warden / baseline) must be at most this.
    RatioAtMost(f64),
    /// An absolute quantity (unit in the row) must be at most this.
    ValueAtMost(f64),
}

/// One row of the report.
#[derive(Debug, Serialize)]
pub struct Row {
    pub id: String,
    pub what: String,
    pub baseline: String,
    pub baseline_median: Option<f64>,
    pub warden_median: f64,
    pub unit: String,
    pub ratio: Option<f64>,
    pub target: Target,
    pub pass: bool,
    pub iterations: usize,
}

/// What a ratio row measures and its target.
pub struct RatioSpec<'a> {
    pub id: &'a str,
    pub what: &'a str,
    pub baseline: &'a str,
    pub unit: &'a str,
    pub max_ratio: f64,
    pub iterations: usize,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub quick: bool,
    pub rows: Vec<Row>,
}

impl Report {
    pub fn new(quick: bool) -> Self {
        Report {
            quick,
            rows: Vec::new(),
        }
    }

    /// Add a ratio row: `base` and `warden` are medians in `spec.unit`.
    pub fn ratio(&mut self, spec: RatioSpec<'_>, base: f64, warden: f64) {
        let ratio = warden / base;
        self.rows.push(Row {
            id: spec.id.into(),
            what: spec.what.into(),
            baseline: spec.baseline.into(),
            baseline_median: Some(base),
            warden_median: warden,
            unit: spec.unit.into(),
            ratio: Some(ratio),
            target: Target::RatioAtMost(spec.max_ratio),
            pass: ratio <= spec.max_ratio,
            iterations: spec.iterations,
        });
    }

    /// Add an absolute row.
    pub fn value(
        &mut self,
        id: &str,
        what: &str,
        warden: f64,
        unit: &str,
        max: f64,
        iterations: usize,
    ) {
        self.rows.push(Row {
            id: id.into(),
            what: what.into(),
            baseline: "—".into(),
            baseline_median: None,
            warden_median: warden,
            unit: unit.into(),
            ratio: None,
            target: Target::ValueAtMost(max),
            pass: warden <= max,
            iterations,
        });
    }

    pub fn markdown(&self) -> String {
        let mut md = String::from(
            "| id | what | baseline | baseline median | Warden median | ratio | target | result |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for r in &self.rows {
            let base = r
                .baseline_median
                .map(|b| format!("{b:.3} {}", r.unit))
                .unwrap_or_else(|| "—".into());
            let ratio = r
                .ratio
                .map(|x| format!("{x:.3}×"))
                .unwrap_or_else(|| "—".into());
            let target = match r.target {
                Target::RatioAtMost(t) => format!("≤ {t}×"),
                Target::ValueAtMost(t) => format!("≤ {t} {}", r.unit),
            };
            let cell = |s: &str| s.replace('|', "\\|");
            md.push_str(&format!(
                "| {} | {} | {} | {} | {:.3} {} | {} | {} | {} |\n",
                r.id,
                cell(&r.what),
                cell(&r.baseline),
                base,
                r.warden_median,
                r.unit,
                ratio,
                target,
                if r.pass { "pass" } else { "MISS" }
            ));
        }
        md
    }

    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(self)?)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        Ok(())
    }
}

/// Median of the samples (sorted copy).
pub fn median(samples: &[Duration]) -> Duration {
    let mut s = samples.to_vec();
    s.sort();
    s.get(s.len() / 2).copied().unwrap_or_default()
}

/// Time `f` `warmup + iterations` times and return the measured samples. Baseline and
/// subject are interleaved by the callers so that drift on a noisy machine hits both.
pub async fn time_async<F, Fut>(mut f: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let start = Instant::now();
    f().await?;
    Ok(start.elapsed())
}

/// Interleave two measurements `iterations` times after `warmup` rounds; return the
/// median of each, in milliseconds.
pub async fn compare<A, AF, B, BF>(
    warmup: usize,
    iterations: usize,
    mut baseline: A,
    mut subject: B,
) -> anyhow::Result<(f64, f64)>
where
    A: FnMut() -> AF,
    AF: Future<Output = anyhow::Result<()>>,
    B: FnMut() -> BF,
    BF: Future<Output = anyhow::Result<()>>,
{
    let mut base = Vec::with_capacity(iterations);
    let mut subj = Vec::with_capacity(iterations);
    for i in 0..warmup + iterations {
        let b = time_async(&mut baseline).await?;
        let s = time_async(&mut subject).await?;
        if i >= warmup {
            base.push(b);
            subj.push(s);
        }
    }
    Ok((ms(median(&base)), ms(median(&subj))))
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
