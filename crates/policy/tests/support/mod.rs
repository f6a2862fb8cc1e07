//! Helpers shared by the policy integration tests: a request of an unconfigured agent,
//! without session overrides, explained on a memory filesystem with `/usr/bin` as the
//! trusted PATH.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use caps::MemoryFs;
use policy::{
    Allowlist, CommandInput, Config, EvalContext, ExecParams, Explanation, HostCeiling, Requester,
    SessionOverrides, TrustedPath, explain,
};

/// What a request is explained against, besides the command.
pub struct Setup<'a> {
    pub fs: &'a MemoryFs,
    pub allowlist: &'a Allowlist,
    pub cwd: &'a str,
    pub config: &'a Config,
    pub ceiling: &'a HostCeiling,
}

/// `explain(input)` for a request carrying `params` and nothing else.
pub fn explain_request(
    setup: &Setup<'_>,
    params: &ExecParams,
    input: CommandInput<'_>,
) -> Explanation {
    let trusted = TrustedPath::parse("/usr/bin");
    let ctx = EvalContext {
        fs: setup.fs,
        cwd: Path::new(setup.cwd),
        trusted_path: &trusted,
        allowlist: setup.allowlist,
        cache: None,
        protected: &[],
        writable: &[],
    };
    let session = SessionOverrides::default();
    let env = BTreeMap::new();
    let who = Requester {
        agent: "tester",
        session_id: "s",
        session: &session,
        params,
        env: &env,
    };
    explain(
        input,
        &who,
        setup.config,
        setup.ceiling,
        &ctx,
        &BTreeMap::new(),
        policy::Confinement::Sandbox,
    )
}
