//! The approver round trip measured against an in-process approver that answers at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use approvals::ipc::protocol::{Answer, ExecPrompt, ExecReport, Prompt, PromptKind, Request};
use approvals::ipc::{
    Approver, AskOutcome, ClientConfig, Limits, ServerConfig, ask, bind_socket, serve,
};
use approvals::{OsRandom, RunPlan, SystemClock};
use policy::Launch;

struct Immediate;

#[async_trait::async_trait]
impl Approver for Immediate {
    async fn decide(&self, _: &Prompt) -> (Answer, Option<usize>) {
        (Answer::AllowOnce, None)
    }
    async fn exec(&self, _: &ExecPrompt) -> (Answer, Option<usize>, Option<ExecReport>) {
        (Answer::Deny, None, None)
    }
}

/// Median round trip over `iterations` asks (after 20 warm-up asks).
pub async fn median_round_trip(iterations: usize) -> anyhow::Result<Duration> {
    let dir = std::env::temp_dir().join(format!("warden-bench-ipc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let path = dir.join("approver.sock");
    let fs = caps::LocalFs::new("/")?;
    let uid = nix::unistd::geteuid().as_raw();
    let listener = bind_socket(&fs, &path, uid).await?;
    let token = "bench-token-0123456789".to_string();
    let limits = Limits {
        rate_per_sec: 1_000_000,
        burst: 1_000_000,
        ..Limits::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        ServerConfig {
            token: token.clone(),
            owner_uid: uid,
            limits,
        },
        Arc::new(Immediate),
        Arc::new(SystemClock),
        Arc::new(OsRandom),
        async {
            let _ = stopped.await;
        },
    ));
    let config = ClientConfig {
        socket_path: path,
        token,
        approver_uid: uid,
        connect_timeout: Duration::from_secs(2),
        approval_timeout: Duration::from_secs(5),
    };
    let plan = RunPlan {
        launch: Launch::Exec {
            program: "/usr/bin/rg".into(),
            program_id: None,
            argv: vec!["rg".into(), "-n".into(), "TODO".into()],
        },
        cwd: "/work".into(),
        env: BTreeMap::from([
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ]),
        agent: "coder".into(),
        session: "s1".into(),
        host: "gateway".into(),
        limits: policy::PlannedLimits {
            timeout_ms: 30_000,
            max_processes: 4096,
            max_memory: 1 << 30,
            exec_allowlist: None,
            network: None,
            unconfined: false,
        },
    };
    let request = Request::Prompt(Prompt::new(
        "bench",
        "coder",
        "s1",
        "gateway",
        PromptKind::Command {
            plan,
            command: "rg -n TODO".into(),
            security: policy::Security::Allowlist,
            ask: policy::Ask::OnMiss,
            reason: policy::AskReason::AllowlistMiss,
            allow_always: policy::AlwaysOption::programs(&["/usr/bin/rg"]),
            allow_always_default: 0,
            not_stored: Vec::new(),
            why: None,
        },
    ));
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations + 20 {
        let started = Instant::now();
        let outcome = ask(&config, &SystemClock, &request).await;
        let took = started.elapsed();
        if !matches!(outcome, AskOutcome::Answered(_)) {
            anyhow::bail!("approver round trip failed: {outcome:?}");
        }
        if i >= 20 {
            samples.push(took);
        }
    }
    let _ = stop.send(());
    let _ = server.await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(crate::harness::median(&samples))
}
