//! The runner on the memory provider: every branch of the decision table and of the
//! sandbox's permission modes, with scripted shells and a scripted approver — and what
//! runs is always the plan the human saw, never a file swapped in afterwards. Nothing
//! touches the real disk or starts a process.

// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use approvals::ipc::AskOutcome;
use approvals::ipc::protocol::{Answer, ExecReport, PromptKind, Request, Response};
use approvals::{Clock, Store, StoreConfig};
use caps::testkit::{MemoryWorld, failed_output, ok_output};
use caps::{Fs, MemoryFs, RecordedCall, RefusedWrites, ScriptedShell, WriteOptions};
use policy::{
    AllowReason, CaseMode, Config, Decision, DenyReason, ExecParams, Launch, LiveConfig, Security,
    TrustedPath,
};
use runner::{
    Approvals, CollectEvents, Command, EXIT_CANCELLED, EXIT_DENIED, EXIT_NO_APPROVER, ExecEvent,
    ExecRequest, Executor, HostContext, Outcome, RunHost, RunReport, Runner, SandboxShells,
};
use tokio_util::sync::CancellationToken;

struct FixedClock;
impl Clock for FixedClock {
    fn now_ms(&self) -> u64 {
        1_700_000_000_000
    }
}

/// How the scripted approver answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Human {
    Says(Answer),
    /// Allow always, with the allow-always option at this index.
    AlwaysWith(usize),
    Absent,
    TooSlow,
    /// Took the request, then went away without a (valid) answer.
    Vanished,
}

/// Answers every prompt as scripted, remembers what it was shown, and can run a hook
/// while "the human is thinking" (to change the world between prompt and answer).
struct ScriptedApprover {
    human: Human,
    seen: Mutex<Vec<Request>>,
    while_asked: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

#[async_trait::async_trait]
impl Approvals for ScriptedApprover {
    async fn ask(&self, request: &Request, _: Option<&approvals::ApprovalsFile>) -> AskOutcome {
        self.seen.lock().unwrap().push(request.clone());
        if let Some(hook) = self.while_asked.lock().unwrap().take() {
            hook();
        }
        let p = request.prompt();
        match self.human {
            Human::Absent => AskOutcome::NoApprover("scripted: absent".into()),
            Human::TooSlow => AskOutcome::TimedOut,
            Human::Vanished => match request {
                Request::Exec(_) => AskOutcome::MayHaveRun("scripted: vanished".into()),
                Request::Prompt(_) => AskOutcome::NoApprover("scripted: vanished".into()),
            },
            Human::Says(answer) => AskOutcome::Answered(Response {
                id: p.id.clone(),
                digest: p.digest.clone(),
                answer,
                allow_always_option: None,
                report: approver_run(request, answer).map(Box::new),
            }),
            Human::AlwaysWith(i) => AskOutcome::Answered(Response {
                id: p.id.clone(),
                digest: p.digest.clone(),
                answer: Answer::AllowAlways,
                allow_always_option: Some(i),
                report: approver_run(request, Answer::AllowAlways).map(Box::new),
            }),
        }
    }
}

/// An exec request that is allowed comes back with the approver's run.
fn approver_run(request: &Request, answer: Answer) -> Option<ExecReport> {
    match (request, answer) {
        (Request::Exec(_), Answer::AllowOnce | Answer::AllowAlways) => Some(ExecReport {
            exit_code: 3,
            stdout: "ran by the approver\n".into(),
            stderr: "approver stderr\n".into(),
            signal: None,
            stdout_size: None,
            stderr_size: None,
            truncated: false,
            timed_out: false,
            duration_ms: 7,
            error: None,
        }),
        _ => None,
    }
}

struct World {
    fs: Arc<MemoryFs>,
    shell: ScriptedShell,
    approver: Arc<ScriptedApprover>,
    runner: Runner,
    store: Store,
}

impl World {
    fn gateway(&self) -> Executor {
        Executor::Plain {
            shell: Arc::new(self.shell.clone()),
            host: RunHost::Gateway,
        }
    }

    fn prompts(&self) -> Vec<approvals::ipc::protocol::Prompt> {
        self.approver
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.prompt().clone())
            .collect()
    }
}

/// Where the world's `config.toml` is.
const CONFIG: &str = "/home/u/.warden/config.toml";

fn world(approvals_json: &str, config: &str, human: Human) -> World {
    let fs = MemoryWorld::new(1000)
        .dirs(&["/home/u/.warden", "/work"])
        .programs(&[
            "/usr/bin/ls",
            "/usr/bin/cat",
            "/usr/bin/rm",
            "/usr/bin/git",
            "/usr/bin/find",
            "/bin/sh",
        ])
        .file("/home/u/.warden/exec-approvals.json", approvals_json, 0o600)
        .file(CONFIG, config, 0o600)
        .build();
    fs.set_permissions(Path::new("/home/u/.warden"), 0o700)
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
    shell.with_files(fs.clone());
    let approver = Arc::new(ScriptedApprover {
        human,
        seen: Mutex::new(Vec::new()),
        while_asked: Mutex::new(None),
    });
    // The config as a running server follows it: edits are in force for the next request.
    let live = LiveConfig::watching(
        fs.clone(),
        CONFIG.into(),
        Config::parse(config, Path::new(CONFIG)).unwrap(),
        Box::new(|_| {}),
    );
    let host = HostContext::builder(fs.clone(), store.clone(), live)
        .env(BTreeMap::from([
            ("HOME".into(), "/home/u".into()),
            ("SECRET".into(), "x".into()),
        ]))
        .trusted_path(TrustedPath::parse("/usr/bin:/bin"))
        .default_cwd("/work")
        .approvals(approver.clone())
        .clock(Arc::new(FixedClock))
        .build();
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

fn request(command: Command) -> ExecRequest {
    ExecRequest::new("coder", "s1", command)
}

fn shell_string(text: &str) -> ExecRequest {
    request(Command::Shell(text.into()))
}

fn argv(words: &[&str]) -> ExecRequest {
    request(Command::Argv(words.iter().map(|w| w.to_string()).collect()))
}

async fn run(w: &World, req: ExecRequest) -> (RunReport, Vec<ExecEvent>) {
    let events = CollectEvents::default();
    let report = w
        .runner
        .run(req, &w.gateway(), &events, &CancellationToken::new())
        .await;
    (report, events.events())
}

fn denied(report: &RunReport) -> Option<DenyReason> {
    match &report.outcome {
        Outcome::Denied { reason, .. } => Some(*reason),
        _ => None,
    }
}

/// The rule of a run refused because its sandbox cannot be set up as configured (exit
/// code: denied); fails the test for any other outcome.
#[track_caller]
fn sandbox_unavailable(report: &RunReport) -> &str {
    assert_eq!(
        denied(report),
        Some(DenyReason::SandboxUnavailable),
        "{report:?}"
    );
    assert_eq!(report.exit_code(), EXIT_DENIED);
    match &report.outcome {
        Outcome::Denied { rule, .. } => rule,
        _ => unreachable!(),
    }
}

/// Each call's (argv given to the OS, argv[0] the program sees) — or the script text.
fn started(shell: &ScriptedShell) -> Vec<String> {
    shell
        .calls()
        .iter()
        .map(|c| match c {
            RecordedCall::Exec { argv, options } => format!(
                "exec {} (as {})",
                argv.join(" "),
                options.arg0.as_deref().unwrap_or("-")
            ),
            RecordedCall::Run { script, .. } => {
                format!("run {} -c {}", script.shell.display(), script.source)
            }
        })
        .collect()
}

#[tokio::test]
async fn an_allowlisted_list_runs_as_the_rebuilt_script_and_usage_is_recorded() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, Human::Absent);
    let (report, events) = run(&w, shell_string("ls -la 'my dir' && cat notes.txt")).await;
    assert!(
        matches!(report.outcome, Outcome::Finished { .. }),
        "{report:?}"
    );
    assert_eq!(
        started(&w.shell),
        vec!["run /bin/sh -c /usr/bin/ls -la 'my dir' && /usr/bin/cat notes.txt"]
    );
    assert!(report.executed.as_ref().unwrap().rebuilt);
    assert!(matches!(
        report.decision,
        Decision::Allow {
            reason: AllowReason::AllowlistMatch,
            ..
        }
    ));
    assert_eq!(
        events.iter().map(ExecEvent::text).collect::<Vec<_>>(),
        vec![
            format!("Exec started (node=gateway, id={})", report.run_id),
            format!(
                "Exec finished (node=gateway, id={}, code=0)\nout\n",
                report.run_id
            ),
        ]
    );
    assert!(w.prompts().is_empty());
    let file = w.store.load().unwrap().file;
    let entry = &file.agents["coder"].allowlist[0];
    assert_eq!(entry.last_used_at, Some(1_700_000_000_000));
    assert_eq!(entry.last_resolved_path.as_deref(), Some("/usr/bin/ls"));
}

