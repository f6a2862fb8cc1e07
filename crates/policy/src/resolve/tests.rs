//! Tests of `resolve`.

use super::*;
use crate::config::{AgentConfig, ExecSettings};
use proptest::prelude::*;

const OPEN: HostCeiling = HostCeiling {
    security: Security::Full,
    ask: Ask::Off,
    ask_fallback: AskFallback::Deny,
};

fn config() -> Config {
    Config {
        exec: ExecSettings {
            host: Some(Host::Gateway),
            security: Some(Security::Allowlist),
            ask: Some(Ask::OnMiss),
            ..Default::default()
        },
        agents: vec![AgentConfig {
            id: "coder".into(),
            exec: ExecSettings {
                security: Some(Security::Full),
                ask: Some(Ask::Off),
                node: Some("box".into()),
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn built_in_defaults_are_secure() {
    let r = resolve(
        &ExecParams::default(),
        &SessionOverrides::default(),
        &Config::default(),
        None,
        &OPEN,
    );
    assert_eq!(
        (r.host.value, r.host.source),
        (Host::Sandbox, Source::Default)
    );
    assert_eq!(
        (r.security.value, r.security.source),
        (Security::Deny, Source::Default)
    );
    assert_eq!((r.ask.value, r.ask.source), (Ask::OnMiss, Source::Default));
}

#[test]
fn tool_param_then_session_then_agent_then_global() {
    let c = config();
    let none = ExecParams::default();
    let no_session = SessionOverrides::default();
    // global
    let r = resolve(&none, &no_session, &c, Some("other"), &OPEN);
    assert_eq!(
        (r.security.value, r.security.source),
        (Security::Allowlist, Source::Global)
    );
    assert_eq!(r.host.source, Source::Global);
    // agent
    let r = resolve(&none, &no_session, &c, Some("coder"), &OPEN);
    assert_eq!(
        (r.security.value, r.security.source),
        (Security::Full, Source::Agent)
    );
    assert_eq!(
        r.node_binding,
        Some(Sourced::new("box".to_owned(), Source::Agent))
    );
    // session
    let session = SessionOverrides {
        security: Some(Security::Allowlist),
        ..Default::default()
    };
    let r = resolve(&none, &session, &c, Some("coder"), &OPEN);
    assert_eq!(
        (r.security.value, r.security.source),
        (Security::Allowlist, Source::Session)
    );
    // tool param
    let params = ExecParams {
        security: Some(Security::Deny),
        ..Default::default()
    };
    let r = resolve(&params, &session, &c, Some("coder"), &OPEN);
    assert_eq!(
        (r.security.value, r.security.source),
        (Security::Deny, Source::ToolParam)
    );
}

#[test]
fn the_host_file_is_a_ceiling() {
    let c = config();
    let ceiling = HostCeiling {
        security: Security::Allowlist,
        ask: Ask::Always,
        ask_fallback: AskFallback::Deny,
    };
    let params = ExecParams {
        security: Some(Security::Full),
        ask: Some(Ask::Off),
        ..Default::default()
    };
    let r = resolve(
        &params,
        &SessionOverrides::default(),
        &c,
        Some("coder"),
        &ceiling,
    );
    assert_eq!(
        (r.security.value, r.security.source),
        (Security::Allowlist, Source::HostFile)
    );
    assert_eq!((r.ask.value, r.ask.source), (Ask::Always, Source::HostFile));
    let r = resolve(
        &params,
        &SessionOverrides::default(),
        &c,
        Some("coder"),
        &HostCeiling::DENY_ALL,
    );
    assert_eq!(r.security.value, Security::Deny);
}

#[test]
fn permission_mode_timeout_and_env_names_come_with_their_sources() {
    let mut c = config();
    c.sandbox.permission_mode = Some(PermissionMode::Approval);
    c.agents[0].permission_mode = Some(PermissionMode::Unrestricted);
    c.agents[0].exec.timeout = Some(std::time::Duration::from_secs(90));
    c.agents[0].exec.env = vec!["RUST_LOG".into()];
    c.exec.env = vec!["CI".into()];
    let none = ExecParams::default();
    let r = resolve(
        &none,
        &SessionOverrides::default(),
        &c,
        Some("coder"),
        &OPEN,
    );
    assert_eq!(
        (r.permission_mode.value, r.permission_mode.source),
        (PermissionMode::Unrestricted, Source::Agent)
    );
    assert_eq!(
        (r.timeout.value.as_secs(), r.timeout.source),
        (90, Source::Agent)
    );
    assert_eq!(r.max_timeout.source, Source::Default);
    let names: Vec<(&str, Source)> = r
        .env_names
        .iter()
        .map(|n| (n.value.as_str(), n.source))
        .collect();
    assert_eq!(
        names,
        vec![("CI", Source::Global), ("RUST_LOG", Source::Agent)]
    );
    let r = resolve(
        &none,
        &SessionOverrides::default(),
        &c,
        Some("other"),
        &OPEN,
    );
    assert_eq!(r.permission_mode.source, Source::Global);
    assert_eq!(r.timeout.source, Source::Default);
    // A session may tighten the configured mode, never loosen it.
    let session = SessionOverrides {
        permission_mode: Some(PermissionMode::Readonly),
        timeout: Some(std::time::Duration::from_secs(5)),
        ..Default::default()
    };
    let r = resolve(&none, &session, &c, Some("coder"), &OPEN);
    assert_eq!(
        (r.permission_mode.value, r.permission_mode.source),
        (PermissionMode::Readonly, Source::Session)
    );
    assert_eq!(
        (r.timeout.value.as_secs(), r.timeout.source),
        (5, Source::Session)
    );
    let looser = SessionOverrides {
        permission_mode: Some(PermissionMode::Unrestricted),
        ..Default::default()
    };
    let r = resolve(&none, &looser, &c, Some("other"), &OPEN);
    assert_eq!(
        (r.permission_mode.value, r.permission_mode.source),
        (PermissionMode::Approval, Source::Global)
    );
    // A tool parameter over the maximum is refused with both sources named.
    let params = ExecParams {
        timeout: Some(std::time::Duration::from_secs(7200)),
        ..Default::default()
    };
    let r = resolve(&params, &session, &c, Some("coder"), &OPEN);
    let err = r.checked_timeout().unwrap_err().to_string();
    assert!(
        err.contains("tool param") && err.contains("built-in default"),
        "{err}"
    );
}

#[test]
fn run_in_approver_comes_from_the_agent_then_global_and_never_for_the_sandbox() {
    let mut c = config();
    let none = ExecParams::default();
    let no_session = SessionOverrides::default();
    let r = resolve(&none, &no_session, &c, Some("coder"), &OPEN);
    assert_eq!(
        (r.run_in_approver.value, r.run_in_approver.source),
        (false, Source::Default)
    );
    c.exec.run_in_approver = Some(true);
    c.agents[0].exec.run_in_approver = Some(false);
    let r = resolve(&none, &no_session, &c, Some("coder"), &OPEN);
    assert_eq!(
        (r.run_in_approver.value, r.run_in_approver.source),
        (false, Source::Agent)
    );
    let r = resolve(&none, &no_session, &c, Some("other"), &OPEN);
    assert_eq!(
        (r.run_in_approver.value, r.run_in_approver.source),
        (true, Source::Global)
    );
    assert!(r.runs_in_approver(), "host=gateway from the global table");
    let sandboxed = ExecParams {
        host: Some(Host::Sandbox),
        ..Default::default()
    };
    let r = resolve(&sandboxed, &no_session, &c, Some("other"), &OPEN);
    assert!(r.run_in_approver.value && !r.runs_in_approver());
}

fn sec() -> impl Strategy<Value = Option<Security>> {
    proptest::option::of(prop_oneof![
        Just(Security::Deny),
        Just(Security::Allowlist),
        Just(Security::Full)
    ])
}
fn ask() -> impl Strategy<Value = Option<Ask>> {
    proptest::option::of(prop_oneof![
        Just(Ask::Off),
        Just(Ask::OnMiss),
        Just(Ask::Always)
    ])
}

proptest! {
    /// Nothing at any level can loosen the host file.
    #[test]
    fn nothing_loosens_the_ceiling(
        p_sec in sec(), s_sec in sec(), a_sec in sec(), g_sec in sec(),
        p_ask in ask(), s_ask in ask(), a_ask in ask(), g_ask in ask(),
        c_sec in sec(), c_ask in ask(),
    ) {
        let ceiling = HostCeiling {
            security: c_sec.unwrap_or(Security::Deny),
            ask: c_ask.unwrap_or(Ask::OnMiss),
            ask_fallback: AskFallback::Deny,
        };
        let config = Config {
            exec: ExecSettings { security: g_sec, ask: g_ask, ..Default::default() },
            agents: vec![AgentConfig { id: "a".into(), exec: ExecSettings { security: a_sec, ask: a_ask, ..Default::default() }, ..Default::default() }],
            ..Default::default()
        };
        let params = ExecParams { security: p_sec, ask: p_ask, ..Default::default() };
        let session = SessionOverrides { security: s_sec, ask: s_ask, ..Default::default() };
        let r = resolve(&params, &session, &config, Some("a"), &ceiling);
        prop_assert!(r.security.value <= ceiling.security);
        prop_assert!(r.ask.value >= ceiling.ask);
        // And a tighter request is honoured.
        if let Some(p) = p_sec { prop_assert!(r.security.value <= p); }
        if let Some(p) = p_ask { prop_assert!(r.ask.value >= p); }
    }
}
