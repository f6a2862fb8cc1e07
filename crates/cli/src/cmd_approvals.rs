//! `warden approvals ...`: read and edit this host's `exec-approvals.json`, and run the
//! terminal approver.

use std::path::PathBuf;

use approvals::{StoreError, Updated};

use crate::exit;
use crate::host::HostFacts;

/// `warden approvals ...`
#[derive(Debug, clap::Subcommand)]
pub enum ApprovalsCommand {
    /// Print the approvals file (token redacted) and its hash.
    Get {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Read a connected node's file instead, through the running gateway.
        #[arg(long)]
        node: Option<String>,
    },
    /// Replace the approvals file with FILE, if it still has hash HASH (from `get`).
    Set {
        /// The new document (a redacted token keeps the current one).
        #[arg(long)]
        file: PathBuf,
        /// The hash printed by `get` for the version FILE was based on.
        #[arg(long)]
        base_hash: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Replace a connected node's file instead, through the running gateway (it may
        /// only tighten it).
        #[arg(long)]
        node: Option<String>,
    },
    /// Show or set this host's ceilings: the host-wide defaults, or one agent's settings
    /// with --agent. Unset values mean the strict defaults (security deny, ask on-miss,
    /// askFallback deny).
    Defaults {
        /// Set one agent's settings instead of the host-wide defaults.
        #[arg(long)]
        agent: Option<String>,
        /// Allow an agent id that is neither in the file nor in config.toml.
        #[arg(long)]
        create_agent: bool,
        /// Security ceiling: deny, allowlist or full.
        #[arg(long)]
        security: Option<policy::Security>,
        /// Ask floor: off, on-miss or always.
        #[arg(long)]
        ask: Option<policy::Ask>,
        /// When no approver answers: deny, allowlist or full.
        #[arg(long)]
        ask_fallback: Option<policy::AskFallback>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Edit an agent's allowlist.
    #[command(subcommand)]
    Allowlist(AllowlistCommand),
    /// Merge an OpenClaw-format (version 1) approvals file into this one.
    Import {
        /// The file to import.
        path: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the terminal approver: host the approval socket and answer prompts here.
    Ui(crate::approver_ui::UiArgs),
}

/// `warden approvals allowlist ...`
#[derive(Debug, clap::Subcommand)]
pub enum AllowlistCommand {
    /// Add patterns (absolute path globs, `~/...`, or bare program names).
    Add {
        /// The agent.
        #[arg(long)]
        agent: String,
        /// Allow an agent id that is neither in the file nor in config.toml.
        #[arg(long)]
        create_agent: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The patterns.
        #[arg(required = true)]
        patterns: Vec<String>,
    },
    /// Remove a pattern.
    Remove {
        /// The agent.
        #[arg(long)]
        agent: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The pattern, exactly as stored.
        pattern: String,
    },
}

/// Run `warden approvals ...`.
pub fn run(command: ApprovalsCommand) -> i32 {
    if let ApprovalsCommand::Ui(args) = command {
        return crate::approver_ui::run(args);
    }
    let json = match &command {
        ApprovalsCommand::Get { json, .. }
        | ApprovalsCommand::Set { json, .. }
        | ApprovalsCommand::Defaults { json, .. }
        | ApprovalsCommand::Import { json, .. }
        | ApprovalsCommand::Allowlist(AllowlistCommand::Add { json, .. })
        | ApprovalsCommand::Allowlist(AllowlistCommand::Remove { json, .. }) => *json,
        ApprovalsCommand::Ui(_) => false,
    };
    match execute(command) {
        Ok(output) => {
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&output.json).unwrap_or_default()
                );
            } else {
                out!("{}", output.text);
            }
            0
        }
        Err(e) => {
            if json {
                outln!("{}", serde_json::json!({ "error": format!("{e:#}") }));
            } else {
                eprintln!("warden: {e:#}");
            }
            exit::WARDEN_ERROR
        }
    }
}

struct Output {
    text: String,
    json: serde_json::Value,
}

fn written<R>(u: &Updated<R>, what: &str) -> String {
    if u.written {
        format!("{what} (hash {})\n", u.hash)
    } else {
        format!("nothing changed (hash {})\n", u.hash)
    }
}