#[tokio::test]
async fn a_single_allowlisted_command_runs_its_resolved_file_under_its_own_name() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, Human::Absent);
    let (report, _) = run(&w, shell_string("ls -la")).await;
    assert_eq!(report.exit_code(), 0);
    assert_eq!(started(&w.shell), vec!["exec /usr/bin/ls -la (as ls)"]);
    let RecordedCall::Exec { options, .. } = &w.shell.calls()[0] else {
        panic!()
    };
    assert_eq!(
        options.expect_program,
        Some(w.fs.metadata(Path::new("/usr/bin/ls")).unwrap().id),
        "the run insists on the file that was matched"
    );
}

#[tokio::test]
async fn the_environment_is_built_from_the_allowlist_and_injection_is_refused() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, Human::Absent);
    let mut req = argv(&["ls"]);
    req.env = BTreeMap::from([("TERM".into(), "dumb".into())]);
    run(&w, req).await;
    let RecordedCall::Exec { options, .. } = &w.shell.calls()[0] else {
        panic!()
    };
    assert_eq!(options.env.get("PATH").unwrap(), "/usr/bin:/bin");
    assert_eq!(options.env.get("TERM").unwrap(), "dumb");
    assert_eq!(options.env.get("HOME").unwrap(), "/home/u");
    assert!(!options.env.contains_key("SECRET"));
    let mut req = argv(&["ls"]);
    req.env = BTreeMap::from([("LD_PRELOAD".into(), "/tmp/x.so".into())]);
    let (report, events) = run(&w, req).await;
    assert!(
        matches!(&report.outcome, Outcome::Error { message, exit_code: 125 } if message.contains("LD_PRELOAD")),
        "{report:?}"
    );
    assert_eq!(w.shell.calls().len(), 1, "nothing more ran");
    assert!(events.is_empty());
}

// ── The decision table (product spec §5), on the gateway host ──────────────────────

#[tokio::test]
async fn security_deny_runs_nothing_and_says_so_in_one_spelling() {
    let w = world(
        r#"{"version":1}"#,
        GATEWAY_ALLOWLIST,
        Human::Says(Answer::AllowOnce),
    );
    let (report, events) = run(&w, argv(&["ls"])).await;
    assert_eq!(denied(&report), Some(DenyReason::SecurityDeny));
    assert_eq!(report.exit_code(), EXIT_DENIED);
    assert!(w.shell.calls().is_empty() && w.prompts().is_empty());
    assert_eq!(
        events,
        vec![ExecEvent::Denied {
            run_id: report.run_id.clone(),
            host: RunHost::Gateway,
            reason: DenyReason::SecurityDeny,
        }]
    );
    assert_eq!(
        events[0].text(),
        format!(
            "Exec denied (node=gateway, id={}, security=deny)",
            report.run_id
        )
    );
    // The JSON of the report and of the event use the same spelling as the text.
    let json = serde_json::to_string(&report).unwrap();
    assert!(
        json.contains("\"security=deny\"") && !json.contains("security-deny"),
        "{json}"
    );
}

#[tokio::test]
async fn an_allowlist_miss_without_asking_is_denied() {
    let host = r#"{"version":1,"defaults":{"security":"allowlist","ask":"off"},
        "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/ls"}]}}}"#;
    let config = "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"off\"\n";
    let w = world(host, config, Human::Says(Answer::AllowOnce));
    let (report, _) = run(&w, argv(&["rm", "x"])).await;
    assert_eq!(denied(&report), Some(DenyReason::AllowlistMiss));
    assert!(w.shell.calls().is_empty() && w.prompts().is_empty());
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(report.exit_code(), 0);
}

#[tokio::test]
async fn security_full_runs_the_command_as_written_with_its_program_resolved() {
    let w = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        Human::Absent,
    );
    let (report, _) = run(&w, argv(&["rm", "-r", "build"])).await;
    assert_eq!(report.exit_code(), 0);
    assert_eq!(started(&w.shell), vec!["exec /usr/bin/rm -r build (as rm)"]);
    let (report, _) = run(&w, shell_string("rm -r build > log")).await;
    assert!(!report.executed.unwrap().rebuilt);
    assert_eq!(started(&w.shell)[1], "run /bin/sh -c rm -r build > log");
}

#[tokio::test]
async fn ask_always_asks_even_when_the_allowlist_matches() {
    let host = r#"{"version":1,"defaults":{"security":"allowlist","ask":"always"},
        "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/ls"}]}}}"#;
    let w = world(host, GATEWAY_ALLOWLIST, Human::Says(Answer::Deny));
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(denied(&report), Some(DenyReason::ApprovalDenied));
    let prompts = w.prompts();
    assert_eq!(prompts.len(), 1);
    assert!(matches!(
        &prompts[0].kind,
        PromptKind::Command {
            reason: policy::AskReason::AskAlways,
            ..
        }
    ));
}

#[tokio::test]
async fn a_miss_asks_and_the_approvers_answer_decides() {
    for (answer, runs, reason) in [
        (Answer::AllowOnce, true, None),
        (Answer::AllowAlways, true, None),
        (Answer::Deny, false, Some(DenyReason::ApprovalDenied)),
    ] {
        let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, Human::Says(answer));
        let (report, _) = run(&w, shell_string("rm -rf build > log")).await;
        assert_eq!(w.shell.calls().len(), usize::from(runs), "{answer:?}");
        assert_eq!(denied(&report), reason, "{answer:?}");
        let prompts = w.prompts();
        let PromptKind::Command {
            plan,
            reason,
            allow_always,
            ..
        } = &prompts[0].kind
        else {
            panic!("{:?}", prompts[0])
        };
        // The human saw exactly what runs.
        assert_eq!(
            plan.launch,
            Launch::Script {
                shell: "/bin/sh".into(),
                source: "rm -rf build > log".into()
            }
        );
        assert_eq!((plan.cwd.as_str(), plan.agent.as_str()), ("/work", "coder"));
        assert_eq!(
            plan.env.get("PATH").map(String::as_str),
            Some("/usr/bin:/bin")
        );
        assert_eq!(prompts[0].digest, prompts[0].compute_digest());
        assert_eq!(*reason, policy::AskReason::AllowlistMiss);
        // A redirection is never a plain list: nothing can be stored.
        assert!(allow_always.is_empty());
        if runs {
            assert_eq!(started(&w.shell), vec!["run /bin/sh -c rm -rf build > log"]);
        }
    }
}

#[tokio::test]
async fn allow_always_stores_exactly_the_patterns_the_prompt_showed() {
    let w = world(
        ALLOWLIST_HOST,
        GATEWAY_ALLOWLIST,
        Human::Says(Answer::AllowAlways),
    );
    let (report, _) = run(&w, argv(&["rm", "-rf", "build"])).await;
    assert_eq!(report.exit_code(), 0);
    assert!(matches!(
        report.decision,
        Decision::Allow {
            reason: AllowReason::ApprovedAlways,
            ..
        }
    ));
    let prompt = &w.prompts()[0];
    assert_eq!(
        prompt.allow_always_rules(None).unwrap(),
        &[policy::RuleSpec::program("/usr/bin/rm")],
        "a single-purpose program is stored alone by default"
    );
    let file = w.store.load().unwrap().file;
    let stored: Vec<&str> = file.agents["coder"]
        .allowlist
        .iter()
        .map(|e| e.pattern.as_str())
        .collect();
    assert_eq!(stored, vec!["/usr/bin/ls", "/usr/bin/cat", "/usr/bin/rm"]);
    // The next time, the allowlist matches: no prompt.
    let (report, _) = run(&w, argv(&["rm", "-rf", "build"])).await;
    assert_eq!(report.exit_code(), 0);
    assert_eq!(w.prompts().len(), 1);
}

/// The rules "allow always" stored for coder after its three original entries.
fn stored_rules(w: &World) -> Vec<policy::RuleSpec> {
    let file = w.store.load().unwrap().file;
    file.agents["coder"].allowlist[2..]
        .iter()
        .map(|e| e.rule())
        .collect()
}

