//! `warden runs [list] | logs RUN [--follow] [--raw] | kill RUN`: the operator's view of
//! the runs a running `warden gateway run` holds (those started with `yield`,
//! `background`, or that became MCP tasks), every agent's, over the gateway's operator
//! socket. Output is shown with escape sequences removed and other control characters
//! made visible (`gateway::operator::printable`): what a run writes must not drive the
//! operator's terminal. `--raw` passes the bytes as they are, for a pipe.

use std::time::Duration;

use anyhow::bail;
use serde_json::{Value, json};

use crate::exit;
use crate::host::HostFacts;
use crate::operator::runs_call;

/// `warden runs ...`
#[derive(Debug, clap::Subcommand)]
pub enum RunsCommand {
    /// List every agent's live and recently ended runs (the default).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a run's output (the last 1 MiB it kept).
    Logs {
        /// The run id (`warden runs` lists them).
        run: String,
        /// Keep printing what it writes until it ends (Ctrl-C stops following, not the run).
        #[arg(long, short = 'f')]
        follow: bool,
        /// Write the output's bytes as they are, escape sequences included.
        #[arg(long)]
        raw: bool,
    },
    /// End a run: a pending question is withdrawn, a running command's whole tree killed.
    /// Its agent reads that the operator ended it.
    Kill {
        /// The run id.
        run: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run `warden runs ...` (`list` when no subcommand is given).
pub fn run(command: Option<RunsCommand>) -> i32 {
    exit::or_report(run_inner(
        command.unwrap_or(RunsCommand::List { json: false }),
    ))
}

fn run_inner(command: RunsCommand) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    match command {
        RunsCommand::List { json } => {
            let answer = runs_call(&facts, json!({"op": "runs.list"}))?;
            if json {
                outln!("{answer:#}");
                return Ok(0);
            }
            let runs = answer["runs"].as_array().cloned().unwrap_or_default();
            if runs.is_empty() {
                outln!("no runs: the gateway holds none that outlive their call");
            }
            for run in &runs {
                outln!("{}", line(run));
            }
            Ok(0)
        }
        RunsCommand::Logs { run, follow, raw } => logs(&facts, &run, follow, raw),
        RunsCommand::Kill { run, json } => {
            let answer = runs_call(&facts, json!({"op": "runs.kill", "run": run}))?;
            if json {
                outln!("{answer:#}");
            } else if answer["killed"] == true {
                outln!("killed {}", line(&answer["run"]));
            } else {
                outln!("had already ended: {}", line(&answer["run"]));
            }
            Ok(0)
        }
    }
}

/// Print run `run`'s output, from its oldest kept byte; with `follow`, until it ends.
fn logs(facts: &HostFacts, run: &str, follow: bool, raw: bool) -> anyhow::Result<i32> {
    let mut cursor: Option<u64> = None;
    let mut announced_drop = false;
    loop {
        let wait_ms = if follow && cursor.is_some() {
            10_000
        } else {
            0
        };
        let answer = runs_call(
            facts,
            json!({"op": "runs.read", "run": run, "cursor": cursor, "waitMs": wait_ms}),
        )?;
        let Some(next) = answer["cursor"].as_u64() else {
            bail!("the gateway's answer has no cursor: {answer}");
        };
        let dropped = answer["dropped"].as_u64().unwrap_or(0);
        if dropped > 0 && !announced_drop {
            eprintln!("warden: the first {dropped} bytes of run {run}'s output are no longer kept");
            announced_drop = true;
        }
        let text = answer["output"].as_str().unwrap_or_default();
        if raw {
            out!("{text}");
        } else {
            out!("{}", gateway::operator::printable(text));
        }
        cursor = Some(next);
        let more = answer["more"] == true;
        if more {
            continue;
        }
        if !follow || answer["ended"] == true {
            if answer["ended"] == true {
                eprintln!("warden: run {run} {}", status(&answer["run"]));
            }
            return Ok(0);
        }
        // Nothing new yet: the next read waits on the gateway's side.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One run on a line.
fn line(run: &Value) -> String {
    let command = gateway::operator::printable(run["command"].as_str().unwrap_or_default());
    format!(
        "{} · agent {} · {} · {} · {}",
        run["runId"].as_str().unwrap_or("?"),
        run["agent"].as_str().unwrap_or("?"),
        run["host"].as_str().unwrap_or("?"),
        status(run),
        command.replace('\n', " ")
    )
}

fn status(run: &Value) -> String {
    gateway::operator::printable(run["status"].as_str().unwrap_or_default())
}
