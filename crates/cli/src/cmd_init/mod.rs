//! `warden init`: from a fresh machine to a working setup in one command. It asks (or
//! takes flags for) the workspace, the agent clients, stdio or gateway, and how strict
//! to start; writes a commented `config.toml` and the approvals file that work as
//! written, one agent id per client (with its gateway credential where needed); and
//! prints — or, when the user agrees, writes — each client's configuration.
//!
//! Nothing the user has is replaced without asking: every file is planned first and
//! compared with what is there. A second run with the same answers changes nothing; a
//! file that differs is kept unless the user says to replace it (the old one saved
//! beside it) or, for client files, Warden's entries are added to it and nothing of
//! the user's is removed.

mod choices;
mod clients;
mod files;
mod host_files;

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use approvals::SystemClock;
use caps::{Fs as _, WriteOptions};

use crate::host::HostFacts;
use choices::{Choices, Client, Questions, Strictness, Transport};
use clients::ClientSetup;
use files::{backup, read_optional, relative, write_file};
use host_files::ApprovalsPlan;

/// Arguments of `warden init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The project the agents work in (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// An agent client to connect: claude, codex, cursor, vscode or other (repeat, or
    /// separate with commas).
    #[arg(long = "client", value_enum, value_delimiter = ',')]
    clients: Vec<Client>,
    /// How the clients reach Warden: stdio (each starts `warden mcp`) or gateway (HTTP,
    /// each with its own credential).
    #[arg(long, value_enum)]
    transport: Option<Transport>,
    /// How strict to start: sandbox (the gateway host refuses everything), allowlist
    /// (everyday read-only programs run on the gateway host, nothing else) or ask (the
    /// same, and a human is asked about anything else).
    #[arg(long, value_enum)]
    strictness: Option<Strictness>,
    /// Write the clients' files into the workspace (merged into existing ones) without
    /// asking.
    #[arg(long, conflicts_with = "print_only")]
    write_clients: bool,
    /// Print the clients' configurations; write none of their files.
    #[arg(long)]
    print_only: bool,
    /// Without asking: replace a config.toml that differs from init's, change approvals
    /// settings set otherwise, and replace a different `warden` entry in a client file
    /// (each changed file's old version is kept as FILE.bak).
    #[arg(long)]
    replace: bool,
    /// Ask nothing: flags, else the defaults (claude, stdio, ask).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Show what would be written; write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Run `warden init`.
pub fn run(args: InitArgs) -> i32 {
    crate::exit::or_report(init(args))
}

/// What happened to one file, for the summary.
struct Line {
    what: &'static str,
    path: String,
    detail: String,
}

/// One run of `warden init`: the answers, how to ask the user, and what was done.
struct Init {
    facts: HostFacts,
    args: InitArgs,
    choices: Choices,
    /// Questions at a terminal; none: nothing is asked (a "no" to every confirmation).
    questions: Option<Questions<'static>>,
    lines: Vec<Line>,
}

fn init(args: InitArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let mut questions = (!args.yes && std::io::stdin().is_terminal()).then(Questions::stdin);
    let choices = choices::choose(&args, &facts, questions.as_mut())?;
    let mut init = Init {
        facts,
        args,
        choices,
        questions,
        lines: Vec::new(),
    };
    // Warden's state directory is private (the approver's socket lives there), so it is
    // made here before a file in it would make it with a looser mode.
    if !init.args.dry_run {
        let home = &init.facts.warden_home;
        init.facts
            .fs()
            .create_dir_all(home, 0o700)
            .with_context(|| format!("cannot create {}", home.display()))?;
    }
    init.config()?;
    init.approvals()?;
    if init.choices.transport == Transport::Gateway {
        init.credentials()?;
    }
    let setups = init.clients()?;
    init.report(&setups);
    Ok(0)
}

impl Init {
    /// Yes to `question` — asked only at a terminal.
    fn confirm(&mut self, question: &str) -> anyhow::Result<bool> {
        match &mut self.questions {
            Some(q) => q.confirm(question),
            None => Ok(false),
        }
    }

    fn line(&mut self, what: &'static str, path: String, detail: impl Into<String>) {
        self.lines.push(Line {
            what,
            path,
            detail: detail.into(),
        });
    }

    fn shown(&self, path: &Path) -> String {
        files::tilde(path, &self.facts.home)
    }

