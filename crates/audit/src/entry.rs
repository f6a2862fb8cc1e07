//! What a caller records: one event's facts, as optional fields so each kind carries only
//! what it has. The field names are the record's documented schema (docs/audit.md).

use serde::{Deserialize, Serialize};

/// The longest text kept in one field (a command, a rule). Longer text is cut, marked,
/// and its SHA-256 kept, so a record stays small enough to be written in one piece.
pub const MAX_FIELD_CHARS: usize = 4096;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A request was decided: allowed, denied, or to be asked.
    Decision,
    /// A human (or the fallback when none answered) answered a question.
    Answer,
    /// A command ran (or was stopped): its host, exit and output.
    Run,
    /// Policy changed: the approvals file, a credential, a node, direct mode.
    Policy,
}

impl Kind {
    /// The name in records and filters.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Decision => "decision",
            Kind::Answer => "answer",
            Kind::Run => "run",
            Kind::Policy => "policy",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        [Kind::Decision, Kind::Answer, Kind::Run, Kind::Policy]
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown record kind {s:?}: decision, answer, run or policy"))
    }
}

/// One event's facts. Build with [`Entry::new`] and the setters; unset fields are left
/// out of the record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// What happened.
    pub kind: Kind,
    /// The agent the request acted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The agent's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Where it ran or would run: sandbox, gateway, node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The node, for host node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// allow, deny or ask (a decision; the final one on answers and runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Why, as a code (`allowlist-match`, `approved-once`, `no-approver`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The rule in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The command as the request wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The digest of the plan a human approves and the runner runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_digest: Option<String>,
    /// Who answered: which approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    /// What "allow always" stored, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
    /// How the run ended: finished, timed-out, cancelled, error, denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The run's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// How long it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Bytes of output (stdout and stderr together, as kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// SHA-256 of that output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
    /// A policy change: which file or store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// A policy change, in words (never a secret: tokens are named, not shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    /// The changed file's hash before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_before: Option<String>,
    /// See `hash_before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_after: Option<String>,
    /// A run in `sandbox.network = "proxy"`: the connections it asked the egress proxy
    /// for (at most [`MAX_EGRESS`], each text cut like every other).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<caps::EgressConnection>,
}

/// At most this many connections are kept on one run record (the rest are counted in
/// one last entry whose host says how many).
pub const MAX_EGRESS: usize = 64;

macro_rules! text_setters {
    ($($field:ident),*) => {$(
        #[doc = concat!("Set `", stringify!($field), "` (cut at [`MAX_FIELD_CHARS`]).")]
        #[must_use]
        pub fn $field(mut self, value: impl Into<String>) -> Self {
            self.$field = Some(bounded(value.into()));
            self
        }
    )*};
}

impl Entry {
    /// An entry of `kind` with nothing else set.
    pub fn new(kind: Kind) -> Entry {
        Entry {
            kind,
            agent: None,
            session: None,
            run_id: None,
            host: None,
            node: None,
            decision: None,
            reason: None,
            rule: None,
            command: None,
            cwd: None,
            plan_digest: None,
            approver: None,
            stored: None,
            outcome: None,
            exit_code: None,
            duration_ms: None,
            output_bytes: None,
            output_sha256: None,
            file: None,
            change: None,
            hash_before: None,
            hash_after: None,
            egress: Vec::new(),
        }
    }

    text_setters!(
        agent,
        session,
        run_id,
        host,
        node,
        decision,
        reason,
        rule,
        command,
        cwd,
        plan_digest,
        approver,
        stored,
        outcome,
        output_sha256,
        file,
        change,
        hash_before,
        hash_after
    );

    /// Set the exit code.
    #[must_use]
    pub fn exit_code(mut self, code: i32) -> Self {
        self.exit_code = Some(code);
        self
    }

    /// Set the duration.
    #[must_use]
    pub fn duration_ms(mut self, ms: u64) -> Self {
        self.duration_ms = Some(ms);
        self
    }

    /// Set the output's size.
    #[must_use]
    pub fn output_bytes(mut self, bytes: u64) -> Self {
        self.output_bytes = Some(bytes);
        self
    }

