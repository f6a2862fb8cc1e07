//! Tests of `config`.

use super::*;

fn parse(text: &str) -> Result<Config, PolicyError> {
    Config::parse(text, Path::new("/home/u/.warden/config.toml"))
}

#[test]
fn full_config_parses() {
    let c = parse(
        r#"
            [tools.exec]
            host = "gateway"
            security = "allowlist"
            ask = "on-miss"
            node = "build-box"
            env = ["RUST_LOG"]
            timeout = "2m"
            max_timeout = 600

            [[agents.list]]
            id = "coder"
            tools.exec.security = "full"
            tools.exec.ask = "always"
            "#,
    )
    .unwrap();
    assert_eq!(c.exec.host, Some(Host::Gateway));
    assert_eq!(c.exec.security, Some(Security::Allowlist));
    assert_eq!(c.exec.node.as_deref(), Some("build-box"));
    assert_eq!(c.exec.timeout, Some(Duration::from_secs(120)));
    assert_eq!(c.max_timeout, Some(Duration::from_secs(600)));
    let coder = c.agent("coder").unwrap();
    assert_eq!(coder.exec.security, Some(Security::Full));
    assert_eq!(coder.exec.ask, Some(Ask::Always));
    assert!(c.agent("other").is_none());
}

#[test]
fn sandbox_settings_parse_and_are_validated() {
    let c = parse(
            "[sandbox]\nbackend = \"bwrap\"\nnetwork = true\nlandlock = \"required\"\npermission_mode = \"readonly\"\n\
             writable_paths = [\"/work\"]\nreadable_extra_paths = [\"/opt/data\"]\n\
             [[agents.list]]\nid = \"a\"\nsandbox.permission_mode = \"unrestricted\"\n",
        )
        .unwrap();
    assert_eq!(c.sandbox.backend, SandboxBackend::Bwrap);
    assert_eq!(c.sandbox.builder, NamespaceBuilder::Auto);
    for (value, builder) in [
        ("auto", NamespaceBuilder::Auto),
        ("warden", NamespaceBuilder::Warden),
        ("bubblewrap", NamespaceBuilder::Bubblewrap),
    ] {
        let c = parse(&format!("[sandbox]\nbuilder = \"{value}\"\n")).unwrap();
        assert_eq!(c.sandbox.builder, builder);
    }
    assert_eq!(c.sandbox.network, crate::SandboxNetwork::On);
    let proxied = parse(
        "[sandbox]\nnetwork = \"proxy\"\n[sandbox.egress]\nallow = [\"PyPI.org.\", \"*.pythonhosted.org:443\"]\ndeny = [\"evil.pypi.org\"]",
    )
    .unwrap();
    assert_eq!(proxied.sandbox.network, crate::SandboxNetwork::Proxy);
    let shown = crate::ResolvedEgress::of(&proxied.sandbox.egress);
    assert_eq!(shown.allow, ["pypi.org", "*.pythonhosted.org:443"]);
    assert_eq!(shown.deny, ["evil.pypi.org"]);
    // The normal form reads back as the same rules (what a plan carries is what runs).
    assert_eq!(shown.rules(), Some(proxied.sandbox.egress.clone()));
    assert_eq!(
        c.sandbox.writable_paths,
        vec![std::path::PathBuf::from("/work")]
    );
    assert_eq!(c.sandbox.permission_mode, Some(PermissionMode::Readonly));
    assert_eq!(
        c.agent("a").and_then(|a| a.permission_mode),
        Some(PermissionMode::Unrestricted)
    );
    for (text, expected) in [
        ("[sandbox]\nbackend = \"vm\"", "`sandbox.backend`"),
        (
            "[sandbox]\nbuilder = \"bwrap\"",
            "auto, bubblewrap or warden",
        ),
        ("[sandbox]\nwritable_paths = [\"relative\"]", "absolute"),
        ("[sandbox]\nwritable_paths = [\"/a/../etc\"]", "`..`"),
        (
            "[sandbox]\nnetwork = \"yes\"",
            "true or false, or \"proxy\"",
        ),
        (
            "[sandbox]\nnetwork = \"proxy\"\n[sandbox.egress]\nallow = [\"*.com\"]",
            "sandbox.egress.allow",
        ),
        (
            "[sandbox.egress]\ndeny = \"example.com\"",
            "a list of hosts",
        ),
        ("[sandbox.egress]\nallowed = []", "takes allow, deny"),
        (
            "[sandbox]\nbackend = \"container\"",
            "sandbox.container.name",
        ),
        ("[sandbox]\ncontainer.engine = \"lxc\"", "podman or docker"),
        ("[sandbox]\nwat = 1", "unknown key `sandbox.wat`"),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

/// An agent's `sandbox.egress`: its allow list replaces the global one, its deny list
/// adds to the global one (a global deny is never lifted), an agent without one has the
/// global rules, and a bad rule in it is refused naming the agent's key.
#[test]
fn an_agents_egress_replaces_the_allow_list_and_adds_to_the_deny_list() {
    let c = parse(
        "[sandbox]\nnetwork = \"proxy\"\n[sandbox.egress]\nallow = [\"pypi.org\"]\ndeny = [\"*.evil.test\"]\n\
         [[agents.list]]\nid = \"ci\"\nsandbox.egress.allow = [\"registry.npmjs.org\"]\n\
         sandbox.egress.deny = [\"bad.npmjs.org\", \"*.evil.test\"]\n\
         [[agents.list]]\nid = \"denier\"\nsandbox.egress.deny = [\"files.pypi.org\"]\n\
         [[agents.list]]\nid = \"plain\"\n",
    )
    .unwrap();
    let ci = crate::ResolvedEgress::for_agent(&c, Some("ci"));
    assert_eq!(ci.allow, ["registry.npmjs.org"]);
    assert_eq!(ci.deny, ["*.evil.test", "bad.npmjs.org"], "no rule twice");
    assert_eq!(ci.agent.as_deref(), Some("ci"));
    // Only a deny list: the global allow list stands.
    let denier = crate::ResolvedEgress::for_agent(&c, Some("denier"));
    assert_eq!(denier.allow, ["pypi.org"]);
    assert_eq!(denier.deny, ["*.evil.test", "files.pypi.org"]);
    for agent in [Some("plain"), Some("unknown"), None] {
        let global = crate::ResolvedEgress::for_agent(&c, agent);
        assert_eq!(
            global,
            crate::ResolvedEgress::of(&c.sandbox.egress),
            "{agent:?}"
        );
        assert_eq!(global.agent, None);
    }
    // The plan's rules read back as the same rules.
    let rules = ci.rules().unwrap();
    assert_eq!((rules.allow.len(), rules.deny.len()), (1, 2));
    for (text, expected) in [
        (
            "[[agents.list]]\nid = \"ci\"\nsandbox.egress.allow = [\"*.com\"]",
            "agents.list[0].sandbox.egress.allow",
        ),
        (
            "[[agents.list]]\nid = \"ci\"\nsandbox.egress.allowed = []",
            "takes allow, deny",
        ),
        (
            "[[agents.list]]\nid = \"ci\"\nsandbox.egress = \"pypi.org\"",
            "agents.list[0].sandbox.egress",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn gateway_session_bounds_parse_and_are_validated() {
    let c = parse(
        "[gateway]\nmax_sessions_per_credential = 4\nsession_idle_timeout = \"90s\"\n\
             max_streams_per_session = 2\nmax_runs_per_agent = 3\nmax_connections = 100\n\
             max_connections_per_peer = 50\nheader_read_timeout = \"500ms\"\n\
             connection_idle_timeout = 20\nbody_read_timeout = \"1m\"\n\
             keep_runs_after_session = \"10m\"\n",
    )
    .unwrap();
    assert_eq!(
        c.gateway.keep_runs_after_session,
        Some(Duration::from_secs(600))
    );
    assert_eq!(c.gateway.max_sessions_per_credential, Some(4));
    assert_eq!(
        c.gateway.session_idle_timeout,
        Some(Duration::from_secs(90))
    );
    assert_eq!(c.gateway.max_streams_per_session, Some(2));
    assert_eq!(c.gateway.max_runs_per_agent, Some(3));
    assert_eq!(c.gateway.max_connections, Some(100));
    assert_eq!(c.gateway.max_connections_per_peer, Some(50));
    assert_eq!(
        c.gateway.header_read_timeout,
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        c.gateway.connection_idle_timeout,
        Some(Duration::from_secs(20))
    );
    assert_eq!(c.gateway.body_read_timeout, Some(Duration::from_secs(60)));
    for (bad, key) in [
        (
            "max_sessions_per_credential = 0",
            "gateway.max_sessions_per_credential",
        ),
        (
            "max_sessions_per_credential = \"many\"",
            "gateway.max_sessions_per_credential",
        ),
        (
            "session_idle_timeout = \"soon\"",
            "gateway.session_idle_timeout",
        ),
        ("sessions = 3", "gateway.sessions"),
        ("max_connections = 0", "gateway.max_connections"),
        ("max_connections = 1000000", "gateway.max_connections"),
        ("max_runs_per_agent = -1", "gateway.max_runs_per_agent"),
        ("header_read_timeout = 0", "gateway.header_read_timeout"),
        ("body_read_timeout = \"never\"", "gateway.body_read_timeout"),
        (
            "keep_runs_after_session = \"25h\"",
            "gateway.keep_runs_after_session",
        ),
        (
            "keep_runs_after_session = 0",
            "gateway.keep_runs_after_session",
        ),
    ] {
        let err = parse(&format!("[gateway]\n{bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{bad}: {err}");
    }
}

#[test]
fn empty_config_is_all_defaults() {
    assert_eq!(parse("").unwrap(), Config::default());
}

#[test]
fn errors_name_the_key_the_value_and_the_file() {
    let cases = [
        (
            "[tools.exec]\nhots = \"gateway\"",
            "unknown key `tools.exec.hots`",
        ),
        (
            "[tools.exec]\nsecurity = \"maybe\"",
            "invalid value \"maybe\" for `tools.exec.security`: expected one of deny, allowlist, full",
        ),
        (
            "[tools.exec]\nask = 3",
            "invalid value 3 for `tools.exec.ask`: expected a string",
        ),
        ("[tool.exec]\nask = \"off\"", "unknown key `tool`"),
        (
            "[agents.coder]\ntools.exec.host = \"gateway\"",
            "unknown key `agents.coder`: agents are entries of a list — write `[[agents.list]]` with `id = \"coder\"`",
        ),
        (
            "[[agents.list]]\nid = \"a\"\ntools.exec.host = \"moon\"",
            "`agents.list[0].tools.exec.host`",
        ),
        (
            "[[agents.list]]\ntools.exec.host = \"gateway\"",
            "agents.list[0].id",
        ),
        (
            "[[agents.list]]\nid = \"a\"\n[[agents.list]]\nid = \"a\"",
            "agent ids must be unique",
        ),
        (
            "[[agents.list]]\nid = \"a\"\ncolour = \"red\"",
            "unknown key `agents.list[0].colour`",
        ),
        (
            "[[agents.list]]\nid = \"a\"\ntools.exec.max_timeout = \"5s\"",
            "unknown key `agents.list[0].tools.exec.max_timeout`",
        ),
        (
            "[[agents.list]]\nid = \"a\"\ntools.exec.timeout = \"2h\"",
            "`agents.list[0].tools.exec.timeout`",
        ),
        ("[tools.exec]\nenv = [\"LD_PRELOAD\"]", "`tools.exec.env`"),
        ("[tools.exec]\ntimeout = \"soon\"", "`tools.exec.timeout`"),
        (
            "[tools.exec]\ntimeout = \"10m\"\nmax_timeout = \"1m\"",
            "at most tools.exec.max_timeout",
        ),
        ("[tools.exec\n", "config.toml"),
    ];
    for (text, expected) in cases {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text:?}: {err}");
        assert!(
            err.contains("/home/u/.warden/config.toml"),
            "{text:?}: {err}"
        );
    }
}

#[test]
fn run_in_approver_is_read_at_both_levels_and_must_be_a_bool() {
    let c = parse(
            "[tools.exec]\nrun_in_approver = true\n[[agents.list]]\nid = \"a\"\ntools.exec.run_in_approver = false\n",
        )
        .unwrap();
    assert_eq!(c.exec.run_in_approver, Some(true));
    assert_eq!(
        c.agent("a").and_then(|a| a.exec.run_in_approver),
        Some(false)
    );
    let err = parse("[tools.exec]\nrun_in_approver = \"yes\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tools.exec.run_in_approver") && err.contains("true or false"),
        "{err}"
    );
}

#[test]
fn run_limits_are_read_at_both_levels_and_validated() {
    let c = parse(
            "[tools.exec]\nmax_processes = 512\nmax_memory = \"2GiB\"\n[[agents.list]]\nid = \"a\"\ntools.exec.max_memory = 268435456\n",
        )
        .unwrap();
    assert_eq!(c.exec.max_processes, Some(512));
    assert_eq!(c.exec.max_memory, Some(2 << 30));
    assert_eq!(
        c.agent("a").and_then(|a| a.exec.max_memory),
        Some(256 << 20)
    );
    for (bad, key) in [
        ("max_processes = 3", "tools.exec.max_processes"),
        ("max_processes = \"many\"", "tools.exec.max_processes"),
        ("max_memory = \"lots\"", "tools.exec.max_memory"),
        ("max_memory = \"1MiB\"", "tools.exec.max_memory"),
        ("max_memory = \"3 parsecs\"", "tools.exec.max_memory"),
    ] {
        let err = parse(&format!("[tools.exec]\n{bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{bad}: {err}");
    }
    let small = RunLimits::for_host(1 << 30);
    assert_eq!(small.max_memory, 512 << 20);
    assert_eq!(RunLimits::for_host(64 << 30).max_memory, DEFAULT_MAX_MEMORY);
}

#[test]
fn timeouts_are_read_at_both_levels() {
    let c = parse(
            "[tools.exec]\ntimeout = \"1m\"\nmax_timeout = \"10m\"\n[[agents.list]]\nid = \"a\"\ntools.exec.timeout = \"2m\"",
        )
        .unwrap();
    assert_eq!(c.exec.timeout, Some(Duration::from_secs(60)));
    assert_eq!(c.max_timeout, Some(Duration::from_secs(600)));
    assert_eq!(
        c.agent("a").and_then(|a| a.exec.timeout),
        Some(Duration::from_secs(120))
    );
    // Seconds as a number or as a string of digits read alike; "0" is still refused.
    for text in [
        "timeout = 5",
        "timeout = \"5\"",
        "timeout = \" 5 \"",
        "timeout = \"5s\"",
    ] {
        let c = parse(&format!("[tools.exec]\n{text}")).unwrap();
        assert_eq!(c.exec.timeout, Some(Duration::from_secs(5)), "{text}");
    }
    assert!(parse("[tools.exec]\ntimeout = \"0\"").is_err());
}

#[test]
fn loads_through_fs_and_treats_a_missing_file_as_defaults() {
    let fs = caps::MemoryFs::new();
    assert_eq!(
        Config::load(&fs, Path::new("/h/config.toml")).unwrap(),
        Config::default()
    );
    fs.create_dir_all(Path::new("/h"), 0o700).unwrap();
    fs.write(
        Path::new("/h/config.toml"),
        b"[tools.exec]\nhost = \"node\"",
        caps::WriteOptions::default(),
    )
    .unwrap();
    assert_eq!(
        Config::load(&fs, Path::new("/h/config.toml"))
            .unwrap()
            .exec
            .host,
        Some(Host::Node)
    );
}

#[test]
fn a_misspelled_key_gets_the_key_it_is_closest_to_and_otherwise_the_keys_its_table_takes() {
    let cases = [
        (
            "[tools.exec]\nhots = \"gateway\"",
            "did you mean `tools.exec.host`?",
        ),
        ("[tool.exec]\nask = \"off\"", "did you mean `tools`?"),
        (
            "[gateway]\nmax-runs-per-agent = 3",
            "did you mean `gateway.max_runs_per_agent`?",
        ),
        (
            "[sandbox]\nwriteable_paths = []",
            "did you mean `sandbox.writable_paths`?",
        ),
        (
            "[sandbox]\nPermission_Mode = \"readonly\"",
            "did you mean `sandbox.permission_mode`?",
        ),
        (
            "[[agents.list]]\nid = \"a\"\ncolour = \"red\"",
            "`agents.list[0]` takes id, tools, sandbox",
        ),
        (
            "[sandbox]\nwat = 1",
            "`sandbox` takes backend, builder, network",
        ),
        (
            "[nonsense]\nx = 1",
            "the file's tables are tools, agents, sandbox, gateway",
        ),
    ];
    for (text, hint) in cases {
        let e = Config::parse(text, Path::new("config.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(hint), "{text:?}: {e}");
    }
}
