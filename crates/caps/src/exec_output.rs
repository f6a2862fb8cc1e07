//! What a run produced and how much of it is kept: its exit status, its output (both
//! streams within the cap, their sizes, the tail for events), the writes a sandbox
//! refused. A leaf: the output collector fills these and the `Shell` trait returns them.

use std::fmt;
use std::time::Duration;

/// Combined stdout+stderr kept per run (product spec §9). Large enough for real tool
/// output, small enough that an agent's context and our memory stay bounded.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 200_000;

/// Bytes of trailing output kept for lifecycle events (product spec §9).
pub const DEFAULT_TAIL_BYTES: usize = 20_000;

/// How much output a run may keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes of stdout and stderr kept together (each stream's beginning and end when
    /// they do not fit; see [`crate::OutputCollector`]); the rest is drained and counted.
    pub max_output_bytes: usize,
    /// Trailing bytes of the whole stream kept for events, even past the cap.
    pub tail_bytes: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            tail_bytes: DEFAULT_TAIL_BYTES,
        }
    }
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

impl ExitStatus {
    /// The conventional shell exit code: the code itself, or 128 + signal number.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }

    /// True for exit code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "{c}"),
            ExitStatus::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// The typed result of a run. Text fields are UTF-8 (invalid bytes replaced) and never
/// split a character. A stream that did not fit its share of the cap keeps its beginning
/// and its end, with a line starting [`crate::DROPPED_MARKER_PREFIX`] where the middle
/// was dropped (see [`crate::OutputCollector`] for the split); a text that lost only one
/// end is marked with [`crate::TRUNCATION_MARKER`] there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ExecOutput {
    /// How the process ended.
    pub status: ExitStatus,
    /// Standard output (its share of the combined cap).
    pub stdout: String,
    /// Standard error (its share of the combined cap).
    pub stderr: String,
    /// The kept bytes behind `stdout` (its first bytes, then its last ones, as
    /// `stdout_size` says) when they are not UTF-8 (the text replaced what it could not
    /// carry); `None` when `stdout` is exact.
    #[serde(skip)]
    pub stdout_bytes: Option<Vec<u8>>,
    /// The kept bytes behind `stderr` when they are not UTF-8.
    #[serde(skip)]
    pub stderr_bytes: Option<Vec<u8>>,
    /// What was written to stdout, and what of it was kept.
    pub stdout_size: StreamSize,
    /// What was written to stderr, and what of it was kept.
    pub stderr_size: StreamSize,
    /// stdout and stderr interleaved in arrival order, within `max_output_bytes` (its
    /// beginning and its end when it did not fit).
    pub combined: String,
    /// The last `tail_bytes` of the combined stream, kept even past the cap (for events).
    pub tail: String,
    /// True if any output was discarded (a stream was cut).
    pub truncated: bool,
    /// True if the run hit its timeout and the tree was killed.
    pub timed_out: bool,
    /// Wall-clock duration of the run.
    #[serde(serialize_with = "serialize_duration_ms", rename = "duration_ms")]
    pub duration: Duration,
    /// Whether a sandbox's read-only profile refused a write that its writable profile
    /// would allow (approval mode asks a human about those). Only sandbox providers
    /// classify this; everything else reports [`RefusedWrites::NotWatched`].
    #[serde(skip_serializing_if = "RefusedWrites::is_not_watched")]
    pub refused_writes: RefusedWrites,
    /// The connections a sandboxed run made through Warden's egress proxy
    /// (`sandbox.network = "proxy"`), in the order they ended; empty for every other run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressConnection>,
}

/// One connection a sandboxed command asked Warden's egress proxy for: what it asked,
/// what was decided and why, and how many bytes went each way.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressConnection {
    /// The host asked for (a name, or an address).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// `connect` (a tunnel), `http` (one plain request), or `dns` (a name the command
    /// looked up through the sandbox's resolver: `allowed` says whether the rules let it
    /// be looked up; port 53, no bytes).
    pub kind: String,
    /// Whether it reached the upstream.
    pub allowed: bool,
    /// The rule that allowed it, or why it was refused.
    pub reason: String,
    /// Bytes from the command to the upstream.
    pub sent: u64,
    /// Bytes from the upstream to the command.
    pub received: u64,
}

