//! Starting a plan: the resolved file under the name it was called by (only if it is
//! still the file the plan names), or the script under its shell, held to exactly the
//! plan's limits. Every executor — the runner, the approver's run-here, a node — starts
//! runs through here.

use caps::{ExecAllowlist, ExecOptions, ExecOutput, Script, Shell};
use policy::{Launch, RunPlan};

/// The OS argv of `plan`, the resolved file first.
pub(crate) fn os_argv(plan: &RunPlan) -> Vec<String> {
    match &plan.launch {
        Launch::Exec { program, argv, .. } => {
            let mut argv = argv.clone();
            if let Some(first) = argv.first_mut() {
                first.clone_from(program);
            }
            argv
        }
        Launch::Script { .. } => plan.launch.os_argv(),
    }
}

/// Start `plan` on `shell` and wait for it: the resolved file under the name it was
/// called by (and only if it is still the file the plan names), or the script under its
/// shell — exactly what was approved, held to exactly the plan's limits (timeout,
/// processes, memory, exec allowlist). Dropping the future kills the run's whole tree.
///
/// A plan whose exec allowlist `shell` cannot enforce runs without it only when the
/// allowlist is best-effort; a required one refuses the run.
pub async fn launch(
    shell: &dyn Shell,
    plan: &RunPlan,
    live: Option<caps::LiveOutput>,
) -> caps::Result<ExecOutput> {
    let exec_allowlist = match &plan.limits.exec_allowlist {
        None => None,
        Some(list) => match shell.exec_allowlist_support() {
            Ok(()) => Some(list.to_caps()),
            Err(why) if list.required => {
                return Err(caps::CapsError::Unsupported {
                    what: format!("the plan's required exec allowlist here: {why}"),
                });
            }
            Err(_) => None,
        },
    };
    launch_restricted(shell, plan, exec_allowlist, live, None, None, None).await
}

/// [`launch`] with the exec allowlist the caller worked out for `shell` (the runner
/// checks every profile of a sandbox at once, and direct mode runs without one), the
/// standard input its driver writes while it runs, if any (else `/dev/null`), the
/// terminal it runs on, if any, and who decides a connection its egress rules do not name
/// (else such a connection is refused).
pub(crate) async fn launch_restricted(
    shell: &dyn Shell,
    plan: &RunPlan,
    exec_allowlist: Option<ExecAllowlist>,
    live: Option<caps::LiveOutput>,
    input: Option<caps::InputStream>,
    terminal: Option<caps::TerminalSize>,
    ask_connection: Option<caps::ConnectionAsker>,
) -> caps::Result<ExecOutput> {
    let mut options = ExecOptions::new(&plan.cwd, plan.limits.timeout());
    if let Some(input) = input {
        options.stdin = caps::Stdin::Stream(input);
    }
    options.terminal = terminal;
    options.env = plan.env.clone();
    options.resources = plan.limits.resources();
    options.exec_allowlist = exec_allowlist;
    options.live = live;
    options.ask_connection = ask_connection;
    // The approved plan's own rules decide its connections, whatever the sandbox was
    // built with.
    options.connection_rules = plan
        .limits
        .network
        .as_ref()
        .and_then(|n| n.egress())
        .map(policy::ResolvedEgress::gate);
    match &plan.launch {
        Launch::Exec {
            program,
            program_id,
            argv,
        } => {
            if argv.first() != Some(program) {
                options.arg0 = argv.first().cloned();
            }
            options.expect_program = *program_id;
            shell.exec(&os_argv(plan), &options).await
        }
        Launch::Script { shell: sh, source } => {
            let script = Script {
                shell: sh.into(),
                source: source.clone(),
            };
            shell.run(&script, &options).await
        }
    }
}
