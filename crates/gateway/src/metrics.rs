//! What a gateway counts for an operator's Prometheus: requests by the decision they got,
//! runs by host and outcome, how long deciding and running took, and — read when
//! scraped — runs in progress, questions waiting for a human, connected nodes and open
//! sessions. Labels are closed sets (host kind, outcome, decision), never an agent, a
//! node id or a command: a scrape tells how the host is doing, not what anyone ran (that
//! is the record's job), and no client can grow the label space.

use std::time::Duration;

use policy::Decision;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use runner::{Outcome, RunHost, RunReport};

/// A label set: `(name, value)` pairs from closed sets.
type Labels = Vec<(&'static str, &'static str)>;

/// A gateway's metrics (see the module header). Cheap to update: each is an atomic;
/// runs in progress and pending approvals are gauges moved by guards, so a run that ends
/// any way gives its count back.
pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    runs: Family<Labels, Counter>,
    decide_seconds: Histogram,
    run_seconds: Family<Labels, Histogram>,
    in_progress: Gauge,
    pending_approvals: Gauge,
    nodes: Gauge,
    sessions: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Deciding takes microseconds to milliseconds: 50 µs to ~1.6 s.
fn decide_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// Runs take milliseconds to hours: 1 ms to ~4.6 h.
fn run_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 3.0, 16))
}

impl Metrics {
    /// Every metric at zero, registered under `warden_`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("warden");
        let requests = Family::<Labels, Counter>::default();
        let runs = Family::<Labels, Counter>::default();
        let decide_seconds = decide_buckets();
        let run_seconds =
            Family::<Labels, Histogram>::new_with_constructor(run_buckets as fn() -> Histogram);
        let (in_progress, pending_approvals, nodes, sessions) = (
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
        );
        registry.register(
            "requests",
            "Exec requests by the final decision (allow, deny, ask: a question settled by nobody)",
            requests.clone(),
        );
        registry.register(
            "runs",
            "Exec requests that ended, by host kind (gateway, sandbox, direct, node) and outcome",
            runs.clone(),
        );
        registry.register(
            "decide_seconds",
            "Time to decide a request on this host (approvals file, analysis, plan), without asking anyone",
            decide_seconds.clone(),
        );
        registry.register(
            "run_seconds",
            "Time from a request's arrival to its result, by host kind (asking a human included)",
            run_seconds.clone(),
        );
        registry.register(
            "runs_in_progress",
            "Requests being decided, waiting for a human, or running",
            in_progress.clone(),
        );
        registry.register(
            "pending_approvals",
            "Questions waiting for a human now",
            pending_approvals.clone(),
        );
        registry.register(
            "connected_nodes",
            "Nodes connected over the Bridge now",
            nodes.clone(),
        );
        registry.register("sessions", "Open agent sessions", sessions.clone());
        Metrics {
            registry,
            requests,
            runs,
            decide_seconds,
            run_seconds,
            in_progress,
            pending_approvals,
            nodes,
            sessions,
        }
    }

    /// A request arrived; the guard counts it as in progress until dropped.
    pub(crate) fn started(&self) -> InProgress<'_> {
        self.in_progress.inc();
        InProgress { metrics: self }
    }

    /// A request was decided here in `took`.
    pub(crate) fn decided(&self, took: Duration) {
        self.decide_seconds.observe(took.as_secs_f64());
    }

    /// A request ended with `report`, `took` after it arrived.
    pub(crate) fn ended(&self, report: &RunReport, took: Duration) {
        let host = host_kind(&report.host);
        self.requests
            .get_or_create(&vec![("decision", decision_kind(&report.decision))])
            .inc();
        self.runs
            .get_or_create(&vec![
                ("host", host),
                ("outcome", outcome_kind(&report.outcome)),
            ])
            .inc();
        self.run_seconds
            .get_or_create(&vec![("host", host)])
            .observe(took.as_secs_f64());
    }

    /// A question went to a human; the guard counts it as pending until dropped.
    pub(crate) fn asking(&self) -> Asking<'_> {
        self.pending_approvals.inc();
        Asking { metrics: self }
    }

    /// The text exposition of every metric, with the gauges kept elsewhere read now:
    /// `nodes` connected and `sessions` open.
    pub fn encode(&self, nodes: usize, sessions: usize) -> String {
        let gauge = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.nodes.set(gauge(nodes));
        self.sessions.set(gauge(sessions));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// A request in progress (see [`Metrics::started`]).
pub(crate) struct InProgress<'a> {
    metrics: &'a Metrics,
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.metrics.in_progress.dec();
    }
}

/// A question waiting for a human (see [`Metrics::asking`]).
pub(crate) struct Asking<'a> {
    metrics: &'a Metrics,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.metrics.pending_approvals.dec();
    }
}

fn host_kind(host: &RunHost) -> &'static str {
    match host {
        RunHost::Gateway => "gateway",
        RunHost::Sandbox => "sandbox",
        RunHost::Direct => "direct",
        RunHost::Node(_) => "node",
    }
}

fn decision_kind(decision: &Decision) -> &'static str {
    match decision {
        Decision::Allow { .. } => "allow",
        Decision::Deny { .. } => "deny",
        Decision::Ask { .. } => "ask",
    }
}

fn outcome_kind(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Finished { output } if output.timed_out => "timed-out",
        Outcome::Finished { .. } => "finished",
        Outcome::Denied { .. } => "denied",
        Outcome::Error { .. } => "error",
        Outcome::Cancelled { .. } => "cancelled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_follow_their_guards_and_the_text_names_every_metric() {
        let m = Metrics::new();
        let started = m.started();
        let asking = m.asking();
        let text = m.encode(2, 3);
        for line in [
            "warden_runs_in_progress 1",
            "warden_pending_approvals 1",
            "warden_connected_nodes 2",
            "warden_sessions 3",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        // Families show once they have a sample (the end-to-end test scrapes them).
        m.decided(Duration::from_micros(120));
        let text = m.encode(2, 3);
        for line in [
            "# TYPE warden_decide_seconds histogram",
            "warden_decide_seconds_count 1",
            r#"warden_decide_seconds_bucket{le="0.0001"} 0"#,
            r#"warden_decide_seconds_bucket{le="0.0002"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        drop((started, asking));
        let text = m.encode(0, 0);
        assert!(text.contains("warden_runs_in_progress 0"), "{text}");
        assert!(text.contains("warden_pending_approvals 0"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
