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
mod cmd_init;
mod cmd_log;
mod cmd_node;
mod cmd_nodes;
mod cmd_policy;
mod cmd_runs;
mod cmd_sandbox;
mod compose;
mod compose_node;
mod egress_gate;
mod exec_allowlist;
mod exit;
mod gateway_bridge;
mod host;
mod inline_approver;
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
    /// Set Warden up: workspace, agent clients, stdio or gateway, how strict to start.
    /// Writes a commented config.toml and the approvals file, and each client's
    /// configuration; changes nothing of yours without asking.
    Init(cmd_init::InitArgs),
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
    /// The running gateway's live runs, every agent's: list, logs (--follow), kill.
    Runs {
        #[command(subcommand)]
        command: Option<cmd_runs::RunsCommand>,
    },
    /// Serve the agent-facing MCP tools over stdio (for agent clients that spawn tools).
    Mcp(cmd_gateway::McpArgs),
    /// The record: what ran where, decided how, approved by whom (filters, --follow,
    /// --json, --verify).
    Log(cmd_log::LogArgs),
    /// Check what this machine can do (sandbox, namespaces, seccomp, Landlock, engines).
    Doctor(cmd_doctor::DoctorArgs),
    /// Operator controls for the sandbox host (time-limited direct mode).
    #[command(subcommand)]
    Sandbox(cmd_sandbox::SandboxCommand),
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

/// `warden exec` and `warden mcp` start their companion
/// (`caps::process::start_companion`: the helper binary, running, which starts the
/// sandbox's builder for each run without executing a binary, and is the cgroup
/// watchdog) from a constructor, before `main`: from the main
/// thread, which lives as long as the process (the companion's children are that
/// thread's), and as early as can be, so that its own start-up overlaps Warden's.
/// Without the small helper binary next to `warden`, or with `WARDEN_COMPANION=off`,
/// there is none (runs then execute the helper).
#[used]
#[unsafe(link_section = ".init_array")]
static START_COMPANION: extern "C" fn(
    std::ffi::c_int,
    *const *const std::ffi::c_char,
    *const *const std::ffi::c_char,
) = start_companion_for_exec;

extern "C" fn start_companion_for_exec(
    argc: std::ffi::c_int,
    argv: *const *const std::ffi::c_char,
    _envp: *const *const std::ffi::c_char,
) {
    if argc < 2 || argv.is_null() {
        return;
    }
    // SAFETY: glibc calls constructors with the program's argc and argv, which hold
    // `argc` valid NUL-terminated strings.
    let word = |i: usize| unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) }.to_bytes();
    // `warden mcp` serves many runs from one process, whose main thread lives as long as
    // it does (it drives the runtime). Not yet `warden gateway run`: with a companion
    // its mcp-exec-http row measured 1.43× → 1.52×, not yet explained
    // (docs/benchmarks.md, stop 41).
    let server = match word(1) {
        b"exec" => false,
        b"mcp" => true,
        _ => return,
    };
    if std::env::var_os("WARDEN_COMPANION").is_some_and(|v| v == "off") {
        return;
    }
    if let Some(helper) = host::small_helper() {
        // Without it, runs start the helper binary; nothing else changes. Started from
        // the opened file, like every run's helper.
        let _ = caps::process::start_companion(helper.exec_path());
        // A default sandboxed run's namespaces, made while Warden decides — for a
        // server, again after every run that used them.
        if server {
            caps::process::keep_companion_standby(sandbox::namespace::DEFAULT_BORN_IN);
        } else {
            caps::process::prepare_companion(sandbox::namespace::DEFAULT_BORN_IN);
        }
    }
}

