//! The runner on the memory provider: every branch of the flow, with a scripted shell
//! and a scripted approver, and nothing touching the real disk or starting a process.

// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use approvals::ipc::AskOutcome;
use approvals::ipc::protocol::{Answer, Request, Response};
use approvals::{Clock, Store, StoreConfig};
use caps::{
    ExitStatus, Fs, MemoryFs, OutputCollector, RecordedCall, ScriptedShell, Stream, WriteOptions,
};
use policy::{CaseMode, Config, ExecParams, Security, TrustedPath};
use runner::{
    Approvals, CollectEvents, CommandSpec, ExecEvent, ExecRequest, Outcome, Runner, RunnerHost,
};
use tokio_util::sync::CancellationToken;

struct FixedClock;
impl Clock for FixedClock {
    fn now_ms(&self) -> u64 {
        1_700_000_000_000
    }
}

/// Answers every prompt with a fixed outcome and remembers what it was shown.
struct ScriptedApprover {
    outcome: Mutex<Option<Answer>>,
    absent: bool,
    seen: Mutex<Vec<Request>>,
}

#[async_trait::async_trait]
impl Approvals for ScriptedApprover {
    async fn ask(&self, request: &Request) -> AskOutcome {
        self.seen.lock().unwrap().push(request.clone());
        if self.absent {
            return AskOutcome::NoApprover("scripted: absent".into());
        }
        let p = request.prompt();
        AskOutcome::Answered(Response {
            id: p.id.clone(),
            plan_digest: p.plan_digest.clone(),
            answer: self.outcome.lock().unwrap().unwrap_or(Answer::Deny),
            report: None,
        })
    }
}

struct World {
    fs: Arc<MemoryFs>,
    shell: ScriptedShell,
    approver: Arc<ScriptedApprover>,
    runner: Runner,
    store: Store,
}

fn ok_output(text: &str) -> caps::ExecOutput {
    let mut c = OutputCollector::new(Default::default());
    c.push(Stream::Stdout, text.as_bytes());
    c.finish(ExitStatus::Code(0), false, Duration::from_millis(1))
}

fn world(approvals_json: &str, config: &str, answer: Option<Answer>) -> World {
    let fs = Arc::new(MemoryFs::with_uid(1000));
    for d in ["/usr/bin", "/bin", "/home/u/.warden", "/work"] {
        fs.create_dir_all(Path::new(d), 0o700).unwrap();
    }
    for p in ["/usr/bin/ls", "/usr/bin/cat", "/usr/bin/rm", "/bin/sh"] {
        fs.write(
            Path::new(p),
            b"",
            WriteOptions {
                mode: 0o755,
                ..Default::default()
            },
        )
        .unwrap();
    }
    fs.write(
        Path::new("/home/u/.warden/exec-approvals.json"),
        approvals_json.as_bytes(),
        WriteOptions::private(),
    )
    .unwrap();
    let store = Store::new(
        fs.clone(),
        StoreConfig {
            path: "/home/u/.warden/exec-approvals.json".into(),
            owner_uid: 1000,
            home: "/home/u".into(),
            case: CaseMode::Sensitive,
        },
    );
    let shell = ScriptedShell::new();
    shell.respond_with(|_| Ok(ok_output("out\n")));
    let approver = Arc::new(ScriptedApprover {
        outcome: Mutex::new(answer),
        absent: answer.is_none(),
        seen: Mutex::new(Vec::new()),
    });
    let host = RunnerHost {
        label: "gateway".into(),
        fs: fs.clone(),
        shell: Arc::new(shell.clone()),
        store: store.clone(),
        config: Config::parse(config, Path::new("config.toml")).unwrap(),
        host_env: BTreeMap::from([
            ("HOME".into(), "/home/u".into()),
            ("SECRET".into(), "x".into()),
        ]),
        trusted_path: TrustedPath::parse("/usr/bin:/bin"),
        default_cwd: PathBuf::from("/work"),
        approvals: approver.clone(),
        clock: Arc::new(FixedClock),
        gate: runner::Gate::Policy,
    };
    World {
        fs,
        shell,
        approver,
        runner: Runner::new(host),
        store,
    }
}

