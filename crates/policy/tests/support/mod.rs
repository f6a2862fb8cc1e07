//! Helpers shared by the policy integration tests: an agent-less, session-less request
//! explained on a memory filesystem with `/usr/bin` as the trusted PATH.
#![allow(dead_code)]

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
    };
    let session = SessionOverrides::default();
    let who = Requester {
        agent: None,
        session: &session,
        params,
    };
    explain(input, &who, setup.config, setup.ceiling, &ctx)
}
