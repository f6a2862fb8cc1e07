//! The whole pre-execution policy pipeline in one pure call — resolution, analysis,
//! matching, decision, allow-always derivation and the run plans — shared by `warden
//! policy explain` and the runner, so what `explain` prints is what an exec does, and
//! what runs is the plan worked out here.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::allow_always::{AllowAlways, derive_allow_always};
use crate::config::Config;
use crate::confinement::Confinement;
use crate::decision::{AllowReason, Decision, decide};
use crate::evaluate::{EvalContext, Evaluation, evaluate};
use crate::modes::Host;
use crate::plan::{Launch, PlanError, PlanRequest, Plans, RunPlan, plans};
use crate::resolve::{ExecParams, HostCeiling, ResolvedPolicy, SessionOverrides, resolve};
use crate::shell::{CommandInput, quote};

/// Who asks, with what session settings, parameters and environment.
#[derive(Clone, Copy, Debug)]
pub struct Requester<'a> {
    /// The agent id.
    pub agent: &'a str,
    /// The session id.
    pub session_id: &'a str,
    /// The session's slash-command overrides.
    pub session: &'a SessionOverrides,
    /// The request's own policy parameters.
    pub params: &'a ExecParams,
    /// Variables the request wants to set (checked against the allowlist of names).
    pub env: &'a BTreeMap<String, String>,
}

/// Everything the policy concluded about one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The resolved host, security, ask, askFallback, node, permission mode, timeout and
    /// environment names, each with its source.
    pub policy: ResolvedPolicy,
    /// The analysis and allowlist matching.
    pub evaluation: Evaluation,
    /// The decision before any approver is involved.
    pub decision: Decision,
    /// What "allow always" would store (derived only when the decision is to ask).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_always: Option<AllowAlways>,
    /// What would run.
    pub plans: Plans,
}

/// Run the policy pipeline for one command. `host_env` is this host's own environment
/// (only allowlisted names reach a command); `confinement` is how this host serves
/// `host = sandbox` now (the operator's direct mode is part of the decision and the plan).
pub fn explain(
    command: CommandInput<'_>,
    requester: &Requester<'_>,
    config: &Config,
    ceiling: &HostCeiling,
    ctx: &EvalContext<'_>,
    host_env: &BTreeMap<String, String>,
    confinement: Confinement<'_>,
) -> Explanation {
    let policy = resolve(
        requester.params,
        requester.session,
        config,
        Some(requester.agent),
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
        let mode = &policy.permission_mode;
        match confinement {
            Confinement::Sandbox => Decision::Allow {
                reason: AllowReason::Sandboxed,
                rule: format!(
                    "host=sandbox, permission_mode={} ({})",
                    mode.value, mode.source
                ),
            },
            Confinement::Unconfined(why) => Decision::Allow {
                reason: AllowReason::Unconfined,
                rule: format!(
                    "host=sandbox WITHOUT an OS sandbox ({why}), permission_mode={} ({})",
                    mode.value, mode.source
                ),
            },
        }
    } else {
        let mut decision = decide(&policy, evaluation.satisfied, &matched.join(", "));
        // A miss because of a profile hit names the flag (and the entry it got past).
        if let (Some(why), Decision::Ask { rule, .. } | Decision::Deny { rule, .. }) =
            (evaluation.blocked(), &mut decision)
        {
            rule.push_str("; ");
            rule.push_str(why);
        }
        decision
    };
    let allow_always =
        matches!(decision, Decision::Ask { .. }).then(|| derive_allow_always(&evaluation));
    let request = PlanRequest {
        agent: requester.agent,
        session: requester.session_id,
        env: requester.env,
        host_env,
    };
    let plans = plans(command, &policy, ctx, &request, &evaluation, confinement);
    Explanation {
        policy,
        evaluation,
        decision,
        allow_always,
        plans,
    }
}

impl Explanation {
    /// The plan that runs when `decision` (the final one, after any asking) allows the
    /// command: the rebuilt command when the allowlist is what allowed it, else the
    /// command as written — which is also what a human is shown.
    pub fn plan_for(&self, decision: &Decision) -> Result<&RunPlan, PlanError> {
        match decision {
            Decision::Allow {
                reason: AllowReason::AllowlistMatch | AllowReason::FallbackAllowlist,
                ..
            } => self
                .plans
                .rebuilt
                .as_ref()
                .ok_or_else(|| PlanError::Invalid {
                    message: "the allowlist is satisfied but the command could not be rebuilt"
                        .into(),
                }),
            _ => self.plans.as_written.as_ref().map_err(Clone::clone),
        }
    }
}