const ALLOWLIST_HOST: &str = r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},
  "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/ls"},{"pattern":"/usr/bin/cat"}]}}}"#;
const GATEWAY_ALLOWLIST: &str = "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\n";

fn request(command: CommandSpec) -> ExecRequest {
    ExecRequest {
        agent: Some("coder".into()),
        session: Some("s1".into()),
        command: Some(command),
        ..Default::default()
    }
}

async fn run(w: &World, req: ExecRequest) -> (runner::RunReport, Vec<ExecEvent>) {
    let events = CollectEvents::default();
    let report = w.runner.run(req, &events, &CancellationToken::new()).await;
    (report, events.events())
}

fn exec_argv(call: &RecordedCall) -> Vec<String> {
    match call {
        RecordedCall::Exec { argv, .. } => argv.clone(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_allowlisted_shell_string_runs_as_the_rebuilt_command() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, None);
    let (report, events) = run(
        &w,
        request(CommandSpec::Shell(
            "ls -la 'my dir' && cat notes.txt".into(),
        )),
    )
    .await;
    assert!(
        matches!(report.outcome, Outcome::Finished { .. }),
        "{report:?}"
    );
    let calls = w.shell.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        exec_argv(&calls[0]),
        vec![
            "/bin/sh",
            "-c",
            "/usr/bin/ls -la 'my dir' && /usr/bin/cat notes.txt"
        ]
    );
    assert!(report.executed.unwrap().rebuilt);
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].text(),
        format!("Exec started (node=gateway, id={})", report.run_id)
    );
    assert_eq!(
        events[1].text(),
        format!(
            "Exec finished (node=gateway, id={}, code=0)\nout\n",
            report.run_id
        )
    );
    assert!(w.approver.seen.lock().unwrap().is_empty());
    // Usage was recorded.
    let file = w.store.load().unwrap().file;
    let entry = &file.agents["coder"].allowlist[0];
    assert_eq!(entry.last_used_at, Some(1_700_000_000_000));
    assert_eq!(entry.last_resolved_path.as_deref(), Some("/usr/bin/ls"));
}

#[tokio::test]
async fn a_single_allowlisted_command_runs_as_an_argv_without_a_shell() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, None);
    let (report, _) = run(&w, request(CommandSpec::Shell("ls -la".into()))).await;
    assert!(matches!(report.outcome, Outcome::Finished { .. }));
    assert_eq!(exec_argv(&w.shell.calls()[0]), vec!["/usr/bin/ls", "-la"]);
}

#[tokio::test]
async fn the_environment_is_built_from_the_allowlist_and_injection_is_refused() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, None);
    let mut req = request(CommandSpec::Argv(vec!["ls".into()]));
    req.env = BTreeMap::from([("TERM".into(), "dumb".into())]);
    run(&w, req).await;
    let RecordedCall::Exec { options, .. } = &w.shell.calls()[0] else {
        panic!()
    };
    assert_eq!(options.env.get("PATH").unwrap(), "/usr/bin:/bin");
    assert_eq!(options.env.get("TERM").unwrap(), "dumb");
    assert!(!options.env.contains_key("SECRET"));
    let mut req = request(CommandSpec::Argv(vec!["ls".into()]));
    req.env = BTreeMap::from([("LD_PRELOAD".into(), "/tmp/x.so".into())]);
    let (report, events) = run(&w, req).await;
    assert!(
        matches!(&report.outcome, Outcome::Error { message, .. } if message.contains("LD_PRELOAD")),
        "{report:?}"
    );
    assert_eq!(w.shell.calls().len(), 1, "nothing ran");
    assert!(events.is_empty());
}