/// Logs on stderr at `WARDEN_LOG` (an `EnvFilter` directive list; default `warn`).
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(stderr_colour());
    // rmcp logs every error response at WARN; a client's invalid call is answered to the
    // client (-32602 naming the field), not worth a line on stderr each time, which
    // agent clients show their users. WARDEN_LOG=rmcp=… brings them back.
    let Ok(wanted) = std::env::var("WARDEN_LOG") else {
        // The default, without parsing a directive list (every `warden exec` pays for
        // what happens here).
        let filter = tracing_subscriber::filter::Targets::new()
            .with_default(tracing::Level::WARN)
            .with_target("rmcp::service", tracing::Level::ERROR);
        tracing_subscriber::registry()
            .with(layer)
            .with(filter)
            .init();
        return;
    };
    let quiet_rmcp = if wanted.contains("rmcp") {
        ""
    } else {
        ",rmcp::service=error"
    };
    let filter = tracing_subscriber::EnvFilter::try_new(format!("{wanted}{quiet_rmcp}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::registry()
        .with(layer)
        .with(filter)
        .init();
}

/// The command line. `warden exec …`, the one-shot hot path, is parsed by its own
/// subcommand's parser alone (building the whole tree of subcommands costs more than
/// parsing); whatever that parser does not simply accept — an error, `--help` — goes
/// through the whole parser, which reports it as it always has.
fn parse_command_line() -> Cli {
    if let Some(args) = parse_exec_only(std::env::args_os()) {
        return Cli {
            command: Command::Exec(args),
        };
    }
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(mut e) => {
            // Not `std::env::args`: it panics on an argument that is not UTF-8, which
            // clap reports as a usage error.
            let raw: Vec<String> = std::env::args_os()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            if let Some(tip) = argv_tip(&e, &raw) {
                e.insert(
                    clap::error::ContextKind::Suggested,
                    clap::error::ContextValue::StyledStrs(vec![tip.into()]),
                );
            }
            e.exit()
        }
    }
}

/// For `warden exec ls -la` (and `warden policy explain ...`): a program given without
/// the `--` that must come before it, shown back as the line that works.
fn argv_tip(e: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let skip = match args {
        [first, ..] if first == "exec" => 1,
        [first, second, ..] if first == "policy" && second == "explain" => 2,
        _ => return None,
    };
    let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    // A flag Warden does not know is a typo, not a program.
    if bad.starts_with('-') {
        return None;
    }
    let at = skip + args[skip..].iter().position(|a| a == bad)?;
    let quote = |words: &[String]| {
        shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
    };
    let before = quote(&args[..at]);
    Some(format!(
        "the program and its arguments go after `--`: `warden {before} -- {}` (or a shell command line: `--shell '...'`)",
        quote(&args[at..])
    ))
}

/// `warden exec ARGS` parsed by the exec subcommand's parser alone; `None` for any other
/// command line, or one it does not accept.
fn parse_exec_only(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Option<cmd_exec::ExecArgs> {
    use clap::{Args as _, FromArgMatches as _};
    let mut args = args.into_iter().skip(1).peekable();
    if args.peek().is_none_or(|first| first != "exec") {
        return None;
    }
    let command = cmd_exec::ExecArgs::augment_args(clap::Command::new("exec"));
    let matches = command.try_get_matches_from(args).ok()?;
    cmd_exec::ExecArgs::from_arg_matches(&matches).ok()
}

fn main() {
    // The helper's subcommands (this binary is the helper where the small one is not
    // installed): the in-sandbox helper, the namespace builder (which forks, so this
    // process must still have one thread), the subreaper and the cgroup watchdog —
    // before anything else runs. Recognised on the raw arguments: `std::env::args`
    // panics on one that is not UTF-8, which clap below reports as a usage error.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw
        .get(1)
        .is_some_and(|a| sandbox::subcommands::is_subcommand(a))
    {
        sandbox::subcommands::run(&raw[1..]);
    }
    init_logging();
    let cli = parse_command_line();
    let code = match cli.command {
        Command::Exec(args) => cmd_exec::run(args),
        Command::Policy(command) => cmd_policy::run(command),
        Command::Approvals(command) => cmd_approvals::run(command),
        Command::Gateway(command) => cmd_gateway::run(command),
        Command::Mcp(args) => cmd_gateway::mcp(args),
        Command::Node(command) => cmd_node::run(command),
        Command::Nodes(command) => cmd_nodes::run(command),
        Command::Runs { command } => cmd_runs::run(command),
        Command::Init(args) => cmd_init::run(args),
        Command::Log(args) => cmd_log::run(args),
        Command::Doctor(args) => cmd_doctor::run(args),
        Command::Sandbox(command) => cmd_sandbox::sandbox(command),
        Command::Completions(args) => completions(args),
    };
    exit_now(code)
}

/// Exit with `code` once what was written is out: standard output flushed (stderr is
/// unbuffered), then `_exit`, skipping the C exit handlers — the allocator's, which
/// returns memory page by page to a process about to lose all of it, and the libraries'
/// destructors. Nothing of Warden's waits for them: every subcommand has ended its work
/// (and dropped its runtime) by the time it returns its code.
fn exit_now(code: i32) -> ! {
    use std::io::Write as _;
    host::flush_record();
    let _ = std::io::stdout().flush();
    // SAFETY: _exit ends the process at once; it takes a plain integer.
    unsafe { nix::libc::_exit(code) }
}
