//! The record's rows: `audit-overhead` (exec-gateway with the record kept vs not, and
//! with `audit.required`, each record on disk before the run goes on) and `log-query`
//! (filtering 1,000,000 records by agent, as `warden log --agent` does).

use std::time::Instant;

use crate::harness::{RatioSpec, Report, compare};
use crate::in_process::InProcess;

/// The ids of this suite's rows.
pub const ROWS: &[&str] = &["audit-overhead", "audit-overhead-required", "log-query"];

/// Run the rows `wanted` names.
pub async fn run(
    report: &mut Report,
    quick: bool,
    wanted: &dyn Fn(&str) -> bool,
) -> anyhow::Result<()> {
    let (warmup, iterations) = if quick { (3, 10) } else { (50, 500) };
    for (id, required, max_ratio) in [
        ("audit-overhead", false, 1.05),
        ("audit-overhead-required", true, 1.15),
    ] {
        if !wanted(id) {
            continue;
        }
        let off = InProcess::new(None)?;
        let on = InProcess::recorded(
            None,
            Some(audit::Settings {
                required,
                ..audit::Settings::default()
            }),
        )?;
        let (base, warden) =
            compare(warmup, iterations, || off.exec_true(), || on.exec_true()).await?;
        report.ratio(
            RatioSpec {
                id,
                what: if required {
                    "exec-gateway with the record kept and audit.required (each record fsynced before the run goes on)"
                } else {
                    "exec-gateway with the record kept (a decision and a run record per request)"
                },
                baseline: "exec-gateway with no record",
                unit: "ms",
                max_ratio,
                iterations,
            },
            base,
            warden,
        );
    }
    if wanted("log-query") {
        let records = if quick { 100_000 } else { 1_000_000 };
        let seconds = log_query(records)?;
        report.value(
            "log-query",
            &format!(
                "filter {records} records (one of 10 agents) as `warden log --agent` does: every file read, matching records decoded"
            ),
            seconds,
            "s",
            1.0,
            1,
        );
    }
    Ok(())
}

/// Write a log of `n` records (10 agents in turn), then time reading the records of one.
fn log_query(n: u64) -> anyhow::Result<f64> {
    let audit_dir = std::env::temp_dir().join(format!("warden-bench-log-{}", std::process::id()));
    std::fs::create_dir_all(&audit_dir)?;
    let result = write_and_query(&audit_dir, n);
    let _ = std::fs::remove_dir_all(&audit_dir);
    result
}

fn write_and_query(audit_dir: &std::path::Path, n: u64) -> anyhow::Result<f64> {
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(audit_dir.join(audit::CURRENT_FILE))?);
    let mut prev = audit::GENESIS.to_owned();
    for seq in 1..=n {
        let entry = audit::Entry::new(audit::Kind::Run)
            .agent(format!("agent-{}", seq % 10))
            .session("s")
            .run_id(format!("run-{seq:016x}"))
            .host("gateway")
            .decision("allow")
            .reason("allowlist-match")
            .rule("allowlist: /usr/bin/git status …")
            .command("git status --short")
            .cwd("/home/me/project")
            .outcome("finished")
            .exit_code(0)
            .duration_ms(12)
            .output_bytes(120);
        let line = audit::encode(&audit::Record {
            v: audit::SCHEMA_VERSION,
            seq,
            time: "2026-12-03T10:00:00.000Z".into(),
            origin: "gateway".into(),
            prev: prev.clone(),
            entry,
        });
        // The hash is the line's last field.
        prev = String::from_utf8_lossy(&line[line.len() - 67..line.len() - 3]).into_owned();
        std::io::Write::write_all(&mut out, &line)?;
    }
    std::io::Write::flush(&mut out)?;
    drop(out);
    let fs = caps::LocalFs::new("/")?;
    let filter = audit::Filter {
        agent: Some("agent-3".into()),
        ..audit::Filter::default()
    };
    let started = Instant::now();
    let mut found = 0u64;
    for record in audit::Records::read(&fs, audit_dir, filter)? {
        record?;
        found += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        found == n / 10,
        "found {found} records of agent-3, expected {}",
        n / 10
    );
    Ok(seconds)
}