    /// Set the run's egress connections: the first [`MAX_EGRESS`] − 1 whole, then —
    /// when there are more — one entry standing for the rest, with their bytes summed.
    #[must_use]
    pub fn egress(mut self, connections: &[caps::EgressConnection]) -> Self {
        let cut = |c: &caps::EgressConnection| caps::EgressConnection {
            host: bounded(c.host.clone()),
            kind: bounded(c.kind.clone()),
            reason: bounded(c.reason.clone()),
            ..c.clone()
        };
        if connections.len() <= MAX_EGRESS {
            self.egress = connections.iter().map(cut).collect();
            return self;
        }
        let (kept, rest) = connections.split_at(MAX_EGRESS - 1);
        self.egress = kept.iter().map(cut).collect();
        self.egress.push(caps::EgressConnection {
            host: format!("({} more connections)", rest.len()),
            port: 0,
            kind: "more".into(),
            allowed: rest.iter().all(|c| c.allowed),
            reason: format!(
                "{} allowed, {} refused",
                rest.iter().filter(|c| c.allowed).count(),
                rest.iter().filter(|c| !c.allowed).count()
            ),
            sent: rest.iter().map(|c| c.sent).sum(),
            received: rest.iter().map(|c| c.received).sum(),
        });
        self
    }
}

/// `text` cut at [`MAX_FIELD_CHARS`] characters, the cut marked with the whole text's
/// length and SHA-256 (so two long commands that differ past the cut still differ).
fn bounded(text: String) -> String {
    if text.chars().count() <= MAX_FIELD_CHARS {
        return text;
    }
    let kept: String = text.chars().take(MAX_FIELD_CHARS).collect();
    format!(
        "{kept}…[cut: {} bytes, sha256 {}]",
        text.len(),
        crate::line::sha256_hex(text.as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_egress_is_kept_bounded_and_the_rest_summed() {
        let connection = |n: u64, allowed: bool| caps::EgressConnection {
            host: format!("h{n}.example"),
            port: 443,
            kind: "connect".into(),
            allowed,
            reason: "r".repeat(5_000),
            sent: n,
            received: 2 * n,
        };
        let few: Vec<_> = (0..3).map(|n| connection(n, true)).collect();
        let entry = Entry::new(Kind::Run).egress(&few);
        assert_eq!(entry.egress.len(), 3);
        assert!(entry.egress[0].reason.len() < 5_000, "texts are cut");
        let many: Vec<_> = (0..100).map(|n| connection(n, n % 2 == 0)).collect();
        let entry = Entry::new(Kind::Run).egress(&many);
        assert_eq!(entry.egress.len(), MAX_EGRESS);
        let rest = entry.egress.last().unwrap();
        assert_eq!(rest.host, "(37 more connections)");
        assert_eq!(rest.sent, (63..100).sum::<u64>());
        assert_eq!(rest.received, 2 * (63..100).sum::<u64>());
        assert!(!rest.allowed);
        // Absent from the record when there is none.
        let line = serde_json::to_string(&Entry::new(Kind::Run)).unwrap();
        assert!(!line.contains("egress"), "{line}");
    }

    #[test]
    fn long_text_is_cut_marked_and_still_tells_texts_apart() {
        let a = "x".repeat(MAX_FIELD_CHARS + 10) + "a";
        let b = "x".repeat(MAX_FIELD_CHARS + 10) + "b";
        let ea = Entry::new(Kind::Decision).command(a);
        let eb = Entry::new(Kind::Decision).command(b);
        let (ca, cb) = (ea.command.unwrap(), eb.command.unwrap());
        assert!(ca.contains("…[cut: 4107 bytes, sha256 "), "{ca}");
        assert_ne!(ca, cb);
        assert!(ca.len() < MAX_FIELD_CHARS + 200);
        assert_eq!(
            Entry::new(Kind::Run).command("ls").command.as_deref(),
            Some("ls")
        );
    }

    #[test]
    fn kinds_parse_by_name_only() {
        assert_eq!("run".parse::<Kind>(), Ok(Kind::Run));
        assert!("Run".parse::<Kind>().is_err());
    }
}
