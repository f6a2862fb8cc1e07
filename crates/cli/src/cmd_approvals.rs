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
    /// Edit the hosts an agent's proxied sandboxed runs reach besides `[sandbox.egress]`
    /// (its `egressAllow`; "allow always" on a connection question adds to it).
    #[command(subcommand)]
    Egress(EgressCommand),
    /// Merge an OpenClaw-format (version 1) approvals file into this one. `*` is every
    /// agent; settings that loosen this host and values not taken are listed.
    Import {
        /// The file to import.
        path: PathBuf,
        /// Show the summary and the resulting file without writing anything.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the terminal approver: host the approval socket and answer prompts here.
    Ui(crate::approver_ui::UiArgs),
}

/// Argument rules of an allowlist entry (see docs/configuration.md).
#[derive(Debug, Default, clap::Args)]
pub struct RuleArgs {
    /// An argument pattern (repeat for each word after the program: `--arg status`,
    /// `--arg log --arg '*'`). `*` is any characters, `?` one, `\` escapes. Without
    /// `--arg` the entry allows any arguments.
    #[arg(long = "arg", value_name = "WORD", allow_hyphen_values = true)]
    args: Vec<String>,
    /// The arguments must be exactly the `--arg` words (default: they start with them).
    #[arg(long)]
    exact: bool,
    /// A profile hit the entry allows by name (`-c alias.*`, `-exec`; `*` for all).
    #[arg(long = "allow-flag", value_name = "NAME", allow_hyphen_values = true)]
    allow_flags: Vec<String>,
    /// A command the entry must accept, as a JSON array (`'["git","status","-s"]'`),
    /// checked now and whenever the file is loaded.
    #[arg(long = "match", value_name = "JSON")]
    matches: Vec<String>,
    /// A command the entry must refuse, as a JSON array.
    #[arg(long = "not-match", value_name = "JSON")]
    not_matches: Vec<String>,
}

impl RuleArgs {
    fn is_empty(&self) -> bool {
        self.args.is_empty()
            && !self.exact
            && self.allow_flags.is_empty()
            && self.matches.is_empty()
            && self.not_matches.is_empty()
    }

    /// The rule for `pattern`, or a specific error about what is malformed.
    fn rule(&self, pattern: &str) -> anyhow::Result<policy::RuleSpec> {
        if self.exact && self.args.is_empty() {
            anyhow::bail!("--exact needs the --arg words the arguments must equal");
        }
        let parse = |list: &[String], flag: &str| -> anyhow::Result<Vec<Vec<String>>> {
            list.iter()
                .map(|j| {
                    serde_json::from_str::<Vec<String>>(j).map_err(|e| {
                        anyhow::anyhow!(
                            "{flag} {j:?} is not a JSON array of strings such as [\"git\",\"status\"]: {e}"
                        )
                    })
                })
                .collect()
        };
        Ok(policy::RuleSpec {
            pattern: pattern.to_owned(),
            args: (!self.args.is_empty()).then(|| self.args.clone()),
            args_match: if self.exact {
                policy::ArgsMatch::Exact
            } else {
                policy::ArgsMatch::Prefix
            },
            allow_flags: self.allow_flags.clone(),
            examples: policy::Examples {
                matches: parse(&self.matches, "--match")?,
                not_matches: parse(&self.not_matches, "--not-match")?,
                ..Default::default()
            },
        })
    }
}

/// `warden approvals egress ...`
#[derive(Debug, clap::Subcommand)]
pub enum EgressCommand {
    /// Add rules: `host`, `*.suffix`, `host:port`, an address (`10.0.0.5`,
    /// `[fd00::1]:8080`), as `[sandbox.egress]` takes them.
    Add {
        /// The agent (`*`: every agent).
        #[arg(long)]
        agent: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The rules.
        #[arg(required = true)]
        rules: Vec<String>,
    },
    /// Remove a rule (compared as a rule, however it is spelled).
    Remove {
        /// The agent.
        #[arg(long)]
        agent: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The rule.
        rule: String,
    },
}