// The host (and a refusal's reason, which may quote it) is the command's text: shown with
// every control character escaped, so that it cannot rewrite a terminal it is printed on.
impl fmt::Display for EgressConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let printable = |text: &str| -> String {
            text.chars()
                .flat_map(|c| {
                    let escaped: Vec<char> = if c.is_control() {
                        c.escape_default().collect()
                    } else {
                        vec![c]
                    };
                    escaped
                })
                .collect()
        };
        let to = crate::host_port(&printable(&self.host), self.port);
        let reason = printable(&self.reason);
        if self.kind == "dns" {
            let name = printable(&self.host);
            return match (self.allowed, name.is_empty()) {
                (true, _) => write!(f, "lookup of {name} allowed ({reason})"),
                (false, false) => write!(f, "lookup of {name} refused: {reason}"),
                (false, true) => write!(f, "lookups: {reason}"),
            };
        }
        if self.allowed {
            write!(
                f,
                "{to} {} allowed ({reason}), {} B sent, {} B received",
                self.kind, self.sent, self.received
            )
        } else {
            write!(f, "{to} {} refused: {reason}", self.kind)
        }
    }
}

#[cfg(test)]
mod egress_tests {
    use super::EgressConnection;

    #[test]
    fn a_connection_is_shown_in_one_line_that_cannot_drive_a_terminal() {
        let c = EgressConnection {
            host: "evil\u{1b}]0;pwned\u{7}.test".into(),
            port: 443,
            kind: "connect".into(),
            allowed: false,
            reason: "no rule names evil\u{1b}[2J".into(),
            sent: 0,
            received: 0,
        };
        let shown = c.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(
            shown,
            "evil\\u{1b}]0;pwned\\u{7}.test:443 connect refused: no rule names evil\\u{1b}[2J"
        );
        let v6 = EgressConnection {
            host: "2001:db8::1".into(),
            allowed: true,
            reason: "rule".into(),
            sent: 3,
            received: 4,
            ..c
        };
        assert_eq!(
            v6.to_string(),
            "[2001:db8::1]:443 connect allowed (rule), 3 B sent, 4 B received"
        );
        let lookup = EgressConnection {
            host: "evil\u{1b}[2J.test".into(),
            port: 53,
            kind: "dns".into(),
            allowed: false,
            reason: "no rule names it".into(),
            sent: 0,
            received: 0,
        };
        assert_eq!(
            lookup.to_string(),
            "lookup of evil\\u{1b}[2J.test refused: no rule names it"
        );
        let answered = EgressConnection {
            host: "pypi.org".into(),
            allowed: true,
            reason: "allow pypi.org".into(),
            ..lookup
        };
        assert_eq!(
            answered.to_string(),
            "lookup of pypi.org allowed (allow pypi.org)"
        );
    }
}

/// What a run kept of one output stream: how much the command wrote, and which bytes of
/// it the result holds — all of them, or the first `kept_first` and the last `kept_last`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StreamSize {
    /// Bytes the command wrote to the stream.
    pub written: u64,
    /// Kept bytes from the stream's beginning (all of it when nothing was dropped).
    pub kept_first: u64,
    /// Kept bytes from the stream's end (0 when nothing was dropped).
    pub kept_last: u64,
}

impl StreamSize {
    /// A stream kept whole.
    pub fn whole(len: u64) -> Self {
        StreamSize {
            written: len,
            kept_first: len,
            kept_last: 0,
        }
    }

    /// Bytes kept.
    pub fn kept(&self) -> u64 {
        self.kept_first + self.kept_last
    }

    /// True if some of the stream was dropped.
    pub fn is_cut(&self) -> bool {
        self.kept() < self.written
    }
}

/// What a sandbox provider knows about writes its read-only profile refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "paths", rename_all = "kebab-case")]
pub enum RefusedWrites {
    /// The provider does not classify refused writes (not a sandbox, or a writable one).
    #[default]
    NotWatched,
    /// No write the writable profile would allow was refused.
    None,
    /// Such writes were refused: at these paths, as the kernel reported them (at most a
    /// few, first first), or with no paths when the backend only knows that one was (the
    /// command printed the kernel's "Read-only file system").
    Refused(Vec<std::path::PathBuf>),
}

impl RefusedWrites {
    /// True for [`RefusedWrites::NotWatched`].
    pub fn is_not_watched(&self) -> bool {
        matches!(self, RefusedWrites::NotWatched)
    }
}

impl ExecOutput {
    /// The exit code a shell would report for this run: 124 when it timed out (as
    /// `timeout(1)` does), else the code, or 128 + the signal that killed it.
    pub fn exit_code(&self) -> i32 {
        if self.timed_out {
            TIMED_OUT_EXIT_CODE
        } else {
            self.status.shell_code()
        }
    }
}

/// The exit code of a run that hit its timeout (`timeout(1)`'s convention).
pub const TIMED_OUT_EXIT_CODE: i32 = 124;

fn serialize_duration_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}