    /// `config.toml`: written if absent; the same, left alone; different, kept unless
    /// the user says to replace it.
    fn config(&mut self) -> anyhow::Result<()> {
        let path = policy::config::config_path(&self.facts.warden_home);
        let shown = self.shown(&path);
        let wanted = host_files::config_text(&self.choices);
        // What init writes must itself be a working configuration.
        policy::Config::parse(&wanted, &path)
            .context("warden init produced an invalid config.toml (a bug; nothing was written)")?;
        let current = read_optional(&path)?;
        let write = match &current {
            None => true,
            Some(text) if *text == wanted => {
                self.line("unchanged", shown, "");
                return Ok(());
            }
            Some(_) => {
                self.args.replace
                    || self.confirm(&format!(
                        "{shown} exists and differs from what init would write. Replace it (the old one is kept as config.toml.bak)?"
                    ))?
            }
        };
        if !write {
            self.line(
                "kept",
                shown,
                "differs from init's; rerun with --replace to replace it (a backup is kept), or compare with `warden init --dry-run`",
            );
            return Ok(());
        }
        if !self.args.dry_run {
            if current.is_some() {
                backup(&path)?;
            }
            write_file(&self.facts, &path, &wanted, WriteOptions::private())?;
        }
        let gateway_host = match self.choices.strictness {
            Strictness::Sandbox => "denies everything",
            Strictness::Allowlist => "runs the allowlist only",
            Strictness::Ask => "runs the allowlist and asks about the rest",
        };
        self.line(
            if current.is_some() {
                "replaced"
            } else {
                "created"
            },
            shown,
            format!("host sandbox, gateway host {gateway_host}"),
        );
        Ok(())
    }

    /// `exec-approvals.json`: unset settings set, ones set otherwise changed only if the
    /// user says so, every agent's everyday allowlist added.
    fn approvals(&mut self) -> anyhow::Result<()> {
        let store = self.facts.store();
        let shown = self.shown(&store.config().path);
        let plan = ApprovalsPlan::new(&self.choices, self.facts.trusted_path.dirs());
        let file = store.load()?.file;
        if plan.is_applied(&file) {
            self.line("unchanged", shown, "");
            return Ok(());
        }
        let conflicts = plan.conflicts(&file.defaults.ceilings);
        let change_theirs = conflicts.is_empty()
            || self.args.replace
            || self.confirm(&format!(
                "{shown} sets {}. Change {}?",
                conflicts.join(", "),
                if conflicts.len() == 1 { "it" } else { "them" }
            ))?;
        let settings = if change_theirs {
            plan.ceilings
        } else {
            plan.fill_unset(&file.defaults.ceilings)
        };
        let changed = if self.args.dry_run {
            vec![plan.describe(settings)]
        } else {
            let known: Vec<String> = plan.agents.iter().map(|a| (*a).to_owned()).collect();
            plan.apply(&store, settings, &known)?
        };
        let mut detail = changed.join("; ");
        if !change_theirs {
            detail.push_str(&format!(" (kept yours: {})", conflicts.join(", ")));
        }
        if !plan.missing.is_empty() {
            detail.push_str(&format!(
                " (not installed, so not allowlisted: {})",
                plan.missing.join(", ")
            ));
        }
        let what = if changed.is_empty() {
            "unchanged"
        } else {
            "updated"
        };
        self.line(what, shown, detail.trim().to_owned());
        Ok(())
    }

    /// A gateway credential for each client's agent (an existing one is kept).
    fn credentials(&mut self) -> anyhow::Result<()> {
        let credentials =
            gateway::credentials::Credentials::new(self.facts.fs(), self.facts.warden_home.clone())
                .with_owner(self.facts.uid);
        let existing: Vec<String> = credentials.list()?.into_iter().map(|c| c.agent).collect();
        for agent in self.choices.client_agents() {
            let have = existing.iter().any(|a| a == agent);
            if !have && !self.args.dry_run {
                credentials.get_or_create(agent, approvals::Clock::now_ms(&SystemClock))?;
                self.facts.record_policy(
                    gateway::credentials::CREDENTIALS_FILE,
                    format!("gateway credential of agent {agent} created (warden init)"),
                );
            }
            self.line(
                if have { "unchanged" } else { "created" },
                format!("gateway credential for {agent}"),
                format!("`warden gateway token --agent {agent}` prints it"),
            );
        }
        Ok(())
    }

