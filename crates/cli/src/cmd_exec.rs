//! `warden exec`: run one command (an argv, or a script with `--shell`) through the local
//! provider with Warden's limits, and pass its exit code through.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use caps::{ExecOptions, ExecOutput, LocalShell, Script, Shell};

use crate::exit;
use crate::host::HostFacts;

/// Arguments of `warden exec`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: the command's own, 124 on timeout, 125 if Warden failed, \
                  126 not executable, 127 not found, 128+N if killed by signal N."
)]
pub struct ExecArgs {
    /// Kill the command's whole process tree after this long (e.g. 30s, 5m, 1h30m).
    /// The default is long enough for builds and test suites, and never infinite.
    #[arg(long, value_parser = parse_duration, default_value = "300s")]
    timeout: Duration,
    /// Working directory (default: the current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Print the typed result as JSON instead of the command's output.
    #[arg(long)]
    json: bool,
    /// Run this string with /bin/sh -c instead of an argv.
    #[arg(long, conflicts_with = "argv")]
    shell: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required_unless_present = "shell")]
    argv: Vec<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = match s.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))?
        }
    };
    if d.is_zero() {
        return Err("the timeout must be greater than zero".into());
    }
    Ok(d)
}

/// Run `warden exec` and return the process exit code.
pub fn run(args: ExecArgs) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("warden: cannot start the runtime: {e}");
            return exit::WARDEN_ERROR;
        }
    };
    runtime.block_on(run_async(args))
}

async fn run_async(args: ExecArgs) -> i32 {
    let cwd = match args
        .cwd
        .clone()
        .map(Ok)
        .unwrap_or_else(std::env::current_dir)
    {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("warden: cannot determine the working directory: {e}");
            return exit::WARDEN_ERROR;
        }
    };
    let cwd = if cwd.is_absolute() {
        cwd
    } else {
        match std::env::current_dir() {
            Ok(here) => here.join(cwd),
            Err(e) => {
                eprintln!("warden: cannot determine the working directory: {e}");
                return exit::WARDEN_ERROR;
            }
        }
    };
    let facts = match HostFacts::read() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("warden: {e:#}");
            return exit::WARDEN_ERROR;
        }
    };
    let mut options = ExecOptions::new(cwd, args.timeout);
    options.env = policy::build_child_env(
        &facts.env,
        &facts.trusted_path.to_path_var(),
        &Default::default(),
        &[],
    )
    .unwrap_or_default();
    let shell = LocalShell::new();
    let run = async {
        match &args.shell {
            Some(source) => shell.run(&Script::sh(source.clone()), &options).await,
            None => shell.exec(&args.argv, &options).await,
        }
    };
    let result = tokio::select! {
        result = run => result,
        _ = tokio::signal::ctrl_c() => {
            // Dropping `run` killed the process tree.
            eprintln!("warden: interrupted; the command was killed");
            return exit::INTERRUPTED;
        }
    };
    match result {
        Ok(output) => report(&output, args.json),
        Err(err) => {
            let code = exit::for_caps_error(&err);
            if args.json {
                print_json(&serde_json::json!({ "error": err.to_string(), "exit_code": code }));
            } else {
                eprintln!("warden: {err}");
            }
            code
        }
    }
}

/// The exit code for a finished run.
fn exit_code(output: &ExecOutput) -> i32 {
    if output.timed_out {
        exit::TIMED_OUT
    } else {
        output.status.shell_code()
    }
}

fn report(output: &ExecOutput, json: bool) -> i32 {
    let code = exit_code(output);
    if json {
        let mut value = serde_json::to_value(output).unwrap_or_default();
        value["exit_code"] = code.into();
        print_json(&value);
    } else {
        let _ = std::io::stdout().write_all(output.stdout.as_bytes());
        let _ = std::io::stderr().write_all(output.stderr.as_bytes());
        if output.timed_out {
            eprintln!("warden: timed out; the process tree was killed");
        }
    }
    code
}

fn print_json(value: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer_pretty(&mut out, value);
    let _ = writeln!(out);
}
