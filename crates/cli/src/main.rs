//! The `warden` binary: parses the command line, reads the process environment once,
//! builds the providers, and hands values to the library crates. This is the only
//! product crate besides the providers that may touch `std::env`, `std::fs` or
//! `std::process` (see `cargo xtask lint`).
// The composition root reads the environment and picks providers.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// A command-line program talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

/// `println!` for results. A reader that went away (`warden ... | head`) is not worth a
/// panic, and the exit code must stay the command's: write errors are ignored.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `print!` for results, flushed, ignoring a closed stdout like [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, $($arg)*);
        let _ = stdout.flush();
    }};
}

mod approver_run;
mod approver_socket;
mod approver_ui;
mod args;
mod bridge_connector;
mod cmd_approvals;
mod cmd_doctor;
mod cmd_exec;
mod cmd_gateway;
mod cmd_node;
mod cmd_nodes;
mod cmd_policy;
mod compose;
mod compose_node;
mod exec_allowlist;
mod exit;
mod gateway_bridge;
mod host;
mod operator;
mod signals;
mod term_input;
mod web;

use clap::{Parser, Subcommand};

/// Policy decisions parse shell text and allocate many small objects; mimalloc serves
/// them markedly faster than glibc malloc (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Warden: an execution host for AI agents.
#[derive(Debug, Parser)]
#[command(
    name = "warden",
    version,
    about = "Warden: decides where and whether an AI agent's shell commands run, and runs them \
             with hard limits (sandbox by default; see docs/configuration.md)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one command with Warden's limits (timeout, whole-tree kill, output cap).
    Exec(cmd_exec::ExecArgs),
    /// Inspect policy decisions.
    #[command(subcommand)]
    Policy(cmd_policy::PolicyCommand),
    /// Read and edit this host's exec-approvals.json; run the terminal approver.
    #[command(subcommand)]
    Approvals(cmd_approvals::ApprovalsCommand),
    /// Run the gateway (MCP over Streamable HTTP) or print its token.
    #[command(subcommand)]
    Gateway(cmd_gateway::GatewayCommand),
    /// This machine as a node of a gateway: pair, serve (WebSocket or stdio), install.
    #[command(subcommand)]
    Node(cmd_node::NodeCommand),
    /// The gateway's nodes: list, approve or reject pairing requests, revoke, add stdio nodes.
    #[command(subcommand)]
    Nodes(cmd_nodes::NodesCommand),
    /// Serve the agent-facing MCP tools over stdio (for agent clients that spawn tools).
    Mcp(cmd_gateway::McpArgs),
    /// Check what this machine can do (sandbox, namespaces, seccomp, Landlock, engines).
    Doctor(cmd_doctor::DoctorArgs),
    /// Operator controls for the sandbox host (time-limited direct mode).
    #[command(subcommand)]
    Sandbox(cmd_doctor::SandboxCommand),
    /// Print a completion script for a shell (bash, zsh, fish) on stdout.
    Completions(CompletionsArgs),
}

/// Arguments of `warden completions`.
#[derive(Debug, clap::Args)]
struct CompletionsArgs {
    /// The shell: `warden completions bash > /etc/bash_completion.d/warden`,
    /// `warden completions zsh > "${fpath[1]}/_warden"`,
    /// `warden completions fish > ~/.config/fish/completions/warden.fish`.
    shell: CompletionShell,
}

/// The shells completions are written for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// `warden completions SHELL`.
fn completions(args: CompletionsArgs) -> i32 {
    use clap::CommandFactory as _;
    let shell = match args.shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "warden", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
    0
}

/// Colour on stderr only for a person at a terminal, and never when `NO_COLOR` is set to
/// anything (no-color.org): logs read by a client or a file stay plain text.
fn stderr_colour() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn main() {
    // The per-run subreaper (hosts without cgroups): `REAPER program argv0 args...`.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw
        .get(1)
        .is_some_and(|a| a == caps::process::REAPER_SUBCOMMAND)
    {
        caps::process::run_reaper(&raw[2..]);
    }
    if raw
        .get(1)
        .is_some_and(|a| a == caps::process::WATCHDOG_SUBCOMMAND)
    {
        caps::process::run_watchdog(&raw[2..]);
    }
    // The in-sandbox helper: the last step inside the sandbox, before anything else runs.
    // Recognised on the raw arguments: `std::env::args` panics on one that is not UTF-8,
    // which clap below reports as a usage error instead.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a.as_os_str() == std::ffi::OsStr::new(sandbox::helper::SUBCOMMAND))
    {
        let args: Vec<String> = std::env::args().collect();
        sandbox::helper::main(&args[2..]);
    }
    // Warden's own namespace builder (`sandbox.builder = "warden"`), also before anything
    // else runs: it forks, so this process must still have one thread.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a.as_os_str() == std::ffi::OsStr::new(sandbox::builder::SUBCOMMAND))
    {
        let args: Vec<String> = std::env::args().collect();
        sandbox::builder::main(&args[2..]);
    }
    let wanted = std::env::var("WARDEN_LOG").unwrap_or_else(|_| "warn".into());
    // rmcp logs every error response at WARN; a client's invalid call is answered to the
    // client (-32602 naming the field), not worth a line on stderr each time, which
    // agent clients show their users. WARDEN_LOG=rmcp=… brings them back.
    let quiet_rmcp = if wanted.contains("rmcp") {
        String::new()
    } else {
        ",rmcp::service=error".into()
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(format!("{wanted}{quiet_rmcp}"))
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(stderr_colour())
        .init();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Exec(args) => cmd_exec::run(args),
        Command::Policy(command) => cmd_policy::run(command),
        Command::Approvals(command) => cmd_approvals::run(command),
        Command::Gateway(command) => cmd_gateway::run(command),
        Command::Mcp(args) => cmd_gateway::mcp(args),
        Command::Node(command) => cmd_node::run(command),
        Command::Nodes(command) => cmd_nodes::run(command),
        Command::Doctor(args) => cmd_doctor::run(args),
        Command::Sandbox(command) => cmd_doctor::sandbox(command),
        Command::Completions(args) => completions(args),
    };
    std::process::exit(code);
}
