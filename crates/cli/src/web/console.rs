//! The operator console's reads and edits of this host's policy: `exec-approvals.json`
//! through the same store code as `warden approvals …` (locked, atomic, and
//! compare-and-swap on the hash the page showed, so an edit made elsewhere in between is
//! a conflict, never overwritten), `config.toml` read as every exec reads it and its node
//! bindings edited the same way (`bindings.rs`), and the explanation `warden policy
//! explain` prints.

use approvals::{Ceilings, StoreError};
use policy::{
    ArgsMatch, Ask, AskFallback, Config, ExecParams, Host, RuleSpec, Security, SessionOverrides,
};
use runner::{Command, ExecRequest};
use serde::{Deserialize, Serialize};

use super::App;
use super::bindings::{self, BindingError, BindingView, NodesView};
use crate::host::HostFacts;

/// One allowlist entry as the page shows it (text escaped as prompts are).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    /// The pattern exactly as stored.
    pattern: String,
    /// The pattern as shown.
    shown: String,
    /// The whole rule as shown: the pattern, its argument patterns (`…` a prefix,
    /// `(exactly)`), the profile flags it allows.
    description: String,
    /// The rule exactly as stored, examples aside (what a removal names).
    rule: RuleSpec,
    /// How many load-time examples it carries.
    examples: usize,
    last_used_at: Option<u64>,
    last_used_command: Option<String>,
    last_resolved_path: Option<String>,
}

/// One settings row: the values set in the file (`null`: inherited) and the effective
/// ceiling.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsView {
    security: Option<Security>,
    ask: Option<Ask>,
    ask_fallback: Option<AskFallback>,
    effective: policy::HostCeiling,
}

/// An agent as the page shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    id: String,
    shown: String,
    in_file: bool,
    in_config: bool,
    settings: SettingsView,
    allowlist: Vec<EntryView>,
    /// Its `egressAllow` rules, as stored (the page shows them escaped).
    egress_allow: Vec<EgressView>,
    /// Its resolved policy for a request without parameters, as `policy explain` shows.
    policy: String,
    /// Its node binding (only when the registry has a node).
    binding: Option<BindingView>,
}

/// One `egressAllow` rule as the page shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressView {
    /// As stored (what a removal names).
    rule: String,
    /// Escaped for display.
    shown: String,
}

/// The whole console.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleView {
    /// The version every edit is based on.
    hash: String,
    path: String,
    /// Why the file cannot be used (then nothing can be edited here).
    error: Option<String>,
    /// Why config.toml cannot be read (policies are then not shown).
    config_error: Option<String>,
    /// The version of config.toml node-binding edits are based on.
    config_hash: String,
    config_path: String,
    defaults: Option<SettingsView>,
    agents: Vec<AgentView>,
    /// Node bindings: present only when the node registry has a node.
    nodes: Option<NodesView>,
    /// The registry's fingerprint this view was made from.
    nodes_hash: String,
}