#[tokio::test]
async fn allow_always_stores_the_subcommand_of_a_multi_command_tool_or_the_chosen_scope() {
    let host = r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},
        "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/ls"},{"pattern":"/usr/bin/cat"}]}}}"#;
    // Preselected: git with its subcommand.
    let w = world(host, GATEWAY_ALLOWLIST, Human::Says(Answer::AllowAlways));
    let (report, _) = run(&w, argv(&["git", "-C", "repo", "status", "-s"])).await;
    assert_eq!(report.exit_code(), 0);
    let PromptKind::Command { allow_always, .. } = &w.prompts()[0].kind else {
        panic!()
    };
    let scopes: Vec<&str> = allow_always.iter().map(|o| o.scope.as_str()).collect();
    assert_eq!(scopes, vec!["exact", "subcommand", "program"]);
    let git_status = policy::RuleSpec {
        pattern: "/usr/bin/git".into(),
        args: Some(vec!["-C".into(), "repo".into(), "status".into()]),
        ..Default::default()
    };
    assert_eq!(stored_rules(&w), vec![git_status]);
    // The stored rule covers that subcommand with any further arguments, and no other.
    run(&w, argv(&["git", "-C", "repo", "status", "--short"])).await;
    assert_eq!(w.prompts().len(), 1, "git status matched the stored rule");
    run(&w, argv(&["git", "-C", "repo", "push"])).await;
    assert_eq!(w.prompts().len(), 2, "git push is not covered");

    // The human widens it: the program alone.
    let w = world(host, GATEWAY_ALLOWLIST, Human::AlwaysWith(2));
    run(&w, argv(&["git", "log", "-n", "1"])).await;
    assert_eq!(
        stored_rules(&w),
        vec![policy::RuleSpec::program("/usr/bin/git")]
    );
    // ...which still does not cover a flag that runs code: that asks.
    run(&w, argv(&["git", "-c", "alias.x=!id", "x"])).await;
    assert_eq!(w.prompts().len(), 2);
    let rule = match &w.prompts()[1].kind {
        PromptKind::Command { reason, .. } => *reason,
        _ => panic!(),
    };
    assert_eq!(rule, policy::AskReason::AllowlistMiss);

    // The human narrows it: exactly this command, with the flag it uses allowed.
    let w = world(host, GATEWAY_ALLOWLIST, Human::AlwaysWith(0));
    run(&w, argv(&["find", ".", "-name", "*.o", "-delete"])).await;
    assert_eq!(
        stored_rules(&w),
        vec![policy::RuleSpec {
            pattern: "/usr/bin/find".into(),
            args: Some(vec![
                ".".into(),
                "-name".into(),
                "\\*.o".into(),
                "-delete".into()
            ]),
            args_match: policy::ArgsMatch::Exact,
            allow_flags: vec!["-delete".into()],
            ..Default::default()
        }]
    );
    run(&w, argv(&["find", ".", "-name", "*.o", "-delete"])).await;
    assert_eq!(w.prompts().len(), 1, "the exact command is allowed now");
    run(&w, argv(&["find", "/", "-name", "*.o", "-delete"])).await;
    assert_eq!(w.prompts().len(), 2, "another argument is not");
}

#[tokio::test]
async fn nobody_answering_applies_each_ask_fallback() {
    for (human, fallback, command, runs, reason) in [
        (
            Human::Absent,
            "deny",
            "ls -la",
            false,
            Some(DenyReason::NoApprover),
        ),
        (
            Human::TooSlow,
            "deny",
            "ls -la",
            false,
            Some(DenyReason::ApprovalTimeout),
        ),
        (Human::Absent, "allowlist", "ls -la", true, None),
        (
            Human::Absent,
            "allowlist",
            "rm -rf x",
            false,
            Some(DenyReason::NoApprover),
        ),
        (Human::TooSlow, "full", "rm -rf x", true, None),
    ] {
        let host = format!(
            r#"{{"version":1,"defaults":{{"security":"allowlist","ask":"always","askFallback":"{fallback}"}},
            "agents":{{"coder":{{"allowlist":[{{"pattern":"/usr/bin/ls"}}]}}}}}}"#
        );
        let w = world(&host, GATEWAY_ALLOWLIST, human);
        let (report, _) = run(&w, shell_string(command)).await;
        let what = format!("{human:?} {fallback} {command}: {report:?}");
        assert_eq!(w.shell.calls().len(), usize::from(runs), "{what}");
        assert_eq!(denied(&report), reason, "{what}");
        if reason.is_some() {
            assert_eq!(report.exit_code(), EXIT_NO_APPROVER, "{what}");
        }
    }
    // askFallback=allowlist runs the rebuilt command, not the one written.
    let host = r#"{"version":1,"defaults":{"security":"allowlist","ask":"always","askFallback":"allowlist"},
        "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/ls"}]}}}"#;
    let w = world(host, GATEWAY_ALLOWLIST, Human::Absent);
    run(&w, shell_string("ls -la")).await;
    assert_eq!(started(&w.shell), vec!["exec /usr/bin/ls -la (as ls)"]);
}

#[tokio::test]
async fn tool_parameters_cannot_loosen_the_host_file() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, Human::Absent);
    let mut req = shell_string("rm -rf /");
    req.params = ExecParams {
        security: Some(Security::Full),
        ask: Some(policy::Ask::Off),
        ..Default::default()
    };
    let (report, _) = run(&w, req).await;
    assert!(denied(&report).is_some(), "{report:?}");
    assert!(w.shell.calls().is_empty());
    assert_eq!(report.policy.security.value, Security::Allowlist);
}

#[tokio::test]
async fn a_corrupt_host_file_denies_everything() {
    let w = world(
        "{corrupt",
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        Human::Says(Answer::AllowOnce),
    );
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(denied(&report), Some(DenyReason::SecurityDeny));
    assert!(w.shell.calls().is_empty());
    // The denial says it comes from the unusable file, and what shows the problem.
    let policy::Decision::Deny { rule, .. } = &report.decision else {
        panic!("{report:?}");
    };
    assert!(
        rule.contains("approvals file cannot be used") && rule.contains("warden approvals get"),
        "{rule}"
    );
    assert!(
        w.fs.file_paths()
            .iter()
            .any(|p| p.to_string_lossy().contains(".corrupt-"))
    );
}

#[tokio::test]
async fn a_host_file_edit_that_is_not_valid_keeps_the_last_good_version_and_says_so() {
    let w = world(ALLOWLIST_HOST, GATEWAY_ALLOWLIST, Human::Absent);
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(report.exit_code(), 0, "{report:?}");
    assert!(report.notices.is_empty(), "{:?}", report.notices);
    // A typo while the process runs: `ls` stays allowed, `rm` stays unknown, and every
    // result says the edit is not in force.
    put(&w, "/home/u/.warden/exec-approvals.json", "{\"version\":1,");
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(report.exit_code(), 0, "{report:?}");
    let (refused, _) = run(&w, argv(&["rm", "x"])).await;
    assert_eq!(denied(&refused), Some(DenyReason::NoApprover));
    for report in [&report, &refused] {
        assert!(
            report
                .notices
                .iter()
                .any(|n| n.contains("exec-approvals.json")
                    && n.contains("last good")
                    && n.contains("not in force")),
            "{:?}",
            report.notices
        );
    }
    // Unsafe permissions are never served from memory: everything is denied.
    w.fs.set_permissions(Path::new("/home/u/.warden/exec-approvals.json"), 0o666)
        .unwrap();
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(
        denied(&report),
        Some(DenyReason::SecurityDeny),
        "{report:?}"
    );
    w.fs.set_permissions(Path::new("/home/u/.warden/exec-approvals.json"), 0o600)
        .unwrap();
    // Fixed: the file as it is now, and no notice.
    put(&w, "/home/u/.warden/exec-approvals.json", ALLOWLIST_HOST);
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(report.exit_code(), 0, "{report:?}");
    assert!(report.notices.is_empty(), "{:?}", report.notices);
}

/// Replace the world's file at `path` with `text` (as an editor saving it would).
fn put(w: &World, path: &str, text: &str) {
    w.fs.write(
        Path::new(path),
        text.as_bytes(),
        WriteOptions {
            mode: 0o600,
            ..Default::default()
        },
    )
    .unwrap();
}

#[tokio::test]
async fn a_config_edit_is_in_force_for_the_next_request_without_a_restart() {
    let w = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        Human::Absent,
    );
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(report.exit_code(), 0, "{report:?}");
    put(
        &w,
        CONFIG,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"deny\"\n",
    );
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(
        denied(&report),
        Some(DenyReason::SecurityDeny),
        "{report:?}"
    );
    assert_eq!(report.policy.security.value, Security::Deny);
    assert_eq!(w.shell.calls().len(), 1, "the second request ran nothing");
}

#[tokio::test]
async fn a_broken_config_edit_keeps_the_old_policy_in_force_and_every_result_says_why() {
    let w = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"deny\"\n",
        Human::Absent,
    );
    // Meant to loosen, but misspelt: refused, and the old (deny) policy stays.
    put(
        &w,
        CONFIG,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"fulll\"\n",
    );
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(
        denied(&report),
        Some(DenyReason::SecurityDeny),
        "{report:?}"
    );
    assert!(
        report
            .notices
            .iter()
            .any(|n| n.contains("config.toml") && n.contains("fulll") && n.contains("last good")),
        "{:?}",
        report.notices
    );
    assert!(w.shell.calls().is_empty());
}