#[tokio::test]
async fn deny_runs_nothing_and_emits_a_denied_event() {
    let w = world(
        r#"{"version":1}"#,
        GATEWAY_ALLOWLIST,
        Some(Answer::AllowOnce),
    );
    let (report, events) = run(&w, request(CommandSpec::Argv(vec!["ls".into()]))).await;
    assert!(matches!(&report.outcome, Outcome::Denied { reason, .. } if reason == "security=deny"));
    assert!(w.shell.calls().is_empty());
    assert_eq!(
        events,
        vec![ExecEvent::Denied {
            run_id: report.run_id.clone(),
            host: "gateway".into(),
            reason: "security=deny".into()
        }]
    );
    assert_eq!(
        events[0].text(),
        format!(
            "Exec denied (node=gateway, id={}, security=deny)",
            report.run_id
        )
    );
}

#[tokio::test]
async fn a_miss_asks_and_the_approvers_answer_decides() {
    for (answer, runs, reason) in [
        (Answer::AllowOnce, true, ""),
        (Answer::AllowAlways, true, ""),
        (Answer::Deny, false, "approval-denied"),
    ] {
        let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, Some(answer));
        let (report, _) = run(&w, request(CommandSpec::Shell("rm -rf build > log".into()))).await;
        assert_eq!(w.shell.calls().len(), usize::from(runs), "{answer:?}");
        if runs {
            // Approved commands run as written (the human saw exactly this).
            assert_eq!(
                exec_argv(&w.shell.calls()[0]),
                vec!["/bin/sh", "-c", "rm -rf build > log"]
            );
            assert!(!report.executed.unwrap().rebuilt);
        } else {
            assert!(matches!(&report.outcome, Outcome::Denied { reason: r, .. } if r == reason));
        }
        let seen = w.approver.seen.lock().unwrap();
        let prompt = seen[0].prompt();
        assert_eq!(
            prompt.plan.argv,
            vec!["/bin/sh", "-c", "rm -rf build > log"]
        );
        assert_eq!(prompt.plan.cwd, "/work");
        assert_eq!(prompt.plan.agent, "coder");
        assert_eq!(prompt.plan_digest, prompt.plan.digest());
        assert_eq!(prompt.reason, "allowlist-miss");
    }
}

#[tokio::test]
async fn no_approver_applies_each_ask_fallback() {
    for (fallback, command, runs, reason) in [
        ("deny", "ls -la", false, "no-approver"),
        ("allowlist", "ls -la", true, ""),
        ("allowlist", "rm -rf x", false, "no-approver"),
        ("full", "rm -rf x", true, ""),
    ] {
        let host = format!(
            r#"{{"version":1,"defaults":{{"security":"allowlist","ask":"always","askFallback":"{fallback}"}},
            "agents":{{"coder":{{"allowlist":[{{"pattern":"/usr/bin/ls"}}]}}}}}}"#
        );
        let w = world(&host, GATEWAY_ALLOWLIST, None);
        let (report, _) = run(&w, request(CommandSpec::Shell(command.into()))).await;
        assert_eq!(
            w.shell.calls().len(),
            usize::from(runs),
            "{fallback} {command}: {report:?}"
        );
        if !runs {
            assert!(matches!(&report.outcome, Outcome::Denied { reason: r, .. } if r == reason));
        }
    }
}

#[tokio::test]
async fn tool_parameters_cannot_loosen_the_host_file() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, None);
    let mut req = request(CommandSpec::Shell("rm -rf /".into()));
    req.params = ExecParams {
        security: Some(Security::Full),
        ask: Some(policy::Ask::Off),
        ..Default::default()
    };
    let (report, _) = run(&w, req).await;
    assert!(
        matches!(&report.outcome, Outcome::Denied { .. }),
        "{report:?}"
    );
    assert!(w.shell.calls().is_empty());
    assert_eq!(report.policy.security.value, Security::Allowlist);
}

