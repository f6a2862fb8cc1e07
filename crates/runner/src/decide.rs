//! Steps one and two of the pipeline: read this host's approvals file once (the host
//! view) and explain the request once — resolved policy with sources, analysis,
//! decision and run plans. Everything after (routing, asking, running, reporting) reads
//! the [`Decided`] request; nothing is looked up or decided again.

use std::path::PathBuf;

use approvals::HostView;
use policy::{
    Confinement, EvalContext, ExeCache, Explanation, RejectedPattern, Requester, explain,
};

use crate::request::{ExecRequest, new_run_id};
use crate::runner::Runner;

/// A request with its one explanation, ready to be routed and run.
#[derive(Debug)]
pub struct Decided {
    /// The run id.
    pub run_id: String,
    /// The request as it arrived.
    pub request: ExecRequest,
    /// The working directory, made absolute.
    pub cwd: PathBuf,
    /// The policy's conclusion: resolved values, analysis, decision, plans.
    pub explanation: Explanation,
    /// The host file as read for this request (usage bookkeeping compares against it).
    pub(crate) view: HostView,
    /// What stands on this host that the result should say ([`RunReport::notices`](crate::RunReport::notices)).
    pub notices: Vec<String>,
}

impl Decided {
    /// Where the policy sends it.
    pub fn host(&self) -> policy::Host {
        self.explanation.policy.host.value
    }

    /// The hosts the agent's `egressAllow` (this host's approvals file, as the request
    /// read it) lets a proxied sandboxed run reach besides its plan's rules, one rule
    /// each; empty when the run's network is not Warden's proxy.
    pub fn egress_allow(&self) -> Vec<String> {
        let proxied = self
            .explanation
            .plans
            .as_written
            .as_ref()
            .is_ok_and(|p| p.limits.through_proxy());
        match (&self.view.file, proxied) {
            (Some(file), true) => file
                .egress_allow_for(&self.request.agent)
                .iter()
                .map(ToString::to_string)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Why this host's approvals file could not be used (then everything is denied).
    pub fn host_file_error(&self) -> Option<&str> {
        self.view.error.as_deref()
    }

    /// Allowlist patterns of the agent that are invalid and never match.
    pub fn rejected_patterns(&self) -> &[RejectedPattern] {
        self.view.allowlist.rejected()
    }
}

impl Runner {
    /// Read this host's approvals file and explain `request` against it and `config` (the
    /// snapshot the caller routes it by: [`Runner::config`]), `confinement` being how this host serves `host = sandbox` now (the route's fact:
    /// the decision and the plan say it, and an executor serving the plan otherwise
    /// refuses it).
    pub fn decide(
        &self,
        config: &policy::Config,
        request: ExecRequest,
        confinement: Confinement<'_>,
    ) -> Decided {
        let host = &self.host;
        let run_id = request.run_id.clone().unwrap_or_else(new_run_id);
        let view = host.store.host_view(Some(&request.agent));
        if let Some(err) = &view.error {
            tracing::warn!("approvals file unusable, denying: {err}");
        }
        let cwd = match &request.cwd {
            Some(c) if c.is_absolute() => c.clone(),
            Some(c) => host.default_cwd.join(c),
            None => host.default_cwd.clone(),
        };
        // One resolution per program per request: evaluation and the plans share it.
        let cache = ExeCache::new();
        let ctx = EvalContext {
            fs: host.fs.as_ref(),
            cwd: &cwd,
            trusted_path: &host.trusted_path,
            allowlist: view.allowlist.as_ref(),
            cache: Some(&cache),
            protected: &host.protected,
            writable: &config.sandbox.writable_paths,
        };
        let requester = Requester {
            agent: &request.agent,
            session_id: &request.session,
            session: &request.session_overrides,
            params: &request.params,
            env: &request.env,
        };
        let mut explanation = explain(
            request.command.input(),
            &requester,
            config,
            &view.ceiling,
            &ctx,
            &host.env,
            confinement,
        );
        // A denial that comes from an unusable file says so, and what to do: the agent
        // (and whoever reads its transcript) would otherwise see a deliberate deny.
        if let (Some(err), policy::Decision::Deny { rule, .. }) =
            (&view.error, &mut explanation.decision)
        {
            *rule = format!(
                "{rule}; this host's approvals file cannot be used ({err}), so everything is denied until it is fixed (`warden approvals get` shows the problem)"
            );
        }
        let mut notices = self.notices();
        notices.extend(view.notice.clone());
        Decided {
            run_id,
            request,
            cwd,
            explanation,
            view,
            notices,
        }
    }
}