#[tokio::test]
async fn a_loosening_edit_made_while_a_run_waits_for_its_approver_does_not_change_its_plan() {
    let w = world(
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"on-miss\"\ntimeout = 5\nmax_processes = 64\n",
        Human::Says(Answer::AllowOnce),
    );
    let fs = w.fs.clone();
    *w.approver.while_asked.lock().unwrap() = Some(Box::new(move || {
        fs.write(
            Path::new(CONFIG),
            b"[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\ntimeout = 600\nmax_processes = 100000\n",
            WriteOptions {
                mode: 0o600,
                ..Default::default()
            },
        )
        .unwrap();
    }));
    let (report, _) = run(&w, argv(&["rm", "x"])).await;
    assert_eq!(report.exit_code(), 0, "{report:?}");
    let calls = w.shell.calls();
    let [RecordedCall::Exec { options, .. }] = calls.as_slice() else {
        panic!("{calls:?}");
    };
    // The plan the human approved: its timeout and process limit, not the edit's.
    assert_eq!(options.timeout, Duration::from_secs(5));
    assert_eq!(options.resources.max_processes, Some(64));
    assert_eq!(report.policy.security.value, Security::Allowlist);
    // The next request is decided under the edit (the host file still caps security).
    let (next, _) = run(&w, argv(&["rm", "y"])).await;
    assert_eq!(next.policy.timeout.value, Duration::from_secs(600));
    let calls = w.shell.calls();
    let RecordedCall::Exec { options, .. } = &calls[1] else {
        panic!("{calls:?}");
    };
    assert_eq!(options.timeout, Duration::from_secs(600));
}

#[tokio::test]
async fn missing_programs_and_bad_requests_are_errors_with_exit_codes() {
    let w = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        Human::Absent,
    );
    let (report, _) = run(&w, argv(&["nope"])).await;
    assert!(
        matches!(report.outcome, Outcome::Error { exit_code: 127, .. }),
        "{report:?}"
    );
    w.fs.write(
        Path::new("/usr/bin/data"),
        b"",
        WriteOptions {
            mode: 0o644,
            ..Default::default()
        },
    )
    .unwrap();
    let (report, _) = run(&w, argv(&["data"])).await;
    assert_eq!(report.exit_code(), 126, "{report:?}");
    let mut req = argv(&["ls"]);
    req.params.timeout = Some(Duration::from_secs(100_000));
    let (report, _) = run(&w, req).await;
    assert!(
        matches!(&report.outcome, Outcome::Error { message, exit_code: 125 } if message.contains("maximum")),
        "{report:?}"
    );
    for bad in [argv(&[]), shell_string("  ")] {
        let (report, _) = run(&w, bad).await;
        assert_eq!(report.exit_code(), 125, "{report:?}");
    }
    let mut req = argv(&["ls"]);
    req.cwd = Some(PathBuf::from("/nowhere"));
    let (report, _) = run(&w, req).await;
    assert!(
        matches!(&report.outcome, Outcome::Error { message, exit_code: 125 } if message.contains("/nowhere")),
        "{report:?}"
    );
    assert!(w.shell.calls().is_empty());
}

#[tokio::test]
async fn the_approved_file_runs_or_nothing_does_never_a_file_swapped_in_after_the_prompt() {
    let w = world(
        ALLOWLIST_HOST,
        GATEWAY_ALLOWLIST,
        Human::Says(Answer::AllowOnce),
    );
    // While the human looks at the prompt, the file `rm` resolves to is replaced.
    let fs = w.fs.clone();
    *w.approver.while_asked.lock().unwrap() = Some(Box::new(move || {
        fs.write_atomic(
            Path::new("/usr/bin/rm"),
            b"#!/bin/sh\necho pwned\n",
            WriteOptions {
                mode: 0o755,
                ..Default::default()
            },
        )
        .unwrap();
    }));
    let (report, _) = run(&w, argv(&["rm", "-rf", "build"])).await;
    assert!(
        matches!(&report.outcome, Outcome::Error { message, .. } if message.contains("no longer the file that was approved")),
        "{report:?}"
    );
    assert!(w.shell.calls().is_empty(), "the swapped file must not run");
    // Without a swap, the approved file runs.
    let (report, _) = run(&w, argv(&["rm", "-rf", "build"])).await;
    assert_eq!(report.exit_code(), 0, "{report:?}");
    assert_eq!(
        started(&w.shell),
        vec!["exec /usr/bin/rm -rf build (as rm)"]
    );
}

// ── The sandbox host: permission modes ───────────────────────────────────────────────

/// The sandbox executor in `mode`, with scripted read-only, watched and writable shells.
struct SandboxWorld {
    world: World,
    readonly: ScriptedShell,
    watched: ScriptedShell,
    writable: ScriptedShell,
}

impl SandboxWorld {
    fn executor(&self) -> Executor {
        self.executor_unconfined(None)
    }

    /// The same shells, as the operator's direct mode serves them (`why`) or confining.
    fn executor_unconfined(&self, why: Option<&str>) -> Executor {
        Executor::Sandbox(SandboxShells {
            readonly: Arc::new(self.readonly.clone()),
            watched: Arc::new(self.watched.clone()),
            writable: Arc::new(self.writable.clone()),
            unconfined: why.map(str::to_owned),
            read_only_unavailable: None,
            network: policy::PlannedNetwork::Plain(false),
        })
    }

    async fn run(&self) -> RunReport {
        self.world
            .runner
            .run(
                shell_string("echo x > a.txt"),
                &self.executor(),
                &CollectEvents::default(),
                &CancellationToken::new(),
            )
            .await
    }
}

fn sandbox_world(mode: &str, human: Human, first: caps::ExecOutput) -> SandboxWorld {
    sandbox_world_with(&format!("permission_mode = \"{mode}\"\n"), human, first)
}

