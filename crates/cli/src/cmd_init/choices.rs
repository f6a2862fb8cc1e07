//! What `warden init` asks: the workspace, the agent clients, how they connect and how
//! strict to start. Each answer comes from a flag, else from a question at a terminal,
//! else from its default — so the same command works typed, scripted and re-run.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::host::HostFacts;

/// The agent `warden exec` acts for unless told otherwise.
pub const TERMINAL_AGENT: &str = "main";

/// An agent client Warden writes a configuration for. Each gets its own agent id, so
/// each has its own policy and, on the gateway, its own credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Client {
    /// Claude Code (`.mcp.json`, `.claude/settings.json`).
    Claude,
    /// Codex CLI (`.codex/config.toml`).
    Codex,
    /// Cursor (`.cursor/mcp.json`).
    Cursor,
    /// VS Code agent mode (`.vscode/mcp.json`).
    Vscode,
    /// Any other MCP client: instructions only, agent id `main`.
    Other,
}

impl Client {
    /// Every client, in the order questions and summaries list them.
    pub const ALL: [Client; 5] = [
        Client::Claude,
        Client::Codex,
        Client::Cursor,
        Client::Vscode,
        Client::Other,
    ];

    /// The agent id this client's requests act for.
    pub fn agent(self) -> &'static str {
        match self {
            Client::Claude => "claude",
            Client::Codex => "codex",
            Client::Cursor => "cursor",
            Client::Vscode => "vscode",
            Client::Other => "main",
        }
    }

    /// The name a user types (`--client`).
    pub fn name(self) -> &'static str {
        match self {
            Client::Claude => "claude",
            Client::Codex => "codex",
            Client::Cursor => "cursor",
            Client::Vscode => "vscode",
            Client::Other => "other",
        }
    }

    /// The product's name, for people.
    pub fn title(self) -> &'static str {
        match self {
            Client::Claude => "Claude Code",
            Client::Codex => "Codex CLI",
            Client::Cursor => "Cursor",
            Client::Vscode => "VS Code",
            Client::Other => "Other MCP clients",
        }
    }
}

/// How the clients reach Warden.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// The client starts `warden mcp` itself and talks over its stdin and stdout.
    Stdio,
    /// The clients reach a running `warden gateway run` over HTTP, each with its own
    /// credential.
    Gateway,
}

/// How strict Warden starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Strictness {
    /// Commands run only in the sandbox; the gateway host refuses everything.
    Sandbox,
    /// The sandbox, plus everyday read-only programs on the gateway host; any other
    /// gateway-host command is refused without asking.
    Allowlist,
    /// As `allowlist`, and any other gateway-host command is asked of a human (refused
    /// when nobody answers).
    Ask,
}

impl Strictness {
    /// The name a user types (`--strictness`).
    pub fn name(self) -> &'static str {
        match self {
            Strictness::Sandbox => "sandbox",
            Strictness::Allowlist => "allowlist",
            Strictness::Ask => "ask",
        }
    }
}

impl Transport {
    /// The name a user types (`--transport`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Gateway => "gateway",
        }
    }
}

/// The answers `init` works from.
#[derive(Clone, Debug)]
pub struct Choices {
    /// The project the agents work in (absolute, resolved).
    pub workspace: PathBuf,
    /// The clients to connect, without repeats, in [`Client::ALL`] order.
    pub clients: Vec<Client>,
    /// How they connect.
    pub transport: Transport,
    /// How strict to start.
    pub strictness: Strictness,
}

impl Choices {
    /// The agent ids of the chosen clients, without repeats.
    pub fn client_agents(&self) -> Vec<&'static str> {
        let mut ids: Vec<&'static str> = self.clients.iter().map(|c| c.agent()).collect();
        ids.dedup();
        ids
    }

    /// The agents given a policy: the clients', and `main` — the agent of `warden exec`
    /// typed at this machine's terminal.
    pub fn agents(&self) -> Vec<&'static str> {
        let mut ids = self.client_agents();
        if !ids.contains(&TERMINAL_AGENT) {
            ids.push(TERMINAL_AGENT);
        }
        ids
    }
}

/// Questions at a terminal: one line per answer, Enter takes the default shown in
/// brackets. A closed input takes the defaults for the rest.
pub struct Questions<'a> {
    input: Box<dyn std::io::BufRead + 'a>,
}

impl<'a> Questions<'a> {
    /// Questions read from this process's standard input.
    pub fn stdin() -> Questions<'static> {
        Questions {
            input: Box::new(std::io::BufReader::new(std::io::stdin())),
        }
    }

    /// Ask `question`; the trimmed answer, or `default` for an empty one.
    pub fn ask(&mut self, question: &str, default: &str) -> anyhow::Result<String> {
        eprint!("{question} [{default}]: ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if self.input.read_line(&mut line)? == 0 {
            eprintln!();
            return Ok(default.to_owned());
        }
        let answer = line.trim();
        Ok(if answer.is_empty() {
            default.to_owned()
        } else {
            answer.to_owned()
        })
    }

    /// Ask until the answer parses with `parse`, saying what was wrong each time.
    pub fn ask_parsed<T>(
        &mut self,
        question: &str,
        default: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> anyhow::Result<T> {
        loop {
            let answer = self.ask(question, default)?;
            match parse(&answer) {
                Ok(v) => return Ok(v),
                Err(e) => eprintln!("  {e}"),
            }
        }
    }

    /// A yes/no question whose default is no.
    pub fn confirm(&mut self, question: &str) -> anyhow::Result<bool> {
        self.ask_parsed(question, "y/N", |a| match a.to_ascii_lowercase().as_str() {
            "y" | "yes" => Ok(true),
            "n" | "no" | "y/n" => Ok(false),
            other => Err(format!("answer y or n, not {other:?}")),
        })
    }
}