impl Explanation {
    /// A human-readable report.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "policy:");
        out.push_str(&self.policy.to_text());
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
                    if let Some(trace) = &leaf.grammar {
                        let refused = trace.words.iter().filter(|w| !w.accepted).count();
                        let _ = writeln!(
                            out,
                            "      {} grammar: {}",
                            trace.grammar,
                            match refused {
                                0 => "accepts every word".to_owned(),
                                n => format!("refuses {n} word(s)"),
                            }
                        );
                        let command = &leaf.argv[leaf.program_index..];
                        for w in &trace.words {
                            let word = command.get(w.index).map_or("", String::as_str);
                            let _ = writeln!(
                                out,
                                "        {} {}: {}",
                                if w.accepted { "+" } else { "-" },
                                quote(word),
                                w.verdict
                            );
                        }
                    }
                    for hit in &leaf.profile {
                        let allowed = leaf
                            .rule
                            .as_ref()
                            .is_some_and(|r| hit.allowed_by(&r.allow_flags));
                        let _ = writeln!(
                            out,
                            "      profile: {hit} ({}: {})",
                            quote(&hit.word),
                            if allowed {
                                "allowed by the entry"
                            } else {
                                "no entry allows it"
                            }
                        );
                    }
                    if let Some(why) = &leaf.blocked {
                        let _ = writeln!(out, "      miss: {why}");
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
        match self.plan_for(&self.decision) {
            Ok(plan) => {
                let text = match &plan.launch {
                    Launch::Exec { program, argv, .. } => {
                        let mut words: Vec<String> = argv.iter().map(|w| quote(w)).collect();
                        if let Some(first) = words.first_mut()
                            && program != &argv[0]
                        {
                            *first = format!("{} (as {first})", quote(program));
                        }
                        words.join(" ")
                    }
                    Launch::Script { shell, source } => format!("{shell} -c {}", quote(source)),
                };
                let _ = writeln!(out, "runs as: {text}");
            }
            Err(e) => {
                let _ = writeln!(out, "cannot run: {e}");
            }
        }
        let _ = match &self.decision {
            Decision::Allow { reason, rule } => writeln!(out, "decision: allow ({reason}; {rule})"),
            Decision::Ask { reason, rule } => writeln!(out, "decision: ask ({reason}; {rule})"),
            Decision::Deny { reason, rule } => writeln!(out, "decision: deny ({reason}; {rule})"),
        };
        out
    }
}

impl ResolvedPolicy {
    /// The resolved values, one per line with its source, as `warden policy explain`
    /// prints them (and the web console shows them).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let p = self;
        let rows = [
            ("host", p.host.value.as_str(), &p.host.source),
            ("security", p.security.value.as_str(), &p.security.source),
            ("ask", p.ask.value.as_str(), &p.ask.source),
            (
                "askFallback",
                p.ask_fallback.value.as_str(),
                &p.ask_fallback.source,
            ),
            (
                "permission",
                p.permission_mode.value.as_str(),
                &p.permission_mode.source,
            ),
        ];
        for (name, value, source) in rows {
            let _ = writeln!(out, "  {name:<12} {value:<10} ({source})");
        }
        let timeout = humantime::format_duration(p.timeout.value).to_string();
        let _ = writeln!(
            out,
            "  {:<12} {timeout:<10} ({}; at most {}, {})",
            "timeout",
            p.timeout.source,
            humantime::format_duration(p.max_timeout.value),
            p.max_timeout.source
        );
        let _ = writeln!(
            out,
            "  {:<12} {} processes ({}), {} MiB of memory ({})",
            "limits",
            p.max_processes.value,
            p.max_processes.source,
            p.max_memory.value >> 20,
            p.max_memory.source
        );
        if let Some(list) = &p.exec_allowlist {
            let _ = writeln!(out, "  {:<12} {}", "exec allow", list.describe());
        }
        if p.host.value == Host::Sandbox {
            let network = crate::PlannedNetwork::of(p);
            let _ = writeln!(out, "  {:<12} {network} ({})", "network", p.network.source);
        }
        if !p.env_names.is_empty() {
            let names: Vec<String> = p
                .env_names
                .iter()
                .map(|n| format!("{} ({})", n.value, n.source))
                .collect();
            let _ = writeln!(out, "  {:<12} {}", "env names", names.join(", "));
        }
        match &p.node {
            Some(n) => {
                let _ = writeln!(out, "  node         {:<10} ({})", n.value, n.source);
            }
            None => {
                let _ = writeln!(out, "  node         (none)");
            }
        }
        if let Some(b) = &p.node_binding {
            let _ = writeln!(
                out,
                "  binding      {:<10} ({}; this agent may use no other node)",
                b.value, b.source
            );
        }
        let approver = match (p.run_in_approver.value, p.host.value) {
            (false, _) => "no",
            (true, Host::Sandbox) => {
                "no (on for gateway and node hosts; sandboxed commands run in the sandbox)"
            }
            (true, _) => "yes: an approved command is run by the approver, in its own context",
        };
        let _ = writeln!(
            out,
            "  {:<12} {approver} ({})",
            "in approver", p.run_in_approver.source
        );
        if p.host.value == Host::Sandbox {
            let _ = writeln!(
                out,
                "  note: host=sandbox runs in the OS sandbox; security/ask apply to gateway and node hosts"
            );
        }
        out
    }
}

fn serde_reason<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