/// [`sandbox_world`] with `sandbox` as the config's `[sandbox]` table.
fn sandbox_world_with(sandbox: &str, human: Human, first: caps::ExecOutput) -> SandboxWorld {
    let config = format!("[sandbox]\n{sandbox}");
    let world = world(r#"{"version":1}"#, &config, human);
    let (readonly, watched, writable) = (
        ScriptedShell::new(),
        ScriptedShell::new(),
        ScriptedShell::new(),
    );
    readonly.push_result(Ok(first.clone()));
    watched.push_result(Ok(first));
    writable.respond_with(|_| Ok(ok_output("written\n")));
    SandboxWorld {
        world,
        readonly,
        watched,
        writable,
    }
}

fn stdout_of(report: &RunReport) -> String {
    match &report.outcome {
        Outcome::Finished { output } => output.stdout.clone(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn approval_mode_asks_with_the_refused_paths_and_retries_the_same_plan_writable() {
    let refused = failed_output(
        "cannot create a.txt: Read-only file system",
        RefusedWrites::Refused(vec![PathBuf::from("/work/a.txt")]),
    );
    let w = sandbox_world("approval", Human::Says(Answer::AllowOnce), refused);
    let report = w.run().await;
    assert_eq!(
        stdout_of(&report),
        "written\n",
        "the retry's result is the result"
    );
    assert!(report.executed.as_ref().unwrap().writable_retry);
    assert_eq!(
        w.watched.calls().len(),
        1,
        "approval mode runs the watched shell first"
    );
    assert!(w.readonly.calls().is_empty());
    assert_eq!(
        started(&w.writable),
        vec!["run /bin/sh -c echo x > a.txt"],
        "retried once"
    );
    let prompts = w.world.prompts();
    assert_eq!(prompts.len(), 1);
    let PromptKind::Write { paths, retry, .. } = &prompts[0].kind else {
        panic!("{:?}", prompts[0])
    };
    assert_eq!(paths, &vec!["/work/a.txt".to_string()]);
    assert_eq!(
        retry.as_ref().unwrap().launch,
        Launch::Script {
            shell: "/bin/sh".into(),
            source: "echo x > a.txt".into()
        }
    );
}

#[tokio::test]
async fn a_denied_or_unanswered_retry_is_rejected_without_running_writable() {
    for (human, exit) in [
        (Human::Says(Answer::Deny), EXIT_DENIED),
        (Human::Absent, EXIT_NO_APPROVER),
        (Human::TooSlow, EXIT_NO_APPROVER),
    ] {
        let refused = failed_output(
            "",
            RefusedWrites::Refused(vec![PathBuf::from("/work/a.txt")]),
        );
        let w = sandbox_world("approval", human, refused);
        let report = w.run().await;
        assert_eq!(denied(&report), Some(DenyReason::Rejected), "{report:?}");
        assert_eq!(report.exit_code(), exit, "{human:?}");
        assert!(w.writable.calls().is_empty());
    }
}

#[tokio::test]
async fn only_the_sandboxs_own_classification_prompts_a_retry() {
    // Watched and nothing refused: the EROFS text alone does not prompt (the runner no
    // longer reads output text at all).
    for classified in [RefusedWrites::None, RefusedWrites::NotWatched] {
        let w = sandbox_world(
            "approval",
            Human::Says(Answer::AllowOnce),
            failed_output("Read-only file system", classified),
        );
        let report = w.run().await;
        assert!(matches!(report.outcome, Outcome::Finished { .. }));
        assert!(w.world.prompts().is_empty() && w.writable.calls().is_empty());
    }
    // Refused with the paths unknown (a backend that only saw the message): asks.
    let w = sandbox_world(
        "approval",
        Human::Says(Answer::AllowOnce),
        failed_output("Read-only file system", RefusedWrites::Refused(Vec::new())),
    );
    assert_eq!(stdout_of(&w.run().await), "written\n");
    assert_eq!(w.world.prompts().len(), 1);
    // A refused write in a run that still succeeded is not retried.
    let mut ok = ok_output("fine\n");
    ok.refused_writes = RefusedWrites::Refused(vec![PathBuf::from("/work/a.txt")]);
    let w = sandbox_world("approval", Human::Says(Answer::AllowOnce), ok);
    assert_eq!(stdout_of(&w.run().await), "fine\n");
    assert!(w.writable.calls().is_empty());
}

#[tokio::test]
async fn readonly_never_asks_and_unrestricted_writes_directly() {
    let refused = failed_output(
        "",
        RefusedWrites::Refused(vec![PathBuf::from("/work/a.txt")]),
    );
    let w = sandbox_world("readonly", Human::Says(Answer::AllowOnce), refused);
    let report = w.run().await;
    assert!(matches!(report.outcome, Outcome::Finished { .. }));
    assert_eq!(w.readonly.calls().len(), 1);
    assert!(w.watched.calls().is_empty() && w.writable.calls().is_empty());
    assert!(w.world.prompts().is_empty());
    let w = sandbox_world("unrestricted", Human::Absent, ok_output("unused\n"));
    assert_eq!(stdout_of(&w.run().await), "written\n");
    assert!(w.readonly.calls().is_empty() && w.watched.calls().is_empty());
}

/// The exec allowlist each call was given.
fn exec_allowlists(shell: &ScriptedShell) -> Vec<Option<Vec<PathBuf>>> {
    shell
        .calls()
        .iter()
        .map(|c| match c {
            RecordedCall::Exec { options, .. } | RecordedCall::Run { options, .. } => {
                options.exec_allowlist.as_ref().map(|l| l.paths.clone())
            }
        })
        .collect()
}

#[tokio::test]
async fn the_exec_allowlist_goes_with_every_sandboxed_run_that_can_enforce_it() {
    let refused = failed_output(
        "",
        RefusedWrites::Refused(vec![PathBuf::from("/work/a.txt")]),
    );
    let w = sandbox_world_with(
        "permission_mode = \"approval\"\nexec_allowlist = [\"/usr/bin/git\", \"/bin/sh\"]\n",
        Human::Says(Answer::AllowOnce),
        refused,
    );
    for shell in [&w.readonly, &w.watched, &w.writable] {
        shell.with_exec_allowlist_support();
    }
    let report = w.run().await;
    assert_eq!(stdout_of(&report), "written\n");
    let listed = Some(vec![
        PathBuf::from("/usr/bin/git"),
        PathBuf::from("/bin/sh"),
    ]);
    assert_eq!(exec_allowlists(&w.watched), vec![listed.clone()]);
    assert_eq!(
        exec_allowlists(&w.writable),
        vec![listed],
        "the writable retry too"
    );
    // Without one configured, nothing restricts the run.
    let w = sandbox_world("unrestricted", Human::Absent, ok_output(""));
    w.writable.with_exec_allowlist_support();
    w.run().await;
    assert_eq!(exec_allowlists(&w.writable), vec![None]);
}

#[tokio::test]
async fn a_required_exec_allowlist_that_cannot_be_enforced_runs_nothing() {
    // No shell enforces it, or one profile does not (a writable retry would go without).
    for supported in [0, 2] {
        let w = sandbox_world_with(
            "permission_mode = \"approval\"\nexec_allowlist = [\"/usr/bin\"]\n",
            Human::Says(Answer::AllowOnce),
            ok_output("ran\n"),
        );
        for shell in [&w.readonly, &w.watched].into_iter().take(supported) {
            shell.with_exec_allowlist_support();
        }
        let events = CollectEvents::default();
        let report = w
            .world
            .runner
            .run(
                shell_string("echo x > a.txt"),
                &w.executor(),
                &events,
                &CancellationToken::new(),
            )
            .await;
        let rule = sandbox_unavailable(&report);
        assert!(
            rule.contains("sandbox.exec_allowlist is required (built-in default)")
                && rule.contains("cannot"),
            "{rule}"
        );
        assert!(matches!(report.decision, Decision::Deny { .. }));
        assert!(
            w.readonly.calls().is_empty()
                && w.watched.calls().is_empty()
                && w.writable.calls().is_empty(),
            "nothing ran"
        );
        assert!(
            events
                .events()
                .iter()
                .any(|e| matches!(e, ExecEvent::Denied { .. }))
        );
    }
}

#[tokio::test]
async fn a_best_effort_exec_allowlist_that_cannot_be_enforced_is_off_and_says_so() {
    let w = sandbox_world_with(
        "permission_mode = \"unrestricted\"\nexec_allowlist = [\"/usr/bin\"]\nexec_allowlist_mode = \"best-effort\"\n",
        Human::Absent,
        ok_output(""),
    );
    let report = w.run().await;
    assert_eq!(stdout_of(&report), "written\n");
    assert_eq!(exec_allowlists(&w.writable), vec![None]);
    let Decision::Allow { rule, .. } = &report.decision else {
        panic!("{:?}", report.decision)
    };
    assert!(
        rule.contains("exec allowlist NOT enforced (best-effort)"),
        "{rule}"
    );
    // The operator's direct mode has no OS sandbox, so no allowlist either — whatever
    // the mode — and its decision says it is unconfined.
    let w = sandbox_world_with(
        "permission_mode = \"unrestricted\"\nexec_allowlist = [\"/usr/bin\"]\n",
        Human::Absent,
        ok_output(""),
    );
    let direct = w.executor_unconfined(Some("direct mode"));
    let report = w
        .world
        .runner
        .run(
            shell_string("echo x > a.txt"),
            &direct,
            &CollectEvents::default(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(stdout_of(&report), "written\n");
    assert_eq!(exec_allowlists(&w.writable), vec![None]);
    assert!(matches!(
        report.decision,
        Decision::Allow {
            reason: AllowReason::Unconfined,
            ..
        }
    ));
}

#[tokio::test]
async fn direct_mode_is_part_of_the_decision_and_a_plan_runs_only_as_it_was_decided() {
    let w = sandbox_world_with(
        "permission_mode = \"unrestricted\"\nexec_allowlist = [\"/usr/bin\"]\n",
        Human::Absent,
        ok_output(""),
    );
    let confined = w.executor();
    let direct = w.executor_unconfined(Some("direct mode"));
    // Decided as the direct executor serves it: the decision and the plan say so, and
    // the plan carries no exec allowlist and no network setting (the host's own).
    let decided = w.world.runner.decide(
        &w.world.runner.config(),
        shell_string("echo x > a.txt"),
        direct.confinement(),
    );
    assert!(
        matches!(
            &decided.explanation.decision,
            Decision::Allow { reason: AllowReason::Unconfined, rule } if rule.contains("WITHOUT an OS sandbox (direct mode)")
        ),
        "{:?}",
        decided.explanation.decision
    );
    let plan = decided.explanation.plans.as_written.clone().unwrap();
    assert!(plan.limits.unconfined);
    assert_eq!(plan.limits.exec_allowlist, None);
    assert_eq!(plan.limits.network, None);
    let confined_plan = w
        .world
        .runner
        .decide(
            &w.world.runner.config(),
            shell_string("echo x > a.txt"),
            confined.confinement(),
        )
        .explanation
        .plans
        .as_written
        .unwrap();
    assert!(!confined_plan.limits.unconfined && confined_plan.limits.exec_allowlist.is_some());
    assert_ne!(
        plan.digest(),
        confined_plan.digest(),
        "the digest covers it"
    );
    // Direct mode switched off (or on) between the decision and the run: refused, and
    // nothing runs on either executor.
    for (confinement, executor, says) in [
        (direct.confinement(), &confined, "now off"),
        (confined.confinement(), &direct, "without one (direct mode)"),
    ] {
        let decided = w.world.runner.decide(
            &w.world.runner.config(),
            shell_string("echo x > a.txt"),
            confinement,
        );
        let report = w
            .world
            .runner
            .execute(
                decided,
                executor,
                &CollectEvents::default(),
                &CancellationToken::new(),
            )
            .await;
        let Decision::Deny { reason, rule } = &report.decision else {
            panic!("{:?}", report.decision)
        };
        assert_eq!(*reason, DenyReason::SandboxUnavailable);
        assert!(
            rule.contains(says) && rule.contains("nothing was run"),
            "{rule}"
        );
        assert!(report.executed.is_none());
    }
    assert!(w.writable.calls().is_empty(), "nothing ran");
}

#[tokio::test]
async fn a_sandbox_that_cannot_run_read_only_refuses_those_modes_before_anything_runs() {
    const WHY: &str = "container box was not started with --read-only";
    for (config, mode, source, fix) in [
        (
            "",
            "approval",
            "built-in default",
            "in the [sandbox] table of config.toml",
        ),
        (
            "[sandbox]\npermission_mode = \"readonly\"\n",
            "readonly",
            "global",
            "in the [sandbox] table of config.toml",
        ),
        (
            "[[agents.list]]\nid = \"coder\"\nsandbox.permission_mode = \"readonly\"\n",
            "readonly",
            "agent",
            "in agent \"coder\"'s [[agents.list]] entry",
        ),
    ] {
        let w = sandbox_world(
            "unrestricted",
            Human::Says(Answer::AllowOnce),
            ok_output(""),
        );
        let w = SandboxWorld {
            world: world(r#"{"version":1}"#, config, Human::Says(Answer::AllowOnce)),
            ..w
        };
        let executor = match w.executor() {
            Executor::Sandbox(shells) => Executor::Sandbox(SandboxShells {
                read_only_unavailable: Some(WHY.into()),
                network: policy::PlannedNetwork::Plain(false),
                ..shells
            }),
            other => other,
        };
        let events = CollectEvents::default();
        let report = w
            .world
            .runner
            .run(
                shell_string("echo x > a.txt"),
                &executor,
                &events,
                &CancellationToken::new(),
            )
            .await;
        let rule = sandbox_unavailable(&report);
        assert!(
            rule.contains(&format!("permission_mode={mode} ({source})"))
                && rule.contains(WHY)
                && rule.contains("nothing was run")
                && rule.contains("permission_mode = \"unrestricted\"")
                && rule.contains(fix),
            "{rule}"
        );
        assert!(
            matches!(
                &report.decision,
                Decision::Deny {
                    reason: DenyReason::SandboxUnavailable,
                    ..
                }
            ),
            "the report never says it ran under a mode it did not: {report:?}"
        );
        // Nothing ran, on no profile, and the session hears a denial, not a start.
        assert!(w.readonly.calls().is_empty() && w.watched.calls().is_empty());
        assert!(w.writable.calls().is_empty());
        assert!(
            events
                .events()
                .iter()
                .all(|e| matches!(e, ExecEvent::Denied { .. })),
            "{:?}",
            events.events()
        );
    }
    // unrestricted runs, on the writable profile.
    let w = sandbox_world("unrestricted", Human::Absent, ok_output("unused\n"));
    let Executor::Sandbox(shells) = w.executor() else {
        unreachable!()
    };
    let executor = Executor::Sandbox(SandboxShells {
        read_only_unavailable: Some(WHY.into()),
        network: policy::PlannedNetwork::Plain(false),
        ..shells
    });
    let report = w
        .world
        .runner
        .run(
            shell_string("echo x > a.txt"),
            &executor,
            &CollectEvents::default(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(stdout_of(&report), "written\n");
}

#[tokio::test]
async fn a_session_can_make_its_permission_mode_stricter_but_never_looser() {
    let w = sandbox_world(
        "approval",
        Human::Says(Answer::AllowOnce),
        failed_output("", RefusedWrites::Refused(vec![])),
    );
    let mut strict = shell_string("echo x > a.txt");
    strict.session_overrides.permission_mode = Some(policy::PermissionMode::Readonly);
    let report = w
        .world
        .runner
        .run(
            strict,
            &w.executor(),
            &CollectEvents::default(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(
        report.policy.permission_mode.source,
        policy::Source::Session
    );
    assert_eq!(w.readonly.calls().len(), 1);
    let mut loose = shell_string("echo x > a.txt");
    loose.session_overrides.permission_mode = Some(policy::PermissionMode::Unrestricted);
    let report = w
        .world
        .runner
        .run(
            loose,
            &w.executor(),
            &CollectEvents::default(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(
        report.policy.permission_mode.value,
        policy::PermissionMode::Approval
    );
    assert_eq!(w.watched.calls().len(), 1);
}

// ── Cancellation and misrouting ─────────────────────────────────────────────────────

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

fn cancel_soon(after: Duration) -> CancellationToken {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        stop.cancel();
    });
    cancel
}

#[tokio::test]
async fn a_cancelled_run_ends_with_130_on_the_gateway_and_in_the_sandbox() {
    let w = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        Human::Absent,
    );
    let never: Arc<dyn caps::Shell> = Arc::new(NeverFinishes);
    let gateway = Executor::Plain {
        shell: Arc::clone(&never),
        host: RunHost::Gateway,
    };
    let sandbox = Executor::Sandbox(SandboxShells {
        readonly: Arc::clone(&never),
        watched: Arc::clone(&never),
        writable: Arc::clone(&never),
        unconfined: None,
        read_only_unavailable: None,
        network: policy::PlannedNetwork::Plain(false),
    });
    for (executor, mut req) in [(gateway, argv(&["ls"])), (sandbox, argv(&["ls"]))] {
        if matches!(executor, Executor::Sandbox(_)) {
            req.params.host = Some(policy::Host::Sandbox);
        }
        let events = CollectEvents::default();
        let report = w
            .runner
            .run(
                req,
                &executor,
                &events,
                &cancel_soon(Duration::from_millis(20)),
            )
            .await;
        assert_eq!(
            report.outcome,
            Outcome::Cancelled { started: true },
            "{executor:?}"
        );
        assert_eq!(report.exit_code(), EXIT_CANCELLED);
        let finished = events.events().into_iter().find_map(|e| match e {
            ExecEvent::Finished {
                code, cancelled, ..
            } => Some((code, cancelled)),
            _ => None,
        });
        assert_eq!(finished, Some((130, true)), "{executor:?}");
    }
}

/// An approver that never answers: only cancellation ends the wait.
struct NeverAnswers;

#[async_trait::async_trait]
impl Approvals for NeverAnswers {
    async fn ask(&self, _: &Request, _: Option<&approvals::ApprovalsFile>) -> AskOutcome {
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
        Human::Absent,
    );
    let host = HostContext::builder(
        w.fs.clone(),
        w.store.clone(),
        Config::parse(
            "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"always\"\n",
            Path::new("config.toml"),
        )
        .unwrap(),
    )
    .default_cwd("/work")
    .approvals(Arc::new(NeverAnswers))
    .build();
    let runner = Runner::new(host);
    for _ in 0..20 {
        let report = runner
            .run(
                argv(&["ls"]),
                &w.gateway(),
                &CollectEvents::default(),
                &cancel_soon(Duration::from_millis(5)),
            )
            .await;
        assert_eq!(report.outcome, Outcome::Cancelled { started: false });
        assert_eq!(report.exit_code(), EXIT_CANCELLED);
    }
    assert!(w.shell.calls().is_empty(), "the command ran");
}

#[tokio::test]
async fn a_runner_without_a_sandbox_refuses_what_only_a_sandbox_may_run_and_vice_versa() {
    // Routing is the gateway's job, but a misrouted request must not run unconfined on a
    // direct executor, nor a policy decision run on a sandbox.
    let w = world(r#"{"version":1}"#, "", Human::Absent);
    let (report, events) = run(&w, argv(&["rm", "x"])).await;
    assert!(matches!(
        &report.decision,
        Decision::Allow {
            reason: AllowReason::Sandboxed,
            ..
        }
    ));
    assert_eq!(denied(&report), Some(DenyReason::HostUnavailable));
    assert!(events.iter().any(|e| matches!(e, ExecEvent::Denied { .. })));
    assert!(w.shell.calls().is_empty());
    let gw = world(
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        Human::Absent,
    );
    let sandbox = sandbox_world("unrestricted", Human::Absent, ok_output(""));
    let report = gw
        .runner
        .run(
            argv(&["ls"]),
            &sandbox.executor(),
            &CollectEvents::default(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(denied(&report), Some(DenyReason::HostUnavailable));
    assert!(sandbox.writable.calls().is_empty());
}

// ── tools.exec.run_in_approver: the approver runs what it approved ─────────────────

const IN_APPROVER: &str = "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\ntimeout = \"42s\"\nrun_in_approver = true\n";

#[tokio::test]
async fn with_run_in_approver_an_approved_command_is_run_by_the_approver_not_here() {
    let w = world(ALLOWLIST_HOST, IN_APPROVER, Human::Says(Answer::AllowOnce));
    let (report, events) = run(&w, argv(&["rm", "-r", "build"])).await;
    assert!(
        w.shell.calls().is_empty(),
        "it also ran here: {:?}",
        started(&w.shell)
    );
    let seen = w.approver.seen.lock().unwrap().clone();
    let [Request::Exec(exec)] = seen.as_slice() else {
        panic!("not one exec request: {seen:?}")
    };
    assert_eq!(exec.timeout_ms, 42_000, "the run's own timeout");
    assert!(matches!(
        &exec.prompt.kind,
        PromptKind::Command { plan, .. }
            if matches!(&plan.launch, Launch::Exec { program, .. } if program == "/usr/bin/rm")
    ));
    let Outcome::Finished { output } = &report.outcome else {
        panic!("{report:?}")
    };
    assert_eq!(output.stdout, "ran by the approver\n");
    assert_eq!(output.combined, "ran by the approver\napprover stderr\n");
    assert_eq!(report.exit_code(), 3);
    let executed = report.executed.as_ref().unwrap();
    assert!(executed.in_approver && !executed.rebuilt);
    assert_eq!(executed.argv, ["/usr/bin/rm", "-r", "build"]);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["executed"]["in_approver"], true, "{json}");
    assert!(
        matches!(&report.decision, Decision::Allow { rule, .. } if rule.contains("run by the approver")),
        "{:?}",
        report.decision
    );
    assert_eq!(
        events.iter().map(ExecEvent::text).collect::<Vec<_>>(),
        vec![
            format!("Exec started (node=gateway, id={})", report.run_id),
            format!(
                "Exec finished (node=gateway, id={}, code=3)\nran by the approver\napprover stderr\n",
                report.run_id
            ),
        ]
    );
}

#[tokio::test]
async fn with_run_in_approver_denials_fallbacks_and_allowlisted_commands_stay_here() {
    // Denied by the human: nothing runs anywhere.
    let w = world(ALLOWLIST_HOST, IN_APPROVER, Human::Says(Answer::Deny));
    let (report, _) = run(&w, argv(&["rm", "x"])).await;
    assert_eq!(denied(&report), Some(DenyReason::ApprovalDenied));
    assert!(w.shell.calls().is_empty());
    // Allowlisted: no human, no approver run — it runs here as always.
    let (report, _) = run(&w, argv(&["ls"])).await;
    assert_eq!(report.exit_code(), 0);
    assert_eq!(started(&w.shell), vec!["exec /usr/bin/ls (as ls)"]);
    assert!(!report.executed.unwrap().in_approver);
    assert_eq!(w.approver.seen.lock().unwrap().len(), 1);
    // Nobody answers and askFallback=full: no approver is there to run it, so the
    // fallback run happens here.
    let host =
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"full"}}"#;
    let w = world(host, IN_APPROVER, Human::Absent);
    let (report, _) = run(&w, argv(&["rm", "x"])).await;
    assert_eq!(report.exit_code(), 0);
    assert_eq!(started(&w.shell), vec!["exec /usr/bin/rm x (as rm)"]);
    assert!(matches!(
        w.approver.seen.lock().unwrap().as_slice(),
        [Request::Exec(_)]
    ));
}

#[tokio::test]
async fn an_approver_that_took_a_command_to_run_and_vanished_is_never_followed_by_a_run_here() {
    // askFallback=full would run an unanswered command here; but this approver received
    // the command to run itself before it went away, so it may have run it already.
    let host =
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"full"}}"#;
    let w = world(host, IN_APPROVER, Human::Vanished);
    let (report, _) = run(&w, argv(&["rm", "x"])).await;
    assert_eq!(denied(&report), Some(DenyReason::NoApprover));
    let Outcome::Denied { rule, .. } = &report.outcome else {
        unreachable!()
    };
    assert!(rule.contains("may have run there"), "{rule}");
    assert!(w.shell.calls().is_empty(), "it ran here as well");
    // An ordinary prompt that goes unanswered the same way still falls back.
    let w = world(host, GATEWAY_ALLOWLIST, Human::Vanished);
    let (report, _) = run(&w, argv(&["rm", "x"])).await;
    assert_eq!(report.exit_code(), 0);
    assert_eq!(started(&w.shell), vec!["exec /usr/bin/rm x (as rm)"]);
}

#[tokio::test]
async fn with_run_in_approver_allow_always_stores_the_chosen_scope_and_nothing_runs_here() {
    // The human widens the preselected subcommand rule to the program alone, and the
    // approver runs it: the runner stores that scope and starts nothing.
    let host = r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},
        "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/ls"},{"pattern":"/usr/bin/cat"}]}}}"#;
    let w = world(host, IN_APPROVER, Human::AlwaysWith(2));
    let (report, _) = run(&w, argv(&["git", "log", "-n", "1"])).await;
    assert!(w.shell.calls().is_empty(), "it also ran here");
    assert_eq!(report.exit_code(), 3, "the approver's run is the result");
    assert!(report.executed.as_ref().unwrap().in_approver);
    let seen = w.approver.seen.lock().unwrap().clone();
    let [Request::Exec(exec)] = seen.as_slice() else {
        panic!("not one exec request: {seen:?}")
    };
    let PromptKind::Command { allow_always, .. } = &exec.prompt.kind else {
        panic!()
    };
    assert_eq!(allow_always[2].scope, policy::Scope::Program);
    assert_eq!(
        stored_rules(&w),
        vec![policy::RuleSpec::program("/usr/bin/git")]
    );
    // Preselected (no index): the subcommand rule.
    let w = world(host, IN_APPROVER, Human::Says(Answer::AllowAlways));
    run(&w, argv(&["git", "status"])).await;
    assert!(w.shell.calls().is_empty());
    assert_eq!(
        stored_rules(&w),
        vec![policy::RuleSpec {
            pattern: "/usr/bin/git".into(),
            args: Some(vec!["status".into()]),
            ..Default::default()
        }]
    );
}

/// A proxied sandbox run (`[sandbox.egress]` allows pypi.org) under `approvals_json` and
/// `tools` (the config's `[tools.exec]` lines), answered by `human`: the world, and the
/// asker the run's shell was given.
async fn proxied_run(
    approvals_json: &str,
    tools: &str,
    human: Human,
) -> (World, caps::ConnectionAsker) {
    let config = format!(
        "[tools.exec]\n{tools}[sandbox]\nnetwork = \"proxy\"\n[sandbox.egress]\nallow = [\"pypi.org\"]\n"
    );
    let w = world(approvals_json, &config, human);
    let asker = run_proxied(&w, &["pip", "install", "x"]).await;
    (w, asker)
}

/// Run `words` in `w`'s proxied sandbox; the asker the run's shell was given.
async fn run_proxied(w: &World, words: &[&str]) -> caps::ConnectionAsker {
    proxied_options(w, words)
        .await
        .ask_connection
        .expect("a proxied run is given an asker")
}

/// Run `words` in `w`'s proxied sandbox (built from its global rules); the options the
/// run's shell was given.
async fn proxied_options(w: &World, words: &[&str]) -> caps::ExecOptions {
    let shell = ScriptedShell::new();
    shell.respond_with(|_| Ok(ok_output("ran\n")));
    let executor = Executor::Sandbox(SandboxShells {
        readonly: Arc::new(shell.clone()),
        watched: Arc::new(shell.clone()),
        writable: Arc::new(shell.clone()),
        unconfined: None,
        read_only_unavailable: None,
        network: policy::PlannedNetwork::of_sandbox(&w.runner.config().sandbox),
    });
    let report = w
        .runner
        .run(
            argv(words),
            &executor,
            &CollectEvents::default(),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(stdout_of(&report), "ran\n", "{report:?}");
    let calls = shell.calls();
    let (RecordedCall::Exec { options, .. } | RecordedCall::Run { options, .. }) = &calls[0];
    options.clone()
}

/// A proxied run carries its plan's egress rules to the shell — the requesting agent's
/// own `sandbox.egress` here, though the sandbox was built from the global rules — and
/// they decide its connections: the agent's host is allowed saying whose rule it was,
/// the global one is not (asked about), the global deny still wins.
#[tokio::test]
async fn a_proxied_run_carries_its_own_agents_egress_rules_to_the_shell() {
    let config = "[tools.exec]\nhost = \"sandbox\"\nsecurity = \"full\"\n\
                  [sandbox]\nnetwork = \"proxy\"\n[sandbox.egress]\nallow = [\"pypi.org\"]\n\
                  deny = [\"*.evil.test\"]\n\
                  [[agents.list]]\nid = \"coder\"\nsandbox.egress.allow = [\"crates.io\", \"*.evil.test\"]\n";
    let w = world(SANDBOX_HOST, config, Human::Says(Answer::Deny));
    let rules = proxied_options(&w, &["cargo", "fetch"])
        .await
        .connection_rules
        .expect("a proxied run carries its rules");
    assert_eq!(
        rules.0.admit("crates.io", 443),
        caps::Admission::Allow {
            rule: "agent coder's sandbox.egress allow crates.io".into(),
            names_address: false
        }
    );
    assert!(matches!(
        rules.0.admit("pypi.org", 443),
        caps::Admission::Ask(_)
    ));
    assert!(matches!(
        rules.0.admit("x.evil.test", 443),
        caps::Admission::Refuse(why) if why.contains("deny *.evil.test")
    ));
}

fn question(host: &str, port: u16) -> caps::ConnectionQuestion {
    caps::ConnectionQuestion {
        host: host.into(),
        port,
        why: format!("no [sandbox.egress] allow rule names {host} on port {port}"),
        special: None,
    }
}

const SANDBOX_HOST: &str =
    r#"{"version":1,"defaults":{"security":"full","ask":"on-miss","askFallback":"deny"}}"#;

#[tokio::test]
async fn a_connection_no_rule_names_is_asked_once_per_host_and_port_and_at_most_so_often() {
    let (w, asker) = proxied_run(
        SANDBOX_HOST,
        "host = \"sandbox\"\nsecurity = \"full\"\n",
        Human::Says(Answer::AllowOnce),
    )
    .await;
    let connection_prompts = || {
        w.prompts()
            .into_iter()
            .filter(|p| matches!(p.kind, PromptKind::Connection { .. }))
            .collect::<Vec<_>>()
    };
    let first = asker.0.ask(&question("files.example", 443)).await;
    assert!(
        matches!(&first, caps::ConnectionAnswer::Allow { reason: w, .. } if w.contains("allowed for this run by")),
        "{first:?}"
    );
    // The same host and port again: the answer stands, nobody is asked again.
    assert_eq!(asker.0.ask(&question("files.example", 443)).await, first);
    // Two connections at once to a host not yet answered: one question, one answer.
    let (one, other) = (
        question("both.example", 443),
        question("Both.Example.", 443),
    );
    let (a, b) = tokio::join!(asker.0.ask(&one), asker.0.ask(&other));
    assert_eq!(a, b);
    let prompts = connection_prompts();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    let PromptKind::Connection {
        command,
        destination,
        port,
        why,
        special,
        store,
    } = &prompts[0].kind
    else {
        unreachable!()
    };
    assert_eq!(store.as_deref(), Some("files.example:443"));
    assert_eq!(command, "pip install x");
    assert_eq!((destination.as_str(), *port), ("files.example", 443));
    assert!(why.contains("no [sandbox.egress] allow rule"));
    assert_eq!(special, &None);
    assert_eq!(prompts[0].agent, "coder");
    // Another port is another question; past the most one run may ask, refused unasked.
    for i in 0..runner::MAX_QUESTIONS + 3 - 2 {
        let _ = asker
            .0
            .ask(&question("files.example", 8000 + i as u16))
            .await;
    }
    assert_eq!(connection_prompts().len(), runner::MAX_QUESTIONS);
    let past = asker.0.ask(&question("late.example", 443)).await;
    assert!(
        matches!(&past, caps::ConnectionAnswer::Refuse(w) if w.contains("already asked about 16 hosts")),
        "{past:?}"
    );
}

#[tokio::test]
async fn a_denied_unanswered_or_unaskable_connection_follows_the_answer_fallback_and_ask_mode() {
    let tools = "host = \"sandbox\"\nsecurity = \"full\"\n";
    let (_, asker) = proxied_run(SANDBOX_HOST, tools, Human::Says(Answer::Deny)).await;
    let got = asker.0.ask(&question("evil.example", 443)).await;
    assert!(
        matches!(&got, caps::ConnectionAnswer::Refuse(w) if w.contains("denied by")),
        "{got:?}"
    );

    for (human, fallback, allowed) in [
        (Human::Absent, "deny", false),
        (Human::TooSlow, "allowlist", false),
        (Human::Absent, "full", true),
    ] {
        let host = format!(
            r#"{{"version":1,"defaults":{{"security":"full","ask":"on-miss","askFallback":"{fallback}"}}}}"#
        );
        let (_, asker) = proxied_run(&host, tools, human).await;
        let got = asker.0.ask(&question("x.example", 443)).await;
        match (&got, allowed) {
            (
                caps::ConnectionAnswer::Allow {
                    reason: w,
                    names_address,
                },
                true,
            ) => {
                assert!(w.contains("askFallback = full"));
                // Nobody saw the host: it names no address.
                assert!(!names_address);
            }
            (caps::ConnectionAnswer::Refuse(w), false) => {
                assert!(
                    w.contains(&format!("askFallback = {fallback} refuses")),
                    "{w}"
                )
            }
            _ => panic!("{human:?} {fallback}: {got:?}"),
        }
    }

    // ask = off: refused, and nobody is asked.
    let host = r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"full"}}"#;
    let (w, asker) = proxied_run(
        host,
        "host = \"sandbox\"\nsecurity = \"full\"\nask = \"off\"\n",
        Human::Says(Answer::AllowOnce),
    )
    .await;
    let got = asker.0.ask(&question("x.example", 443)).await;
    assert!(
        matches!(&got, caps::ConnectionAnswer::Refuse(w) if w.contains("ask = off")),
        "{got:?}"
    );
    assert!(w.prompts().is_empty(), "{:?}", w.prompts());
}

#[tokio::test]
async fn allow_always_on_a_connection_stores_exactly_its_host_and_port_for_the_agent() {
    let tools = "host = \"sandbox\"\nsecurity = \"full\"\n";
    let (w, asker) = proxied_run(SANDBOX_HOST, tools, Human::Says(Answer::AllowAlways)).await;
    let got = asker.0.ask(&question("Files.Example.", 443)).await;
    assert!(
        matches!(&got, caps::ConnectionAnswer::Allow { reason: w, .. } if w.contains("stored for agent coder: egressAllow files.example:443")),
        "{got:?}"
    );
    let file = w.store.load().unwrap().file;
    assert_eq!(
        file.agents["coder"].egress_allow,
        vec!["files.example:443".to_string()]
    );
    // The next run of the agent reaches it without a question; another port is asked.
    let prompts_before = w.prompts().len();
    let next = run_proxied(&w, &["pip", "install", "y"]).await;
    let got = next.0.ask(&question("files.example", 443)).await;
    assert!(
        matches!(&got, caps::ConnectionAnswer::Allow { reason: w, .. } if w.contains("egressAllow files.example:443")),
        "{got:?}"
    );
    assert_eq!(w.prompts().len(), prompts_before, "asked again");
    let _ = next.0.ask(&question("files.example", 8443)).await;
    assert_eq!(w.prompts().len(), prompts_before + 1);
}

/// A sandbox shell whose command, while it runs, asks the run's asker about one host
/// (as the proxy does for a connection), and prints the answer.
#[derive(Debug)]
struct AskingShell;

#[async_trait::async_trait]
impl caps::Shell for AskingShell {
    async fn exec(
        &self,
        _argv: &[String],
        options: &caps::ExecOptions,
    ) -> caps::Result<caps::ExecOutput> {
        let asker = options
            .ask_connection
            .clone()
            .expect("a proxied run is given an asker");
        let answer = asker.0.ask(&question("files.example", 443)).await;
        // The command goes on a while after its answer.
        tokio::task::yield_now().await;
        Ok(ok_output(&format!("{answer:?}\n")))
    }

    async fn run(
        &self,
        script: &caps::Script,
        options: &caps::ExecOptions,
    ) -> caps::Result<caps::ExecOutput> {
        self.exec(std::slice::from_ref(&script.source), options)
            .await
    }
}

/// Records the questions a running command waits on.
#[derive(Default)]
struct QuestionEvents(Mutex<Vec<(String, Option<String>)>>);

impl runner::EventSink for QuestionEvents {
    fn emit(&self, _event: ExecEvent) {}

    fn connection_question(&self, run_id: &str, to: Option<&str>) {
        self.0
            .lock()
            .unwrap()
            .push((run_id.to_owned(), to.map(str::to_owned)));
    }
}

#[tokio::test]
async fn while_a_running_command_waits_on_a_connection_question_its_events_hear_so() {
    let config = "[tools.exec]\nhost = \"sandbox\"\nsecurity = \"full\"\n[sandbox]\nnetwork = \"proxy\"\n[sandbox.egress]\nallow = []\n";
    let w = world(SANDBOX_HOST, config, Human::Says(Answer::AllowOnce));
    let shell: Arc<dyn caps::Shell> = Arc::new(AskingShell);
    let executor = Executor::Sandbox(SandboxShells {
        readonly: Arc::clone(&shell),
        watched: Arc::clone(&shell),
        writable: shell,
        unconfined: None,
        read_only_unavailable: None,
        network: policy::PlannedNetwork::of_sandbox(&w.runner.config().sandbox),
    });
    let events = QuestionEvents::default();
    let report = w
        .runner
        .run(
            argv(&["pip", "install", "x"]),
            &executor,
            &events,
            &CancellationToken::new(),
        )
        .await;
    assert!(stdout_of(&report).contains("Allow"), "{report:?}");
    let heard = events.0.lock().unwrap().clone();
    assert_eq!(
        heard,
        vec![
            (report.run_id.clone(), Some("files.example:443".to_owned())),
            (report.run_id.clone(), None),
        ]
    );
}