#[tokio::test]
async fn a_corrupt_host_file_denies_everything() {
    let w = world(
        "{corrupt",
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        Some(Answer::AllowOnce),
    );
    let (report, _) = run(&w, request(CommandSpec::Argv(vec!["ls".into()]))).await;
    assert!(matches!(&report.outcome, Outcome::Denied { reason, .. } if reason == "security=deny"));
    assert!(w.shell.calls().is_empty());
    assert!(
        w.fs.file_paths()
            .iter()
            .any(|p| p.to_string_lossy().contains(".corrupt-"))
    );
}

#[tokio::test]
async fn missing_programs_and_bad_requests_are_errors_with_exit_codes() {
    let w = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        None,
    );
    let (report, _) = run(&w, request(CommandSpec::Argv(vec!["nope".into()]))).await;
    assert!(
        matches!(report.outcome, Outcome::Error { exit_code: 127, .. }),
        "{report:?}"
    );
    let mut req = request(CommandSpec::Argv(vec!["ls".into()]));
    req.timeout = Some(Duration::from_secs(100_000));
    let (report, _) = run(&w, req).await;
    assert!(
        matches!(&report.outcome, Outcome::Error { message, exit_code: 125 } if message.contains("maximum"))
    );
    let (report, _) = run(
        &w,
        ExecRequest {
            agent: Some("coder".into()),
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(
        report.outcome,
        Outcome::Error { exit_code: 125, .. }
    ));
    assert!(w.shell.calls().is_empty());
}

/// A failed read-only run, with what the shell learned about refused writes.
fn failed_output(text: &str, refused: Option<Vec<PathBuf>>) -> caps::ExecOutput {
    let mut c = OutputCollector::new(Default::default());
    c.push(Stream::Stderr, text.as_bytes());
    let mut out = c.finish(ExitStatus::Code(2), false, Duration::from_millis(1));
    out.refused_writes = refused;
    out
}

/// The sandbox gate in `mode`, with scripted read-only, watched and writable shells.
struct SandboxWorld {
    world: World,
    readonly: ScriptedShell,
    watched: ScriptedShell,
    writable: ScriptedShell,
    runner: Runner,
}

