//! `warden log`: the record (`$WARDEN_HOME/audit/`, the `audit` crate) read back —
//! filtered by agent, host, node, decision, kind, run and time; `--follow` to keep
//! printing what is added; `--json` for one record per line, as stored; `--verify` to
//! check the hash chain and name its first break. What agents wrote (commands, rules) is
//! shown escaped (`approvals::display::escape`): a record must not drive the operator's
//! terminal.

use std::path::Path;

use audit::{Filter, Kind, Record, Records, Stored};
use caps::Fs;

use crate::host::HostFacts;

/// Arguments of `warden log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Only this agent's records.
    #[arg(long)]
    agent: Option<String>,
    /// Only records of this host: sandbox, gateway, direct or node.
    #[arg(long)]
    host: Option<String>,
    /// Only this node's records.
    #[arg(long)]
    node: Option<String>,
    /// Only records with this decision: allow, deny or ask.
    #[arg(long, value_parser = ["allow", "deny", "ask"])]
    decision: Option<String>,
    /// Only records of this kind: decision, answer, run or policy.
    #[arg(long, value_parser = parse_kind)]
    kind: Option<Kind>,
    /// Only this run's records.
    #[arg(long)]
    run: Option<String>,
    /// Only records from this time on: 2026-12-02, 2026-12-02T10:00:00Z, or a duration
    /// before now (2h, 1d).
    #[arg(long, value_parser = audit::parse_time_bound)]
    since: Option<String>,
    /// Only records before this time (same forms as --since).
    #[arg(long, value_parser = audit::parse_time_bound)]
    until: Option<String>,
    /// Only the last N matching records.
    #[arg(long, short = 'n')]
    limit: Option<usize>,
    /// One record per line, exactly as stored (JSON, its hash last).
    #[arg(long)]
    json: bool,
    /// After the records so far, keep printing matching records as they are added.
    #[arg(long, short = 'f', conflicts_with = "verify")]
    follow: bool,
    /// Check the hash chain instead: exit 0 if intact, 1 naming the first break.
    #[arg(long)]
    verify: bool,
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    s.parse()
}

/// Run `warden log`.
pub fn run(args: LogArgs) -> i32 {
    crate::exit::or_report(log(args))
}

fn log(args: LogArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let fs = facts.fs();
    let dir = facts.audit_dir();
    if args.verify {
        return verify(fs.as_ref(), &dir, args.json);
    }
    let filter = Filter {
        agent: args.agent.clone(),
        host: args.host.clone(),
        node: args.node.clone(),
        decision: args.decision.clone(),
        kind: args.kind,
        run_id: args.run.clone(),
        since: args.since.clone(),
        until: args.until.clone(),
    };
    let mut last_seq = 0;
    let records = Records::read(fs.as_ref(), &dir, filter.clone())?;
    let mut shown: Vec<Stored> = Vec::new();
    for stored in records {
        let stored = stored?;
        last_seq = stored.record.seq;
        shown.push(stored);
        if let Some(n) = args.limit
            && shown.len() > n
        {
            shown.remove(0);
        }
    }
    if shown.is_empty() && !args.follow && !args.json {
        let exists = fs.exists(&dir.join(audit::CURRENT_FILE)).unwrap_or(false);
        eprintln!(
            "warden: {}",
            if exists {
                "no record matches"
            } else {
                "nothing recorded yet (the record is kept in $WARDEN_HOME/audit; `[audit] enabled = false` turns it off)"
            }
        );
    }
    for record in &shown {
        print(record, args.json);
    }
    if !args.follow {
        return Ok(0);
    }
    // Follow: read again whenever the log grows; a rotated file's records are read
    // from the new current file's start, skipping what was already shown.
    let mut len = Records::current_len(fs.as_ref(), &dir);
    loop {
        std::thread::sleep(audit::FOLLOW_INTERVAL);
        let now = Records::current_len(fs.as_ref(), &dir);
        if now == len {
            continue;
        }
        len = now;
        for stored in Records::read(fs.as_ref(), &dir, filter.clone())? {
            let stored = stored?;
            if stored.record.seq > last_seq {
                last_seq = stored.record.seq;
                print(&stored, args.json);
            }
        }
    }
}

fn verify(fs: &dyn Fs, dir: &Path, json: bool) -> anyhow::Result<i32> {
    let report = audit::verify(fs, dir)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        match &report.first_break {
            None => {
                let torn = if report.torn > 0 {
                    format!(
                        "; {} cut-short line(s) from a crash while writing, passed over by the chain",
                        report.torn
                    )
                } else {
                    String::new()
                };
                outln!(
                    "intact: {} record(s) in {} file(s){}{torn}",
                    report.records,
                    report.files,
                    report
                        .last
                        .as_ref()
                        .map(|(seq, hash)| format!(", the last #{seq} with hash {hash}"))
                        .unwrap_or_default()
                );
            }
            Some(b) => {
                outln!(
                    "BROKEN at {} line {}{}: {}\n({} record(s) before it are intact)",
                    b.file.display(),
                    b.line,
                    b.seq.map(|s| format!(" (record #{s})")).unwrap_or_default(),
                    b.problem,
                    report.records
                );
            }
        }
    }
    // A break: exit 1, the report printed.
    Ok(i32::from(report.first_break.is_some()))
}

fn print(stored: &Stored, json: bool) {
    if json {
        // As stored: the line a verifier hashes.
        outln!("{}", stored.line);
    } else {
        outln!("{}", line(&stored.record));
    }
}

/// One record as one line for a person.
fn line(record: &Record) -> String {
    let e = &record.entry;
    let esc = |s: &Option<String>| s.as_deref().map(approvals::display::escape);
    let mut out = format!(
        "{} #{} {:<8} {:<8}",
        record.time,
        record.seq,
        record.origin,
        e.kind.name()
    );
    let mut add = |part: Option<String>| {
        if let Some(p) = part.filter(|p| !p.is_empty()) {
            out.push(' ');
            out.push_str(&p);
        }
    };
    add(esc(&e.decision));
    add(esc(&e.outcome));
    add(e
        .agent
        .as_ref()
        .map(|a| format!("agent={}", approvals::display::escape(a))));
    add(match (&e.host, &e.node) {
        (Some(h), Some(n)) => Some(format!("host={h}:{}", approvals::display::escape(n))),
        (Some(h), None) => Some(format!("host={h}")),
        _ => None,
    });
    add(esc(&e.run_id));
    add(e.exit_code.map(|c| format!("exit={c}")));
    add(e.duration_ms.map(|d| format!("{d}ms")));
    add(e.output_bytes.map(|b| format!("{b}B")));
    add(esc(&e.command).map(|c| format!("\"{}\"", c.replace('"', "\\\""))));
    add(esc(&e.approver).map(|a| format!("by {a}")));
    add(esc(&e.file));
    add(esc(&e.change));
    if record.entry.kind == Kind::Decision || record.entry.kind == Kind::Answer {
        add(match (&e.reason, esc(&e.rule)) {
            (Some(reason), Some(rule)) => Some(format!("— {reason}: {rule}")),
            (Some(reason), None) => Some(format!("— {reason}")),
            _ => None,
        });
    }
    out
}
