//! What a tool call returns. `content[0]` is the whole result of this call, in words an
//! agent reads without parsing: for `exec` the exit code (or the denial and its rule),
//! then stdout and stderr, each labelled, always in that order. System events about
//! other runs of the session come second, in their own labelled block. The same result
//! is in `structuredContent`, which satisfies the tool's `outputSchema` and says in its
//! `message` what happened (some clients hand the model only this JSON); output that is
//! not UTF-8 is there byte for byte, in base64 beside the lossy text.

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock};
use runner::{Outcome, RunReport};
use serde_json::{Value, json};

use crate::files::FileError;

/// The structured form of a run report (also `warden exec --json`'s). Whatever the
/// outcome and whichever host ran it, `exitCode`, `signal`, `timedOut`, `cancelled` and
/// `truncated` are there, each meaning one thing (see `docs/mcp.md`).
pub fn report_json(report: &RunReport) -> Value {
    let mut v = json!({
        "runId": report.run_id,
        "host": report.host,
        "decision": report.decision,
        "exitCode": report.exit_code(),
        "signal": Value::Null,
        "timedOut": false,
        "cancelled": false,
        "truncated": false,
        "notices": report.notices,
    });
    match &report.outcome {
        Outcome::Finished { output } => {
            v["status"] = "finished".into();
            v["signal"] = match output.status {
                caps::ExitStatus::Signal(s) => s.into(),
                caps::ExitStatus::Code(_) => Value::Null,
            };
            v["stdoutSize"] = size_json(&output.stdout_size);
            v["stderrSize"] = size_json(&output.stderr_size);
            v["stdout"] = output.stdout.clone().into();
            v["stderr"] = output.stderr.clone().into();
            let b64 = base64::engine::general_purpose::STANDARD;
            if let Some(bytes) = &output.stdout_bytes {
                v["stdoutBase64"] = b64.encode(bytes).into();
            }
            if let Some(bytes) = &output.stderr_bytes {
                v["stderrBase64"] = b64.encode(bytes).into();
            }
            v["truncated"] = output.truncated.into();
            v["timedOut"] = output.timed_out.into();
            v["durationMs"] = (output.duration.as_millis() as u64).into();
            if !output.egress.is_empty() {
                v["egress"] = serde_json::to_value(&output.egress).unwrap_or(Value::Null);
            }
        }
        Outcome::Denied { reason, rule } => {
            v["status"] = "denied".into();
            v["reason"] = reason.as_str().into();
            v["rule"] = rule.clone().into();
        }
        Outcome::Error { message, .. } => {
            v["status"] = "error".into();
            v["error"] = message.clone().into();
        }
        Outcome::Cancelled { started } => {
            v["status"] = "cancelled".into();
            v["cancelled"] = true.into();
            v["started"] = (*started).into();
        }
    }
    v["message"] = headline(report).into();
    v
}

/// A stream's size in the result: written, kept (and which), cut.
fn size_json(size: &caps::StreamSize) -> Value {
    json!({
        "written": size.written,
        "kept": size.kept(),
        "keptFirst": size.kept_first,
        "keptLast": size.kept_last,
        "cut": size.is_cut(),
    })
}

/// The first line of a run's result: how it ended, with the exit code, where, how long.
pub fn headline(report: &RunReport) -> String {
    let code = report.exit_code();
    match &report.outcome {
        Outcome::Finished { output } => {
            let ended = if output.timed_out {
                format!("timed out; the whole process tree was killed (exit code {code})")
            } else if let caps::ExitStatus::Signal(s) = output.status {
                format!("killed by signal {s} (exit code {code})")
            } else {
                format!("exit code {code}")
            };
            let cut = if output.truncated {
                "; output was cut to fit the cap: the beginning and end of each stream are kept"
            } else {
                ""
            };
            format!(
                "{ended} · host {} · {} ms · run {}{cut}",
                report.host,
                output.duration.as_millis(),
                report.run_id
            )
        }
        _ => format!(
            "{} (exit code {code}) · host {} · run {}",
            report.summary(),
            report.host,
            report.run_id
        ),
    }
}