fn sandbox_world(mode: &str, answer: Option<Answer>, first: caps::ExecOutput) -> SandboxWorld {
    let config = format!("[sandbox]\npermission_mode = \"{mode}\"\n");
    let world = world(r#"{"version":1}"#, &config, answer);
    let (readonly, watched, writable) = (
        ScriptedShell::new(),
        ScriptedShell::new(),
        ScriptedShell::new(),
    );
    readonly.push_result(Ok(first.clone()));
    watched.push_result(Ok(first));
    writable.respond_with(|_| Ok(ok_output("written\n")));
    let host = RunnerHost {
        label: "sandbox".into(),
        fs: world.fs.clone(),
        shell: Arc::new(writable.clone()),
        store: world.store.clone(),
        config: Config::parse(&config, Path::new("config.toml")).unwrap(),
        host_env: BTreeMap::new(),
        trusted_path: TrustedPath::parse("/usr/bin:/bin"),
        default_cwd: PathBuf::from("/work"),
        approvals: world.approver.clone(),
        clock: Arc::new(FixedClock),
        gate: runner::Gate::Sandbox(runner::SandboxShells {
            readonly: Arc::new(readonly.clone()),
            watched: Arc::new(watched.clone()),
            writable: Arc::new(writable.clone()),
            unconfined: None,
        }),
    };
    SandboxWorld {
        world,
        readonly,
        watched,
        writable,
        runner: Runner::new(host),
    }
}

async fn sandbox_run(w: &SandboxWorld) -> runner::RunReport {
    w.runner
        .run(
            request(CommandSpec::Shell("echo x > a.txt".into())),
            &CollectEvents::default(),
            &CancellationToken::new(),
        )
        .await
}

fn stdout_of(report: &runner::RunReport) -> String {
    match &report.outcome {
        Outcome::Finished { output } => output.stdout.clone(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn approval_mode_asks_with_the_refused_paths_and_retries_once_writable() {
    let refused = failed_output(
        "cannot create a.txt: Read-only file system",
        Some(vec![PathBuf::from("/work/a.txt")]),
    );
    let w = sandbox_world("approval", Some(Answer::AllowOnce), refused);
    let report = sandbox_run(&w).await;
    assert_eq!(
        stdout_of(&report),
        "written\n",
        "the retry's result is the result"
    );
    assert_eq!(
        w.watched.calls().len(),
        1,
        "approval mode runs the watched shell first"
    );
    assert!(w.readonly.calls().is_empty());
    assert_eq!(w.writable.calls().len(), 1, "retried exactly once");
    let seen = w.world.approver.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let prompt = seen[0].prompt();
    assert!(prompt.reason.contains("/work/a.txt"), "{}", prompt.reason);
    assert!(prompt.plan.host.contains("writable retry"));
}

#[tokio::test]
async fn a_denied_or_unanswered_retry_is_rejected_without_running_writable() {
    for answer in [Some(Answer::Deny), None] {
        let refused = failed_output("", Some(vec![PathBuf::from("/work/a.txt")]));
        let w = sandbox_world("approval", answer, refused);
        let report = sandbox_run(&w).await;
        assert!(
            matches!(&report.outcome, Outcome::Denied { reason, .. } if reason == "rejected"),
            "{report:?}"
        );
        assert!(w.writable.calls().is_empty());
    }
}

#[tokio::test]
async fn the_kernel_report_outranks_the_output_text() {
    // Watched and nothing refused: the EROFS text alone does not prompt.
    let w = sandbox_world(
        "approval",
        Some(Answer::AllowOnce),
        failed_output("Read-only file system", Some(Vec::new())),
    );
    let report = sandbox_run(&w).await;
    assert!(matches!(report.outcome, Outcome::Finished { .. }));
    assert!(w.world.approver.seen.lock().unwrap().is_empty());
    assert!(w.writable.calls().is_empty());
    // Not watched (a backend that cannot tell): the EROFS text is the fallback signal.
    let w = sandbox_world(
        "approval",
        Some(Answer::AllowOnce),
        failed_output("Read-only file system", None),
    );
    assert_eq!(stdout_of(&sandbox_run(&w).await), "written\n");
    assert_eq!(w.world.approver.seen.lock().unwrap().len(), 1);
    // A refused write in a run that still succeeded is not retried.
    let mut ok = ok_output("fine\n");
    ok.refused_writes = Some(vec![PathBuf::from("/work/a.txt")]);
    let w = sandbox_world("approval", Some(Answer::AllowOnce), ok);
    assert_eq!(stdout_of(&sandbox_run(&w).await), "fine\n");
    assert!(w.writable.calls().is_empty());
}

#[tokio::test]
async fn readonly_never_asks_and_unrestricted_writes_directly() {
    let refused = failed_output("", Some(vec![PathBuf::from("/work/a.txt")]));
    let w = sandbox_world("readonly", Some(Answer::AllowOnce), refused);
    let report = sandbox_run(&w).await;
    assert!(matches!(report.outcome, Outcome::Finished { .. }));
    assert_eq!(w.readonly.calls().len(), 1);
    assert!(w.watched.calls().is_empty() && w.writable.calls().is_empty());
    assert!(w.world.approver.seen.lock().unwrap().is_empty());
    let w = sandbox_world("unrestricted", None, ok_output("unused\n"));
    assert_eq!(stdout_of(&sandbox_run(&w).await), "written\n");
    assert!(w.readonly.calls().is_empty() && w.watched.calls().is_empty());
}

/// A shell whose commands never finish: the run can only end by cancellation.
#[derive(Debug)]
struct NeverFinishes;

#[async_trait::async_trait]
impl caps::Shell for NeverFinishes {
    async fn exec(&self, _: &[String], _: &caps::ExecOptions) -> caps::Result<caps::ExecOutput> {
        std::future::pending().await
    }
    async fn run(&self, _: &caps::Script, _: &caps::ExecOptions) -> caps::Result<caps::ExecOutput> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_cancelled_run_ends_with_130_on_the_gateway_and_in_the_sandbox() {
    let gateway = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        None,
    );
    let sandbox = sandbox_world("readonly", None, ok_output("unused\n"));
    let never: Arc<dyn caps::Shell> = Arc::new(NeverFinishes);
    let mut gateway_host = gateway.runner.host().clone();
    gateway_host.shell = Arc::clone(&never);
    let mut sandbox_host = sandbox.runner.host().clone();
    sandbox_host.gate = runner::Gate::Sandbox(runner::SandboxShells {
        readonly: Arc::clone(&never),
        watched: Arc::clone(&never),
        writable: Arc::clone(&never),
        unconfined: None,
    });
    for host in [gateway_host, sandbox_host] {
        let label = host.label.clone();
        let runner = Runner::new(host);
        let events = CollectEvents::default();
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            stop.cancel();
        });
        let report = runner
            .run(
                request(CommandSpec::Argv(vec!["ls".into()])),
                &events,
                &cancel,
            )
            .await;
        match &report.outcome {
            Outcome::Error { exit_code, message } => {
                assert_eq!(*exit_code, 130, "{label}: {message}");
                assert!(message.contains("cancelled"), "{label}: {message}");
            }
            other => panic!("{label}: {other:?}"),
        }
        let finished = events.events().into_iter().find_map(|e| match e {
            ExecEvent::Finished { code, .. } => Some(code),
            _ => None,
        });
        assert_eq!(finished, Some(130), "{label}");
    }
}

/// An approver that never answers: only cancellation ends the wait.
struct NeverAnswers;

#[async_trait::async_trait]
impl Approvals for NeverAnswers {
    async fn ask(&self, _: &Request) -> AskOutcome {
        std::future::pending().await
    }
}

#[tokio::test]
async fn cancelling_while_a_human_is_asked_runs_nothing_even_with_a_permissive_fallback() {
    // askFallback=full would run the command had nobody answered; a cancellation is not
    // "nobody answered".
    let w = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"always","askFallback":"full"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"always\"\n",
        None,
    );
    let mut host = w.runner.host().clone();
    host.approvals = Arc::new(NeverAnswers);
    let runner = Runner::new(host);
    for _ in 0..20 {
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            stop.cancel();
        });
        let report = runner
            .run(
                request(CommandSpec::Argv(vec!["ls".into()])),
                &CollectEvents::default(),
                &cancel,
            )
            .await;
        match &report.outcome {
            Outcome::Error { exit_code, message } => {
                assert_eq!(*exit_code, 130, "{message}");
                assert!(message.contains("nothing was run"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(w.shell.calls().is_empty(), "the command ran");
}

#[tokio::test]
async fn a_runner_without_a_sandbox_refuses_what_only_a_sandbox_may_run() {
    // Routing is the gateway's job, but a misrouted host=sandbox request must not run
    // unconfined on a policy runner.
    let w = world(r#"{"version":1}"#, "", None);
    let (report, events) = run(
        &w,
        request(CommandSpec::Argv(vec!["rm".into(), "x".into()])),
    )
    .await;
    match &report.decision {
        policy::Decision::Deny { reason, .. } => {
            assert_eq!(*reason, policy::DenyReason::HostUnavailable)
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(report.outcome, Outcome::Denied { .. }));
    assert!(events.iter().any(|e| matches!(e, ExecEvent::Denied { .. })));
    assert!(w.shell.calls().is_empty());
}