    /// Each client's files: merged and written if the user agrees (or said
    /// --write-clients), else shown with what to add.
    fn clients(&mut self) -> anyhow::Result<Vec<ClientSetup>> {
        let ws = self.choices.workspace.clone();
        let warden = files::warden_command(&self.facts);
        let setups: Vec<ClientSetup> = self
            .choices
            .clients
            .iter()
            .map(|c| clients::setup(*c, self.choices.transport, &warden, &ws))
            .collect();
        let mut plans = Vec::new();
        for wanted in setups.iter().flat_map(|s| &s.files) {
            if let Some(why) = files::unsafe_below(&ws, &wanted.path) {
                plans.push((wanted.path.clone(), Err(why), None));
                continue;
            }
            let current = read_optional(&wanted.path)?;
            let merged = clients::merge(current.as_deref(), &wanted.part, self.args.replace);
            plans.push((wanted.path.clone(), merged, current));
        }
        let to_write: Vec<String> = plans
            .iter()
            .filter(|(_, m, _)| m.as_ref().is_ok_and(|m| m.changed))
            .map(|(p, _, _)| relative(p, &ws))
            .collect();
        let write = !to_write.is_empty()
            && !self.args.print_only
            && (self.args.write_clients
                || self.confirm(&format!(
                    "Write the client configuration into {} ({})?",
                    ws.display(),
                    to_write.join(", ")
                ))?);
        for (path, merged, current) in plans {
            let shown = relative(&path, &ws);
            let merged = match merged {
                Err(why) => {
                    self.line(
                        "not merged",
                        shown,
                        format!("{why}: add Warden's part (below) by hand"),
                    );
                    continue;
                }
                Ok(m) => m,
            };
            let conflicts = conflict_text(&merged.conflicts);
            if !merged.changed {
                let what = if merged.conflicts.is_empty() {
                    "unchanged"
                } else {
                    "kept"
                };
                self.line(what, shown, conflicts);
            } else if !write {
                self.line(
                    "not written",
                    shown,
                    "add Warden's part (below), or rerun with --write-clients",
                );
            } else {
                if !self.args.dry_run {
                    if current.is_some() {
                        backup(&path)?;
                    }
                    write_file(&self.facts, &path, &merged.text, WriteOptions::default())?;
                }
                let (what, kept) = match current {
                    Some(_) => (
                        "updated",
                        format!("Warden's entries added; the old file kept as {shown}.bak"),
                    ),
                    None => ("created", String::new()),
                };
                self.line(what, shown, [kept, conflicts].join(" ").trim().to_owned());
            }
        }
        Ok(setups)
    }

    /// What was done, each client's part, and what to run next.
    fn report(&self, setups: &[ClientSetup]) {
        let (choices, dry) = (&self.choices, self.args.dry_run);
        outln!(
            "warden init{}: workspace {}; {}; clients over {}; strictness {}",
            if dry {
                " (dry run: nothing written)"
            } else {
                ""
            },
            choices.workspace.display(),
            choices
                .clients
                .iter()
                .map(|c| format!("{} (agent {})", c.name(), c.agent()))
                .collect::<Vec<_>>()
                .join(", "),
            choices.transport.name(),
            choices.strictness.name(),
        );
        for l in &self.lines {
            let detail = if l.detail.is_empty() {
                String::new()
            } else {
                format!(" — {}", l.detail)
            };
            let what = match (dry, l.what) {
                (true, "created") => "would create",
                (true, "updated") => "would update",
                (true, "replaced") => "would replace",
                (_, what) => what,
            };
            outln!("  {what:<11} {}{detail}", l.path);
        }
        for setup in setups {
            outln!(
                "\n{} (agent {}):",
                setup.client.title(),
                setup.client.agent()
            );
            for wanted in &setup.files {
                outln!("  {}:", relative(&wanted.path, &choices.workspace));
                for l in wanted.part.text().lines() {
                    outln!("    {l}");
                }
            }
            for step in &setup.steps {
                outln!("  - {step}");
            }
        }
        outln!("\nNext:");
        outln!(
            "  warden doctor                 # what this machine can do, and what each agent may run"
        );
        match choices.transport {
            Transport::Gateway => outln!(
                "  warden gateway run            # serves the clients at {} and the web approver (open its login link)",
                clients::GATEWAY_URL
            ),
            Transport::Stdio => outln!(
                "  warden approvals ui --web     # answer the questions commands raise, in a browser (or `warden approvals ui` in a terminal)"
            ),
        }
        outln!("  warden exec -- ls -la         # a command in the sandbox, from this terminal");
    }
}

fn conflict_text(conflicts: &[String]) -> String {
    if conflicts.is_empty() {
        String::new()
    } else {
        format!(
            "left as you have it: {} (--replace replaces a different `warden` entry)",
            conflicts.join("; ")
        )
    }
}