/// `claude, codex` (names separated by commas or spaces) as clients, or what is wrong.
pub fn parse_clients(text: &str) -> Result<Vec<Client>, String> {
    let mut clients = Vec::new();
    for word in text.split([',', ' ']).filter(|w| !w.is_empty()) {
        let client = Client::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(word))
            .ok_or_else(|| {
                format!(
                    "unknown client {word:?}: choose from {}",
                    Client::ALL.map(Client::name).join(", ")
                )
            })?;
        clients.push(client);
    }
    if clients.is_empty() {
        return Err("name at least one client".into());
    }
    clients.sort();
    clients.dedup();
    Ok(clients)
}

/// A choice named by one of `names` (the value's own spelling).
pub fn parse_named<T: Copy>(
    text: &str,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|v| name(*v).eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| {
            format!(
                "{text:?} is not one of {}",
                all.iter().map(|v| name(*v)).collect::<Vec<_>>().join(", ")
            )
        })
}

/// The answers, from flags, else questions (when `questions` is given), else defaults.
pub fn choose(
    args: &super::InitArgs,
    facts: &HostFacts,
    mut questions: Option<&mut Questions<'_>>,
) -> anyhow::Result<Choices> {
    let default_ws = args.workspace.clone().unwrap_or_else(|| facts.cwd.clone());
    let workspace = match (&args.workspace, questions.as_deref_mut()) {
        (None, Some(q)) => PathBuf::from(q.ask(
            "Workspace (the project the agents work in)",
            &default_ws.to_string_lossy(),
        )?),
        _ => default_ws,
    };
    let workspace = workspace_dir(facts, &workspace)?;
    let clients = match (args.clients.is_empty(), questions.as_deref_mut()) {
        (false, _) => {
            let mut c = args.clients.clone();
            c.sort();
            c.dedup();
            c
        }
        (true, Some(q)) => q.ask_parsed(
            "Agent clients to connect (claude, codex, cursor, vscode, other; separate with commas)",
            "claude",
            parse_clients,
        )?,
        (true, None) => vec![Client::Claude],
    };
    let transport = match (args.transport, questions.as_deref_mut()) {
        (Some(t), _) => t,
        (None, Some(q)) => q.ask_parsed(
            "Connect over stdio (each client starts `warden mcp`) or gateway (HTTP, `warden gateway run`)",
            "stdio",
            |a| parse_named(a, &[Transport::Stdio, Transport::Gateway], Transport::name),
        )?,
        (None, None) => Transport::Stdio,
    };
    let strictness = match (args.strictness, questions) {
        (Some(s), _) => s,
        (None, Some(q)) => q.ask_parsed(
            "Start how strict: sandbox (only the sandbox), allowlist (plus everyday read-only programs on this machine), ask (the same, and a human is asked about anything else)",
            "ask",
            |a| {
                parse_named(
                    a,
                    &[Strictness::Sandbox, Strictness::Allowlist, Strictness::Ask],
                    Strictness::name,
                )
            },
        )?,
        (None, None) => Strictness::Ask,
    };
    Ok(Choices {
        workspace,
        clients,
        transport,
        strictness,
    })
}

/// `path` as the workspace: absolute, resolved, an existing directory, and not Warden's
/// state directory or inside it (the sandbox refuses that as a workspace).
fn workspace_dir(facts: &HostFacts, path: &Path) -> anyhow::Result<PathBuf> {
    let expanded = match path.strip_prefix("~") {
        Ok(rest) => facts.home.join(rest),
        Err(_) => facts.absolute(path),
    };
    let resolved = std::fs::canonicalize(&expanded).with_context(|| {
        format!(
            "the workspace {} cannot be used (create it first, or pass --workspace DIR)",
            expanded.display()
        )
    })?;
    if !resolved.is_dir() {
        bail!("the workspace {} is not a directory", resolved.display());
    }
    let state = std::fs::canonicalize(&facts.warden_home).unwrap_or(facts.warden_home.clone());
    if resolved.starts_with(&state) {
        bail!(
            "the workspace {} is inside Warden's state directory {}: choose the project directory",
            resolved.display(),
            state.display()
        );
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_parse_in_any_order_and_case_without_repeats() {
        assert_eq!(
            parse_clients("Codex, claude codex").unwrap(),
            vec![Client::Claude, Client::Codex]
        );
        let err = parse_clients("claude, emacs").unwrap_err();
        assert!(err.contains("\"emacs\"") && err.contains("vscode"), "{err}");
        assert!(parse_clients(" , ").is_err());
    }

    #[test]
    fn questions_take_defaults_and_reask_until_valid() {
        let input = b"\nnonsense\ngateway\n" as &[u8];
        let mut q = Questions {
            input: Box::new(input),
        };
        assert_eq!(q.ask("workspace", "/w").unwrap(), "/w");
        let t = q
            .ask_parsed("transport", "stdio", |a| {
                parse_named(a, &[Transport::Stdio, Transport::Gateway], Transport::name)
            })
            .unwrap();
        assert_eq!(t, Transport::Gateway);
        // Input closed: the default.
        assert!(!q.confirm("write?").unwrap());
    }
}
