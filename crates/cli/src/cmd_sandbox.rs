//! `warden sandbox direct|status`: the operator's time-limited direct mode, which runs
//! `host = sandbox` commands without an OS sandbox until it ends (its decision and plan
//! say so).

use crate::exit;
use crate::host::HostFacts;
use approvals::Clock;
use std::time::Duration;

/// `warden sandbox ...`
#[derive(Debug, clap::Subcommand)]
pub enum SandboxCommand {
    /// Run host=sandbox commands WITHOUT an OS sandbox for a limited time (operator only).
    ///
    /// While it is on, agents' commands run with your full privileges: they can read
    /// Warden's state (including the approver token) and anything else you can. Use it
    /// only while you watch, and keep the TTL short.
    Direct {
        /// How long (e.g. 10m, 1h; at most 24h). Direct mode then ends by itself.
        #[arg(long, value_parser = humantime::parse_duration, required_unless_present = "off")]
        ttl: Option<Duration>,
        /// End direct mode now.
        #[arg(long)]
        off: bool,
    },
    /// Show whether direct mode is on.
    Status,
}

/// Run `warden sandbox ...`.
pub fn sandbox(command: SandboxCommand) -> i32 {
    let result = (|| -> anyhow::Result<String> {
        let facts = HostFacts::read()?;
        match command {
            SandboxCommand::Direct { ttl, off } => {
                let ttl = if off { None } else { ttl };
                let until = facts.direct_switch().set(ttl)?;
                facts.record_policy(
                    "direct-mode.json",
                    match until {
                        Some(until) => format!("direct mode ON until {}", when(until)),
                        None => "direct mode off".to_owned(),
                    },
                );
                Ok(match until {
                    Some(until) => format!(
                        "direct mode ON: host=sandbox commands run WITHOUT an OS sandbox until {} (in {}); they can read everything you can, Warden's state included. `warden sandbox direct --off` ends it now\n",
                        when(until),
                        remaining(until)
                    ),
                    None => "direct mode off: host=sandbox commands run in the OS sandbox\n".into(),
                })
            }
            SandboxCommand::Status => Ok(match facts.direct_switch().active_until() {
                Some(until) => format!(
                    "direct mode ON until {} (another {}): host=sandbox commands run WITHOUT an OS sandbox\n",
                    when(until),
                    remaining(until)
                ),
                _ => "direct mode off: host=sandbox commands run in the OS sandbox\n".into(),
            }),
        }
    })();
    exit::or_report(result.map(|text| {
        out!("{text}");
        0
    }))
}

/// A moment (ms since the epoch) as UTC RFC 3339.
pub(crate) fn when(until_ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(until_ms))
        .to_string()
}

/// The time left until `until_ms`, to the second.
pub(crate) fn remaining(until_ms: u64) -> String {
    let left = until_ms.saturating_sub(approvals::SystemClock.now_ms()) / 1000;
    humantime::format_duration(Duration::from_secs(left)).to_string()
}
