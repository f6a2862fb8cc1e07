//! Warden's policy engine: every decision about whether and where a command runs, as
//! pure code. No I/O of its own and no clock: inputs in, decision out. The one outside
//! fact it needs — which file a program name resolves to — is read through `caps::Fs`,
//! so the engine runs unchanged on the memory provider in tests.
//!
//! ```
//! use caps::{Fs, MemoryFs, WriteOptions};
//! use policy::{explain, Allowlist, CaseMode, CommandInput, Config, Confinement, EvalContext,
//!              ExecParams, HostCeiling, Launch, Requester, SessionOverrides, TrustedPath, Ask,
//!              AskFallback, Security};
//! use std::collections::BTreeMap;
//! use std::path::Path;
//!
//! let fs = MemoryFs::new();
//! fs.create_dir_all(Path::new("/usr/bin"), 0o755).unwrap();
//! fs.write(Path::new("/usr/bin/rg"), b"", WriteOptions { mode: 0o755, ..Default::default() }).unwrap();
//!
//! let config = Config::parse("[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"", Path::new("config.toml")).unwrap();
//! let ceiling = HostCeiling { security: Security::Allowlist, ask: Ask::OnMiss, ask_fallback: AskFallback::Deny };
//! let allowlist = Allowlist::compile(&["/usr/bin/rg".into()], Path::new("/home/u"), CaseMode::Sensitive);
//! let trusted = TrustedPath::parse("/usr/bin:/bin");
//! let ctx = EvalContext { fs: &fs, cwd: Path::new("/"), trusted_path: &trusted, allowlist: &allowlist, cache: None, protected: &[], writable: &[] };
//! let (session, params, env) = (SessionOverrides::default(), ExecParams::default(), BTreeMap::new());
//! let who = Requester { agent: "coder", session_id: "s1", session: &session, params: &params, env: &env };
//! let host_env = BTreeMap::from([("HOME".to_string(), "/home/u".to_string())]);
//!
//! // `Confinement` is how this host serves `host = sandbox` now (an OS sandbox here).
//! let sandboxed = Confinement::Sandbox;
//! let ok = explain(CommandInput::Shell("rg -n TODO"), &who, &config, &ceiling, &ctx, &host_env, sandboxed);
//! assert!(ok.decision.is_allow());
//! // What runs is the plan: the resolved file, under the name it was called by.
//! let plan = ok.plan_for(&ok.decision).unwrap();
//! assert!(matches!(&plan.launch, Launch::Exec { program, argv, .. }
//!     if program == "/usr/bin/rg" && argv[0] == "rg"));
//! let miss = explain(CommandInput::Shell("rg TODO > out.txt"), &who, &config, &ceiling, &ctx, &host_env, sandboxed);
//! assert!(!miss.decision.is_allow()); // a redirection is never allowlisted: ask
//! ```

#![forbid(unsafe_code)]

mod agent_id;
mod allow_always;
mod allowlist;
pub mod config;
mod config_edit_error;
mod confinement;
mod decision;
pub mod egress;
pub mod egress_gate;
mod env;
mod error;
mod evaluate;
mod exe;
mod exec_allowlist;
mod explain;
mod hex;
mod modes;
mod nodes;
mod plan;
mod profile_error;
pub mod profiles;
pub mod protected;
mod request;
mod resolve;
mod rules;
pub mod shell;
mod slash;
mod sourced;
mod word_pattern;

pub use agent_id::{AGENT_ID_RULE, is_agent_id};
pub use allow_always::{AllowAlways, AlwaysOption, Scope, Skipped, derive_allow_always};
pub use allowlist::{
    Allowlist, CaseMode, PatternKind, RejectedPattern, RuleMatch, escape_glob, validate_pattern,
};
pub use config::{
    AgentConfig, AuditSettings, Config, ExecSettings, GatewaySettings, NamespaceBuilder, RunLimits,
    SandboxBackend, SandboxNetwork, SandboxSettings,
    live::{LiveConfig, Reload},
};
pub use confinement::Confinement;
pub use decision::{
    AllowReason, ApproverAnswer, AskReason, Decision, DenyReason, after_ask, decide,
};
pub use env::{
    EnvNameError, HOST_FORWARDED, REQUEST_ALLOWED, build_child_env, check_extra_env_name,
    request_may_set,
};
pub use error::PolicyError;
pub use evaluate::{EvalContext, Evaluation, ExeCache, LeafMatch, Rebuilt, evaluate};
pub use exe::{Invocation, ResolveFailure, ResolvedExe, TrustedPath, resolve_executable};
pub use exec_allowlist::{ResolvedExecAllowlist, resolve_exec_allowlist};
pub use explain::{Explanation, Requester, explain};
pub use hex::hex;
pub use modes::{
    Ask, AskFallback, ExecAllowlistMode, Host, InvalidChoice, PermissionMode, Security,
};
pub use nodes::{MIN_ID_PREFIX, NodeInfo, normalize_name, select_node};
pub use plan::{
    Launch, PlanError, PlanRequest, PlannedExecAllowlist, PlannedLimits, PlannedNetwork, Plans,
    RunPlan, SHELL,
};
pub use profiles::{
    Examined, GrammarError, GrammarProblem, GrammarTrace, ProfileError, ProfileHit, Profiles,
    ProgramProblem, UnknownKind,
};
pub use request::{ArgsError, Command, ExecArgs, MAX_TIMEOUT_SECONDS, is_env_name};
pub use resolve::{
    ExecParams, HostCeiling, ResolvedEgress, ResolvedPolicy, SessionOverrides, TimeoutTooLong,
    resolve, resolve_host,
};
pub use rules::{ArgPatternError, ArgsMatch, Examples, Looser, RuleSpec};
pub use shell::{Chain, CommandInput, Miss, MissReason, NotLiteral, Op, Segment, analyze};
pub use slash::{SlashOutcome, apply as apply_slash_command, is_slash_command};
pub use sourced::{Source, Sourced};
pub use word_pattern::{PatternError, escape_word};