/// One labelled stream of a finished run.
fn stream(name: &str, text: &str, raw: Option<&Vec<u8>>, size: &caps::StreamSize) -> String {
    if text.is_empty() && size.written == 0 {
        return format!("--- {name}: empty ---");
    }
    let lossy = match raw {
        Some(_) => {
            format!("; not UTF-8, shown lossily, exact bytes in structuredContent.{name}Base64")
        }
        None => String::new(),
    };
    // The size of what the command wrote, not of the text shown: each invalid byte is
    // shown as a three-byte replacement character, and a cut stream shows a marker.
    let written = size.written;
    let kept = if size.is_cut() {
        format!(
            ", cut to its first {} and last {}",
            size.kept_first, size.kept_last
        )
    } else {
        String::new()
    };
    let mut block = format!("--- {name} ({written} bytes{kept}{lossy}) ---\n{text}");
    if !block.ends_with('\n') {
        block.push('\n');
    }
    block.push_str(&format!("--- end of {name} ---"));
    block
}

/// `content[0]` of an `exec` result: the headline (and any standing notice of the host,
/// a line each), then stdout, then stderr.
pub fn report_text(report: &RunReport) -> String {
    let mut head = headline(report);
    for notice in &report.notices {
        head.push_str(&format!("\nnote: {notice}"));
    }
    if let Outcome::Finished { output } = &report.outcome {
        for connection in &output.egress {
            head.push_str(&format!("\nnetwork: {connection}"));
        }
    }
    match &report.outcome {
        Outcome::Finished { output } => format!(
            "{head}\n{}\n{}",
            stream(
                "stdout",
                &output.stdout,
                output.stdout_bytes.as_ref(),
                &output.stdout_size
            ),
            stream(
                "stderr",
                &output.stderr,
                output.stderr_bytes.as_ref(),
                &output.stderr_size
            ),
        ),
        _ => head,
    }
}

/// A tool result: `text` first, the session's events in a block of their own, and
/// `value` (with the events) as the structured content.
pub fn tool_result(
    mut value: Value,
    text: String,
    events: Vec<String>,
    is_error: bool,
) -> CallToolResult {
    let mut content = vec![ContentBlock::text(text)];
    if !events.is_empty() {
        let listed: Vec<String> = events.iter().map(|e| format!("- {e}")).collect();
        content.push(ContentBlock::text(format!(
            "System events about other runs of this session (each delivered once):\n{}",
            listed.join("\n")
        )));
    }
    value["events"] = json!(events);
    let mut r = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    r.structured_content = Some(value);
    r
}

/// The result of `exec`.
pub fn exec_result(report: &RunReport, events: Vec<String>) -> CallToolResult {
    let failed = !matches!(report.outcome, Outcome::Finished { .. });
    tool_result(report_json(report), report_text(report), events, failed)
}

/// A file tool (or `session`) that did what it was asked: `text` is what the agent reads
/// first; `value` gets `ok` and `message`.
pub fn done(
    mut value: Value,
    message: String,
    text: String,
    events: Vec<String>,
) -> CallToolResult {
    value["ok"] = true.into();
    value["message"] = message.into();
    tool_result(value, text, events, false)
}

/// A file tool (or `session`) that failed, and why.
pub fn failed(error: String, events: Vec<String>) -> CallToolResult {
    let value = json!({"ok": false, "message": error.clone(), "error": error.clone()});
    tool_result(value, error, events, true)
}

/// [`failed`] for a file tool's error.
pub fn file_failed(e: &FileError, events: Vec<String>) -> CallToolResult {
    failed(e.to_string(), events)
}

/// At most this much of written text is shown in an approval prompt.
const PREVIEW_CHARS: usize = 400;