fn execute(command: ApprovalsCommand) -> anyhow::Result<Output> {
    let facts = HostFacts::read()?;
    let store = facts.store();
    let path = store.config().path.clone();
    if let Some((text, json)) = crate::operator::remote_approvals(&facts, &command)? {
        return Ok(Output { text, json });
    }
    match command {
        ApprovalsCommand::Get { .. } => {
            let snapshot = store.load()?;
            let redacted = snapshot.file.redacted();
            let body = serde_json::to_string_pretty(&redacted)?;
            Ok(Output {
                text: format!("# {}\n# hash: {}\n{body}\n", path.display(), snapshot.hash),
                json: serde_json::json!({ "path": path, "hash": snapshot.hash, "file": redacted }),
            })
        }
        ApprovalsCommand::Set {
            file, base_hash, ..
        } => {
            let fs = facts.fs();
            let text = caps::Fs::read_to_string(fs.as_ref(), &facts.absolute(&file))?;
            let u = store.set_from_text(&text, &base_hash)?;
            Ok(Output {
                text: written(&u, "updated"),
                json: serde_json::json!({ "written": u.written, "hash": u.hash }),
            })
        }
        ApprovalsCommand::Defaults {
            agent,
            create_agent,
            security,
            ask,
            ask_fallback,
            ..
        } => {
            let change = approvals::Ceilings {
                security,
                ask,
                ask_fallback,
            };
            let mut note = String::new();
            if change != approvals::Ceilings::default() {
                let known: Vec<String> = facts.config()?.agents.into_iter().map(|a| a.id).collect();
                let u = match store.set_settings(agent.as_deref(), change, &known, create_agent) {
                    Err(StoreError::UnknownAgent { agent, .. }) => anyhow::bail!(
                        "unknown agent {agent:?} (use --create-agent to add a new agent)"
                    ),
                    other => other?,
                };
                note = written(&u, "updated");
            }
            let file = store.load()?.file;
            let (scope, set) = match agent.as_deref() {
                None => ("defaults".to_owned(), file.defaults.ceilings),
                Some(id) => (
                    format!("agents.{id}"),
                    file.agents.get(id).map(|a| a.ceilings).unwrap_or_default(),
                ),
            };
            let (security, ask, fallback) = (set.security, set.ask, set.ask_fallback);
            let show =
                |v: Option<String>, strict: &str| v.unwrap_or_else(|| format!("unset ({strict})"));
            let inherit = if agent.is_some() { "from defaults" } else { "" };
            let strict = |d: &str| {
                if inherit.is_empty() {
                    format!("= {d}")
                } else {
                    inherit.to_owned()
                }
            };
            Ok(Output {
                text: format!(
                    "{note}{scope}:\n  security:    {}\n  ask:         {}\n  askFallback: {}\n",
                    show(security.map(|v| v.to_string()), &strict("deny")),
                    show(ask.map(|v| v.to_string()), &strict("on-miss")),
                    show(fallback.map(|v| v.to_string()), &strict("deny")),
                ),
                json: serde_json::json!({
                    "scope": scope,
                    "security": security.map(|v| v.to_string()),
                    "ask": ask.map(|v| v.to_string()),
                    "askFallback": fallback.map(|v| v.to_string()),
                }),
            })
        }
        ApprovalsCommand::Import { path: source, .. } => {
            let fs = facts.fs();
            let text = caps::Fs::read_to_string(fs.as_ref(), &facts.absolute(&source))?;
            let u = store.import_openclaw(&text)?;
            let summary = &u.value;
            Ok(Output {
                text: format!(
                    "imported {} agent(s) and {} allowlist entr(ies){}; {}",
                    summary.agents_added.len(),
                    summary.patterns_added,
                    if summary.settings_set.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "\nsettings that were unset (strict) now have the imported values: {}",
                            summary.settings_set.join(", ")
                        )
                    },
                    written(&u, "file updated")
                ),
                json: serde_json::json!({ "written": u.written, "hash": u.hash, "summary": summary }),
            })
        }
        ApprovalsCommand::Allowlist(AllowlistCommand::Add {
            agent,
            create_agent,
            patterns,
            ..
        }) => {
            let known: Vec<String> = facts.config()?.agents.into_iter().map(|a| a.id).collect();
            let u = match store.add_patterns(&agent, &patterns, &known, create_agent) {
                Err(StoreError::UnknownAgent { agent, suggestion }) => {
                    let hint = suggestion
                        .map(|s| format!("did you mean {s:?}? "))
                        .unwrap_or_default();
                    anyhow::bail!(
                        "unknown agent {agent:?} ({hint}use --create-agent to add a new agent)"
                    );
                }
                other => other?,
            };
            let added = u.value.clone();
            Ok(Output {
                text: format!(
                    "added {} pattern(s) for {agent}; {}",
                    added.len(),
                    written(&u, "file updated")
                ),
                json: serde_json::json!({ "written": u.written, "hash": u.hash, "added": added }),
            })
        }
        ApprovalsCommand::Allowlist(AllowlistCommand::Remove { agent, pattern, .. }) => {
            let u = store.remove_pattern(&agent, &pattern)?;
            Ok(Output {
                text: written(&u, &format!("removed {pattern:?} from {agent}")),
                json: serde_json::json!({ "written": u.written, "hash": u.hash }),
            })
        }
        ApprovalsCommand::Ui(_) => unreachable!("handled by run()"),
    }
}