/// The console as of now.
pub fn view(app: &App) -> ConsoleView {
    let (facts, store) = (&app.facts, &app.store);
    let path = store.config().path.display().to_string();
    // Parsed from the very bytes whose version edits are based on.
    let (config, config_error, config_hash) = match app.config.read() {
        Ok(version) => match facts.parse_config(version.text.as_deref()) {
            Ok(c) => (c, None, version.hash),
            Err(e) => (
                Config::default(),
                Some(format!(
                    "{e:#} — a gateway, `warden mcp` or node already running keeps its last good configuration in force (and says so in every result) until the file is fixed"
                )),
                version.hash,
            ),
        },
        Err(e) => (Config::default(), Some(e.clone()), format!("error: {e}")),
    };
    let config_path = app.config.path().display().to_string();
    let registry = app.registry.list().map_err(|e| e.to_string());
    let nodes_hash = bindings::nodes_fingerprint(&registry);
    let nodes = bindings::nodes_view(&config, config_error.as_deref(), &registry);
    let node_list: &[bridge::NodeEntry] = registry.as_deref().map_or(&[], |l| l.as_slice());
    let snapshot = match store.load() {
        Ok(s) => s,
        Err(e) => {
            return ConsoleView {
                hash: String::new(),
                path,
                error: Some(e.to_string()),
                config_error,
                config_hash,
                config_path,
                defaults: None,
                agents: Vec::new(),
                nodes,
                nodes_hash,
            };
        }
    };
    let file = &snapshot.file;
    let mut ids: Vec<String> = file.agents.keys().cloned().collect();
    for agent in &config.agents {
        if !ids.contains(&agent.id) {
            ids.push(agent.id.clone());
        }
    }
    let agents = ids
        .into_iter()
        .map(|id| {
            let entry = file.agents.get(&id);
            let set = entry.map(|e| e.ceilings).unwrap_or_default();
            let effective = file.ceiling_for(Some(&id));
            let policy = match &config_error {
                Some(_) => "config.toml cannot be read (see above)".to_owned(),
                None => policy::resolve(
                    &ExecParams::default(),
                    &SessionOverrides::default(),
                    &config,
                    Some(&id),
                    &effective,
                )
                .to_text(),
            };
            AgentView {
                shown: approvals::display::escape(&id),
                in_file: entry.is_some(),
                in_config: config.agent(&id).is_some(),
                settings: SettingsView {
                    security: set.security,
                    ask: set.ask,
                    ask_fallback: set.ask_fallback,
                    effective,
                },
                allowlist: entry
                    .map(|e| {
                        e.allowlist
                            .iter()
                            .map(|a| EntryView {
                                pattern: a.pattern.clone(),
                                shown: approvals::display::escape(&a.pattern),
                                description: approvals::display::escape(&a.rule().describe()),
                                rule: RuleSpec {
                                    examples: Default::default(),
                                    ..a.rule()
                                },
                                examples: a
                                    .examples
                                    .as_ref()
                                    .map_or(0, |e| e.matches.len() + e.not_matches.len()),
                                last_used_at: a.last_used_at,
                                last_used_command: a
                                    .last_used_command
                                    .as_deref()
                                    .map(approvals::display::escape),
                                last_resolved_path: a
                                    .last_resolved_path
                                    .as_deref()
                                    .map(approvals::display::escape),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                egress_allow: entry
                    .map(|e| {
                        e.egress_allow
                            .iter()
                            .map(|rule| EgressView {
                                rule: rule.clone(),
                                shown: approvals::display::escape(rule),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                policy,
                binding: nodes
                    .is_some()
                    .then(|| bindings::binding_view(&config, Some(&id), node_list)),
                id,
            }
        })
        .collect();
    let d = file.defaults.ceilings;
    ConsoleView {
        hash: snapshot.hash.clone(),
        path,
        error: None,
        config_error,
        config_hash,
        config_path,
        nodes,
        nodes_hash,
        defaults: Some(SettingsView {
            security: d.security,
            ask: d.ask,
            ask_fallback: d.ask_fallback,
            effective: file.ceiling_for(None),
        }),
        agents,
    }
}

/// An edit from the page, based on the version with hash `base`.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Edit {
    /// Add one entry to an agent's allowlist: a pattern, optionally with argument
    /// patterns and the profile flags it allows (as `warden approvals allowlist add
    /// --arg … --exact --allow-flag …`).
    AddPattern {
        /// The version shown.
        base: String,
        /// The agent.
        agent: String,
        /// The pattern.
        pattern: String,
        /// Argument patterns, one per word after the program; none: any arguments.
        #[serde(default)]
        args: Vec<String>,
        /// The arguments must be exactly `args` (else they start with them).
        #[serde(default)]
        exact: bool,
        /// Profile hits the entry allows by name.
        #[serde(default, rename = "allowFlags")]
        allow_flags: Vec<String>,
    },
    /// Remove the one entry that is `rule` (pattern, argument rules, allowed flags).
    RemoveRule {
        /// The version shown.
        base: String,
        /// The agent.
        agent: String,
        /// The rule, as the page was given it.
        rule: RuleSpec,
    },
    /// Remove an `egressAllow` rule (compared as a rule).
    RemoveEgress {
        /// The version shown.
        base: String,
        /// The agent.
        agent: String,
        /// The rule, as stored.
        rule: String,
    },
    /// Remove every entry with this pattern, named exactly as stored.
    RemovePattern {
        /// The version shown.
        base: String,
        /// The agent.
        agent: String,
        /// The pattern.
        pattern: String,
    },
    /// Set the defaults (`agent` null) or an agent's settings; null values inherit.
    Settings {
        /// The version shown.
        base: String,
        /// The agent, or none for the host-wide defaults.
        agent: Option<String>,
        /// Security ceiling.
        security: Option<Security>,
        /// Ask floor.
        ask: Option<Ask>,
        /// askFallback.
        #[serde(rename = "askFallback")]
        ask_fallback: Option<AskFallback>,
    },
    /// Add an agent to the file (nothing set, empty allowlist).
    CreateAgent {
        /// The version shown.
        base: String,
        /// The new agent's id.
        agent: String,
    },
    /// Bind an agent (or, `agent` null, every agent by default) to a paired node, or
    /// (`node` null) remove the binding at that level: `tools.exec.node` in config.toml.
    NodeBinding {
        /// The version of config.toml shown.
        base: String,
        /// The agent, or none for the host-wide default.
        agent: Option<String>,
        /// A paired node's id, or none.
        node: Option<String>,
    },
}

/// Why an edit was not made; nothing was written.
#[derive(Debug)]
pub enum EditError {
    /// The file changed since the page read it.
    Conflict(String),
    /// The edit itself is wrong (an invalid pattern, an unknown agent...).
    Invalid(String),
    /// The store could not be used.
    Failed(String),
}

/// Apply `edit` (through the store, or to config.toml for a node binding); the new hash
/// of the file edited on success.
pub fn apply(app: &App, edit: Edit) -> Result<String, EditError> {
    let (facts, store) = (&app.facts, &app.store);
    // Agents of config.toml may be given settings and entries before the file has them.
    let known: Vec<String> = facts
        .config()
        .map(|c| c.agents.iter().map(|a| a.id.clone()).collect())
        .unwrap_or_default();
    let result = match edit {
        Edit::AddPattern {
            base,
            agent,
            pattern,
            args,
            exact,
            allow_flags,
        } => {
            if pattern.trim().is_empty() {
                return Err(EditError::Invalid("the pattern is empty".into()));
            }
            if exact && args.is_empty() {
                return Err(EditError::Invalid(
                    "\"exactly\" needs the argument patterns the arguments must equal".into(),
                ));
            }
            let rule = RuleSpec {
                pattern,
                args: (!args.is_empty()).then_some(args),
                args_match: if exact {
                    ArgsMatch::Exact
                } else {
                    ArgsMatch::Prefix
                },
                allow_flags,
                ..RuleSpec::default()
            };
            store
                .add_rules_based(Some(&base), &agent, &[rule], &known, false)
                .and_then(|u| {
                    if u.value.is_empty() {
                        Err(StoreError::Invalid {
                            problems: vec!["that entry is already in the allowlist".into()],
                        })
                    } else {
                        Ok(u.hash)
                    }
                })
        }
        Edit::RemoveRule { base, agent, rule } => store
            .remove_rule_based(Some(&base), &agent, &rule)
            .map(|u| u.hash),
        Edit::RemoveEgress { base, agent, rule } => {
            match policy::egress::DomainRule::parse(&rule) {
                Ok(parsed) => store
                    .remove_egress_allow_based(Some(&base), &agent, &parsed)
                    .map(|u| u.hash),
                Err(e) => Err(StoreError::Invalid {
                    problems: vec![e.to_string()],
                }),
            }
        }
        Edit::RemovePattern {
            base,
            agent,
            pattern,
        } => store
            .remove_pattern_based(Some(&base), &agent, &pattern)
            .map(|u| u.hash),
        Edit::Settings {
            base,
            agent,
            security,
            ask,
            ask_fallback,
        } => store
            .set_ceilings_based(
                Some(&base),
                agent.as_deref(),
                Ceilings {
                    security,
                    ask,
                    ask_fallback,
                },
                &known,
            )
            .map(|u| u.hash),
        Edit::CreateAgent { base, agent } => store
            .create_agent_based(Some(&base), &agent)
            .map(|u| u.hash),
        Edit::NodeBinding { base, agent, node } => {
            return node_binding(app, &base, agent.as_deref(), node.as_deref());
        }
    };
    result.map_err(|e| match e {
        StoreError::Conflict { .. } => EditError::Conflict(
            "exec-approvals.json changed since this page showed it (an edit from the CLI, \
             another tab, or a runner storing \"allow always\"); nothing was changed — \
             reload to see the current version, then try again"
                .into(),
        ),
        e @ (StoreError::Invalid { .. } | StoreError::UnknownAgent { .. }) => {
            EditError::Invalid(e.to_string())
        }
        e => EditError::Failed(e.to_string()),
    })
}

/// Set or clear a node binding in config.toml, on the version the page showed.
fn node_binding(
    app: &App,
    base: &str,
    agent: Option<&str>,
    node: Option<&str>,
) -> Result<String, EditError> {
    let nodes = app.registry.list().map_err(|e| {
        EditError::Failed(format!(
            "the node registry cannot be read, so no binding is changed: {e}"
        ))
    })?;
    app.config
        .set_node_binding(base, agent, node, &nodes)
        .map_err(|e| match e {
            BindingError::Conflict => EditError::Conflict(
                "config.toml changed since this page showed it (edited by hand, by \
                 another program or in another tab); nothing was changed — reload to see \
                 the current version, then try again"
                    .into(),
            ),
            BindingError::Invalid(why) => EditError::Invalid(why),
            BindingError::Failed(why) => EditError::Failed(why),
        })
}

/// A request to explain a command, as `warden policy explain` would.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainRequest {
    /// The agent.
    pub agent: String,
    /// A host parameter, or empty for the configured one.
    #[serde(default)]
    pub host: String,
    /// The command, as a shell string.
    pub command: String,
}

/// The explanation text and the exit code `policy explain` would give.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explained {
    text: String,
    exit_code: i32,
}

/// Explain `request` through the same path `warden policy explain` takes.
pub fn explain(facts: &HostFacts, request: ExplainRequest) -> Result<Explained, String> {
    if request.agent.trim().is_empty() || request.command.trim().is_empty() {
        return Err("an agent and a command are needed".into());
    }
    let mut exec = ExecRequest::new(&request.agent, "console", Command::Shell(request.command));
    if !request.host.is_empty() {
        exec.params.host = Some(request.host.parse::<Host>().map_err(|e| e.to_string())?);
    }
    let gateway = facts.gateway(None).map_err(|e| format!("{e:#}"))?;
    let key = gateway::SessionKey {
        agent: request.agent,
        session: "console".into(),
    };
    let decided = gateway.decide(&key, exec);
    let mut text = String::new();
    if let Some(err) = decided.host_file_error() {
        text.push_str(&format!("warden: {err}\n"));
    }
    text.push_str(&decided.explanation.to_text());
    Ok(Explained {
        exit_code: crate::cmd_policy::decision_exit_code(&decided.explanation.decision),
        text,
    })
}