/// Text as the approver sees it in a prompt: quoted, cut at [`PREVIEW_CHARS`] characters.
pub fn preview(text: &str) -> String {
    let cut: String = text.chars().take(PREVIEW_CHARS).collect();
    if cut.len() < text.len() {
        format!("{cut:?}… ({} more bytes)", text.len() - cut.len())
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{Decision, DenyReason};
    use std::time::Duration;

    fn report(outcome: Outcome, decision: Decision) -> RunReport {
        let resolved = policy::resolve(
            &policy::ExecParams::default(),
            &policy::SessionOverrides::default(),
            &policy::Config::default(),
            None,
            &policy::HostCeiling::DENY_ALL,
        );
        RunReport {
            run_id: "run-1".into(),
            host: runner::RunHost::Gateway,
            policy: resolved,
            decision,
            executed: None,
            outcome,
            notices: Vec::new(),
        }
    }

    fn allow() -> Decision {
        Decision::Allow {
            reason: policy::AllowReason::AllowlistMatch,
            rule: "/usr/bin/printf".into(),
        }
    }

    fn finished(stdout: &[u8], stderr: &[u8], cap: usize) -> Outcome {
        let mut c = caps::OutputCollector::new(caps::OutputLimits {
            max_output_bytes: cap,
            tail_bytes: 100,
        });
        c.push(caps::Stream::Stdout, stdout);
        c.push(caps::Stream::Stderr, stderr);
        Outcome::Finished {
            output: c.finish(caps::ExitStatus::Code(3), false, Duration::from_millis(7)),
        }
    }

    fn validator(tool: &str) -> jsonschema::Validator {
        jsonschema::draft202012::new(&super::super::tools::output_schema(tool)).unwrap()
    }

    #[test]
    fn the_first_block_is_the_whole_result_in_a_fixed_order() {
        let r = exec_result(
            &report(finished(b"out\n", b"err\n", 1000), allow()),
            vec!["Exec finished (node=gateway, id=run-0, code=0)".into()],
        );
        let text = r.content[0].as_text().unwrap().text.clone();
        assert_eq!(
            text,
            "exit code 3 · host gateway · 7 ms · run run-1\n--- stdout (4 bytes) ---\nout\n--- end of stdout ---\n--- stderr (4 bytes) ---\nerr\n--- end of stderr ---"
        );
        let events = r.content[1].as_text().unwrap().text.clone();
        assert!(
            events.starts_with("System events about other runs"),
            "{events}"
        );
        assert!(events.contains("id=run-0"), "{events}");
        let v = r.structured_content.unwrap();
        assert!(validator("exec").is_valid(&v), "{v:#}");
        assert_eq!(
            v["message"],
            "exit code 3 · host gateway · 7 ms · run run-1"
        );
    }

    #[test]
    fn output_that_is_not_utf8_is_returned_byte_for_byte() {
        let bytes = b"ok \xff\xfe end\n";
        let r = exec_result(&report(finished(bytes, b"", 1000), allow()), vec![]);
        let v = r.structured_content.unwrap();
        assert!(validator("exec").is_valid(&v), "{v:#}");
        let b64 = base64::engine::general_purpose::STANDARD;
        assert_eq!(
            b64.decode(v["stdoutBase64"].as_str().unwrap()).unwrap(),
            bytes
        );
        assert!(v.get("stderrBase64").is_none());
        assert!(v["stdout"].as_str().unwrap().contains('\u{fffd}'));
        let text = r.content[0].as_text().unwrap().text.clone();
        assert!(text.contains("stdoutBase64"), "{text}");
        // The size is of the bytes written (11), not of the text shown (14).
        assert!(
            text.contains(&format!("stdout ({} bytes;", bytes.len())),
            "{text}"
        );
        // A UTF-8 character cut by the cap is not a reason for base64.
        let r = exec_result(&report(finished("aé".as_bytes(), b"", 2), allow()), vec![]);
        assert!(r.structured_content.unwrap().get("stdoutBase64").is_none());
    }

    #[test]
    fn a_denial_says_in_words_what_happened_and_validates() {
        let rule = "askFallback=deny: nobody answered".to_owned();
        let r = exec_result(
            &report(
                Outcome::Denied {
                    reason: DenyReason::NoApprover,
                    rule: rule.clone(),
                },
                Decision::Deny {
                    reason: DenyReason::NoApprover,
                    rule: rule.clone(),
                },
            ),
            vec![],
        );
        assert_eq!(r.is_error, Some(true));
        let v = r.structured_content.unwrap();
        assert!(validator("exec").is_valid(&v), "{v:#}");
        let message = v["message"].as_str().unwrap();
        assert!(
            message.starts_with("denied (no-approver): askFallback=deny"),
            "{message}"
        );
        assert!(message.contains("exit code 75"), "{message}");
        assert_eq!(r.content[0].as_text().unwrap().text, message);
        for outcome in [
            Outcome::Cancelled { started: true },
            Outcome::Error {
                message: "not found".into(),
                exit_code: 127,
            },
        ] {
            let cancelled = matches!(outcome, Outcome::Cancelled { .. });
            let v = exec_result(&report(outcome, allow()), vec![])
                .structured_content
                .unwrap();
            assert!(validator("exec").is_valid(&v), "{v:#}");
            // The outcome fields are in every result, each meaning one thing.
            assert_eq!(v["cancelled"], cancelled, "{v:#}");
            assert_eq!(
                (&v["signal"], &v["timedOut"], &v["truncated"]),
                (&Value::Null, &json!(false), &json!(false))
            );
        }
    }

    #[test]
    fn a_cut_stream_says_what_was_written_and_which_ends_are_kept() {
        let stdout = "line\n".repeat(100);
        let r = exec_result(
            &report(finished(stdout.as_bytes(), b"the error\n", 100), allow()),
            vec![],
        );
        let v = r.structured_content.unwrap();
        assert!(validator("exec").is_valid(&v), "{v:#}");
        assert_eq!(
            v["stdoutSize"],
            json!({"written": 500, "kept": 90, "keptFirst": 45, "keptLast": 45, "cut": true})
        );
        assert_eq!(v["stderrSize"]["cut"], false);
        assert_eq!(v["stderr"], "the error\n");
        assert_eq!(v["truncated"], true);
        let text = &r.content[0].as_text().unwrap().text;
        assert!(
            text.contains("--- stdout (500 bytes, cut to its first 45 and last 45) ---"),
            "{text}"
        );
        assert!(
            text.contains("… (truncated: 410 bytes dropped here"),
            "{text}"
        );
        assert!(text.contains("the beginning and end of each stream are kept"));
    }

    #[test]
    fn file_results_validate_against_their_schemas() {
        let events = vec!["e".to_owned()];
        for tool in ["read", "write", "edit", "list", "grep", "session"] {
            let v = failed("access denied: x".into(), events.clone())
                .structured_content
                .unwrap();
            assert!(validator(tool).is_valid(&v), "{tool}: {v:#}");
        }
        let ok = [
            ("read", json!({"path": "a", "text": "x\n"})),
            ("write", json!({"path": "a", "bytes": 3})),
            ("edit", json!({"path": "a", "replacements": 1})),
            (
                "list",
                json!({"path": "", "entries": [{"name": "a", "kind": "dir"}], "truncated": false}),
            ),
            (
                "grep",
                json!({"matches": [{"path": "a", "line": 1, "text": "x"}], "truncated": false}),
            ),
            ("session", json!({})),
        ];
        for (tool, value) in ok {
            let v = done(value, "done".into(), "done".into(), events.clone())
                .structured_content
                .unwrap();
            assert!(validator(tool).is_valid(&v), "{tool}: {v:#}");
        }
    }
}