/// `warden approvals allowlist ...`
#[derive(Debug, clap::Subcommand)]
pub enum AllowlistCommand {
    /// Add patterns (absolute path globs, `~/...`, or bare program names), optionally
    /// with argument rules that apply to each.
    Add {
        /// The agent (`*`: every agent).
        #[arg(long)]
        agent: String,
        /// Allow an agent id that is neither in the file nor in config.toml.
        #[arg(long)]
        create_agent: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        rule: RuleArgs,
        /// The patterns.
        #[arg(required = true)]
        patterns: Vec<String>,
    },
    /// Remove a pattern: every entry with it, or with --arg/--exact/--allow-flag the one
    /// entry with exactly those argument rules.
    Remove {
        /// The agent.
        #[arg(long)]
        agent: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        rule: RuleArgs,
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
        | ApprovalsCommand::Allowlist(AllowlistCommand::Remove { json, .. })
        | ApprovalsCommand::Egress(EgressCommand::Add { json, .. })
        | ApprovalsCommand::Egress(EgressCommand::Remove { json, .. }) => *json,
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

/// The import summary in words: what was added, what loosens the host, what was not
/// taken, which unknown fields were kept.
fn import_text(summary: &approvals::ImportSummary) -> String {
    let mut text = format!(
        "imported {} agent(s) and {} allowlist entr(ies)\n",
        summary.agents_added.len(),
        summary.patterns_added,
    );
    let mut section = |title: &str, items: &[String]| {
        if !items.is_empty() {
            text.push_str(title);
            text.push('\n');
            for item in items {
                text.push_str(&format!("  {item}\n"));
            }
        }
    };
    section(
        "settings that were unset now have the imported values:",
        &summary.settings_set,
    );
    section("LOOSENS THIS HOST:", &summary.loosening);
    section("not imported (this host's value kept):", &summary.skipped);
    section(
        "fields this version does not know, kept as imported:",
        &summary.fields_kept,
    );
    text
}

fn execute(command: ApprovalsCommand) -> anyhow::Result<Output> {
    let facts = HostFacts::read()?;
    let store = facts.store();
    let path = store.config().path.clone();
    // A node's file: the running gateway carries the request (the node does the edit).
    let remote = match &command {
        ApprovalsCommand::Get {
            node: Some(node), ..
        } => Some(crate::operator::remote_get(&facts, node)?),
        ApprovalsCommand::Set {
            node: Some(node),
            file,
            base_hash,
            ..
        } => Some(crate::operator::remote_set(&facts, node, file, base_hash)?),
        _ => None,
    };
    if let Some((text, json)) = remote {
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
        ApprovalsCommand::Import {
            path: source,
            dry_run,
            ..
        } => {
            let fs = facts.fs();
            let text = caps::Fs::read_to_string(fs.as_ref(), &facts.absolute(&source))?;
            if dry_run {
                let plan = store.import_openclaw_dry_run(&text)?;
                let redacted = plan.file.redacted();
                return Ok(Output {
                    text: format!(
                        "{}dry run: nothing was written; the file would {}:\n{}\n",
                        import_text(&plan.summary),
                        if plan.changes { "become" } else { "stay" },
                        serde_json::to_string_pretty(&redacted)?
                    ),
                    json: serde_json::json!({
                        "dryRun": true,
                        "written": false,
                        "changes": plan.changes,
                        "summary": plan.summary,
                        "file": redacted,
                    }),
                });
            }
            let u = store.import_openclaw(&text)?;
            Ok(Output {
                text: format!("{}{}", import_text(&u.value), written(&u, "file updated")),
                json: serde_json::json!({ "written": u.written, "hash": u.hash, "summary": u.value }),
            })
        }
        ApprovalsCommand::Allowlist(AllowlistCommand::Add {
            agent,
            create_agent,
            patterns,
            rule,
            ..
        }) => {
            let known: Vec<String> = facts.config()?.agents.into_iter().map(|a| a.id).collect();
            let rules = patterns
                .iter()
                .map(|p| rule.rule(p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let u = match store.add_rules(&agent, &rules, &known, create_agent) {
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
                    "added {} entr(ies) for {agent}{}; {}",
                    added.len(),
                    added.iter().map(|a| format!("\n  {a}")).collect::<String>(),
                    written(&u, "file updated")
                ),
                json: serde_json::json!({ "written": u.written, "hash": u.hash, "added": added }),
            })
        }
        ApprovalsCommand::Allowlist(AllowlistCommand::Remove {
            agent,
            pattern,
            rule,
            ..
        }) => {
            let u = if rule.is_empty() {
                store.remove_pattern(&agent, &pattern)?
            } else {
                store.remove_rule(&agent, &rule.rule(&pattern)?)?
            };
            Ok(Output {
                text: written(&u, &format!("removed {pattern:?} from {agent}")),
                json: serde_json::json!({ "written": u.written, "hash": u.hash }),
            })
        }
        ApprovalsCommand::Egress(EgressCommand::Add { agent, rules, .. }) => {
            // Every rule is read first: one that does not read changes nothing.
            let rules = rules
                .iter()
                .map(|r| policy::egress::DomainRule::parse(r))
                .collect::<Result<Vec<_>, _>>()?;
            let mut added = Vec::new();
            let mut hash = String::new();
            for rule in &rules {
                let u = store.add_egress_allow(&agent, rule)?;
                if u.value {
                    added.push(rule.to_string());
                }
                hash = u.hash;
            }
            Ok(Output {
                text: format!(
                    "added {} egressAllow rule(s) for {agent}{}\n(hash {hash})\n",
                    added.len(),
                    added.iter().map(|a| format!("\n  {a}")).collect::<String>(),
                ),
                json: serde_json::json!({ "hash": hash, "added": added }),
            })
        }
        ApprovalsCommand::Egress(EgressCommand::Remove { agent, rule, .. }) => {
            let parsed = policy::egress::DomainRule::parse(&rule)?;
            let u = store.remove_egress_allow(&agent, &parsed)?;
            Ok(Output {
                text: written(&u, &format!("removed egressAllow {parsed} from {agent}")),
                json: serde_json::json!({ "written": u.written, "hash": u.hash }),
            })
        }
        ApprovalsCommand::Ui(_) => unreachable!("handled by run()"),
    }
}
