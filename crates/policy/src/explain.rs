//! The whole pre-execution policy pipeline in one pure call — resolution, analysis,
//! matching, decision, allow-always derivation — shared by `warden policy explain` and
//! the runner, so what `explain` prints is what an exec does.

use std::fmt::Write as _;

use serde::Serialize;

use crate::allow_always::{AllowAlways, derive_allow_always};
use crate::config::Config;
use crate::decision::{Decision, decide};
use crate::evaluate::{EvalContext, Evaluation, Rebuilt, evaluate};
use crate::modes::Host;
use crate::resolve::{ExecParams, HostCeiling, ResolvedPolicy, SessionOverrides, resolve};
use crate::shell::{CommandInput, quote};

/// Who asks, with what session settings and parameters.
#[derive(Clone, Copy, Debug)]
pub struct Requester<'a> {
    /// The agent id, if known.
    pub agent: Option<&'a str>,
    /// The session's slash-command overrides.
    pub session: &'a SessionOverrides,
    /// The request's own policy parameters.
    pub params: &'a ExecParams,
}

/// Everything the policy concluded about one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The resolved host, security, ask, askFallback and node, each with its source.
    pub policy: ResolvedPolicy,
    /// The analysis and allowlist matching.
    pub evaluation: Evaluation,
    /// The decision before any approver is involved.
    pub decision: Decision,
    /// What "allow always" would store (derived only when the decision is to ask).
    pub allow_always: Option<AllowAlways>,
}

/// Run the policy pipeline for one command.
pub fn explain(
    command: CommandInput<'_>,
    requester: &Requester<'_>,
    config: &Config,
    ceiling: &HostCeiling,
    ctx: &EvalContext<'_>,
) -> Explanation {
    let policy = resolve(
        requester.params,
        requester.session,
        config,
        requester.agent,
        ceiling,
    );
    let evaluation = evaluate(command, ctx);
    let matched: Vec<&str> = evaluation
        .leaves
        .iter()
        .filter_map(|l| l.matched.as_deref())
        .collect();
    // On the sandbox host the OS sandbox confines every command and the permission mode
    // decides about writes; security, ask and the allowlist govern gateway and node hosts.
    let decision = if policy.host.value == Host::Sandbox {
        Decision::Allow {
            reason: crate::AllowReason::Sandboxed,
            rule: format!(
                "host=sandbox, permission_mode={}",
                config.permission_mode(requester.agent)
            ),
        }
    } else {
        decide(&policy, evaluation.satisfied, &matched.join(", "))
    };
    let allow_always =
        matches!(decision, Decision::Ask { .. }).then(|| derive_allow_always(&evaluation));
    Explanation {
        policy,
        evaluation,
        decision,
        allow_always,
    }
}

impl Explanation {
    /// A human-readable report.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let p = &self.policy;
        let _ = writeln!(out, "policy:");
        let rows = [
            ("host", p.host.value.as_str(), &p.host.source),
            ("security", p.security.value.as_str(), &p.security.source),
            ("ask", p.ask.value.as_str(), &p.ask.source),
            (
                "askFallback",
                p.ask_fallback.value.as_str(),
                &p.ask_fallback.source,
            ),
        ];
        for (name, value, source) in rows {
            let _ = writeln!(out, "  {name:<12} {value:<10} ({source})");
        }
        match &p.node {
            Some(n) => {
                let _ = writeln!(out, "  node         {:<10} ({})", n.value, n.source);
            }
            None => {
                let _ = writeln!(out, "  node         (none)");
            }
        }
        if p.host.value == Host::Sandbox {
            let _ = writeln!(
                out,
                "  note: host=sandbox runs in the OS sandbox; security/ask apply to gateway and node hosts"
            );
        }
        let _ = writeln!(out, "analysis:");
        match &self.evaluation.analysis {
            Err(miss) => {
                let _ = writeln!(
                    out,
                    "  allowlist miss: {} ({})",
                    miss.detail,
                    serde_reason(&miss.reason)
                );
            }
            Ok(_) => {
                for (i, leaf) in self.evaluation.leaves.iter().enumerate() {
                    let argv: Vec<String> = leaf.argv.iter().map(|w| quote(w)).collect();
                    let _ = writeln!(out, "  [{}] {}", i + 1, argv.join(" "));
                    match (&leaf.resolved, &leaf.failure) {
                        (Some(exe), _) => {
                            let _ = writeln!(out, "      resolves to {}", exe.path.display());
                        }
                        (None, Some(f)) => {
                            let _ = writeln!(out, "      does not resolve ({f:?})");
                        }
                        (None, None) => {}
                    }
                    match &leaf.matched {
                        Some(pattern) => {
                            let _ = writeln!(out, "      matches {pattern}");
                        }
                        None => {
                            let _ = writeln!(out, "      matches no allowlist entry");
                        }
                    }
                }
            }
        }
        if let Some(word) = &self.evaluation.impostor {
            let _ = writeln!(
                out,
                "  {} is not the system's {}: it is not looked through, so nothing matches",
                quote(word),
                crate::shell::base_name(word)
            );
        }
        if let Some(rebuilt) = &self.evaluation.rebuilt {
            let text = match rebuilt {
                Rebuilt::Argv(argv) => argv.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "),
                Rebuilt::Script(s) => s.clone(),
            };
            let _ = writeln!(out, "runs as: {text}");
        }
        let _ = match &self.decision {
            Decision::Allow { reason, rule } => {
                writeln!(out, "decision: allow ({}; {rule})", serde_reason(reason))
            }
            Decision::Ask { reason, rule } => {
                writeln!(out, "decision: ask ({}; {rule})", serde_reason(reason))
            }
            Decision::Deny { reason, rule } => writeln!(out, "decision: deny ({reason}; {rule})"),
        };
        out
    }
}

fn serde_reason<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
