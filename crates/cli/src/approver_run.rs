//! What an approver does with an exec request it allowed (`tools.exec.run_in_approver`):
//! run exactly the plan the human saw, here, in the approver's own context (its uid,
//! its session, its permissions), held like every other run, and report the output.
//! Shared by the terminal and the web approver.

use approvals::ipc::protocol::{ExecPrompt, ExecReport};
use caps::LocalShell;

/// Who runs an approved exec request, in words both approvers show before the human
/// decides: the command inherits this process's permissions, not the requester's.
pub fn runner_identity() -> String {
    format!(
        "this approver (uid {}, pid {})",
        nix::unistd::geteuid().as_raw(),
        std::process::id()
    )
}

/// Run an approved exec request in the approver's own context: exactly its plan.
pub async fn run_here(request: &ExecPrompt, shell: &LocalShell) -> ExecReport {
    let not_run = |message: String| ExecReport {
        exit_code: runner::EXIT_WARDEN_ERROR,
        signal: None,
        stdout: String::new(),
        stderr: String::new(),
        stdout_size: None,
        stderr_size: None,
        truncated: false,
        timed_out: false,
        duration_ms: 0,
        error: Some(message),
    };
    let Some(plan) = request.prompt.plan() else {
        return not_run("the request carries no plan to run".into());
    };
    // The plan carries its limits (timeout, processes, memory): the approver holds the
    // run to exactly what the runner would have.
    match runner::launch(shell, plan, None).await {
        Ok(out) => ExecReport {
            exit_code: out.exit_code(),
            signal: match out.status {
                caps::ExitStatus::Signal(s) => Some(s),
                caps::ExitStatus::Code(_) => None,
            },
            stdout: out.stdout,
            stderr: out.stderr,
            stdout_size: Some(out.stdout_size),
            stderr_size: Some(out.stderr_size),
            truncated: out.truncated,
            timed_out: out.timed_out,
            duration_ms: u64::try_from(out.duration.as_millis()).unwrap_or(u64::MAX),
            error: None,
        },
        Err(e) => ExecReport {
            error: Some(e.to_string()),
            exit_code: e.exit_code(),
            ..not_run(String::new())
        },
    }
}

/// One line about a finished run, for the approver's own screen.
pub fn summary(report: &ExecReport) -> String {
    match &report.error {
        Some(e) => format!("could not run it: {e}"),
        None if report.timed_out => format!(
            "timed out after {} ms; its process tree was killed",
            report.duration_ms
        ),
        None => format!(
            "exit {} after {} ms{}",
            report.exit_code,
            report.duration_ms,
            if report.truncated {
                " (output truncated)"
            } else {
                ""
            }
        ),
    }
}
