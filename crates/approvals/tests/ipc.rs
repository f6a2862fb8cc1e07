//! The approver IPC over real Unix sockets and real processes: authentication, replay,
//! reflection, bit flips, foreign UIDs, limits, and every way an approver can be absent.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Helper processes report on stdout.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use approvals::ipc::protocol::{
    Answer, ExecPrompt, ExecReport, Prompt, PromptKind, Request, Response, decode_challenge,
    encode_challenge, encode_request, encode_response,
};
use approvals::ipc::{
    Approver, AskOutcome, ClientConfig, Limits, ServerConfig, ask, bind_socket, read_frame, serve,
    write_frame,
};
use approvals::{Clock, OsRandom, RunPlan, SystemClock};
use caps::LocalFs;
use policy::Launch;
use tokio::net::UnixStream;

const TOKEN: &str = "test-token-0123456789abcdef";

struct Scripted {
    answer: Answer,
    delay: Duration,
    seen: Mutex<Vec<Prompt>>,
}

#[async_trait::async_trait]
impl Approver for Scripted {
    async fn decide(&self, prompt: &Prompt) -> (Answer, Option<usize>) {
        self.seen.lock().unwrap().push(prompt.clone());
        tokio::time::sleep(self.delay).await;
        (self.answer, None)
    }
    async fn exec(&self, request: &ExecPrompt) -> (Answer, Option<usize>, Option<ExecReport>) {
        let (answer, _) = self.decide(&request.prompt).await;
        let report = (answer != Answer::Deny).then(|| ExecReport {
            exit_code: 0,
            stdout: format!(
                "ran {}",
                request
                    .prompt
                    .plan()
                    .map(|p| p.launch.display())
                    .unwrap_or_default()
            ),
            stderr: String::new(),
            signal: None,
            stdout_size: None,
            stderr_size: None,
            truncated: false,
            timed_out: false,
            duration_ms: 1,
            error: None,
        });
        (answer, None, report)
    }
}

/// A fake approver's side of one connection (it holds the token): accept, challenge
/// with `nonce`, read and authenticate the request. The stream, the request, the nonce
/// and the request's MAC (which the response must bind).
async fn accept_request(
    listener: &tokio::net::UnixListener,
    nonce: [u8; 32],
) -> (tokio::net::UnixStream, Request, [u8; 32], [u8; 32]) {
    let (mut s, _) = listener.accept().await.unwrap();
    write_frame(&mut s, &approvals::ipc::protocol::encode_challenge(&nonce))
        .await
        .unwrap();
    let frame = read_frame(&mut s).await.unwrap();
    let (payload, mac) = approvals::ipc::protocol::decode_request(
        TOKEN.as_bytes(),
        &nonce,
        SystemClock.now_ms(),
        &frame,
    )
    .unwrap();
    let req: Request = serde_json::from_slice(payload).unwrap();
    (s, req, nonce, mac)
}

fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

fn plan() -> RunPlan {
    RunPlan {
        launch: Launch::Exec {
            program: "/usr/bin/rg".into(),
            program_id: None,
            argv: vec!["rg".into(), "-n".into(), "TODO".into()],
        },
        cwd: "/work".into(),
        env: BTreeMap::from([("PATH".to_string(), "/usr/bin".to_string())]),
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
    }
}

fn prompt_request(id: &str) -> Request {
    Request::Prompt(Prompt::new(
        id,
        "coder",
        "s1",
        "gateway",
        PromptKind::Command {
            plan: plan(),
            command: "rg -n TODO".into(),
            security: policy::Security::Allowlist,
            ask: policy::Ask::OnMiss,
            reason: policy::AskReason::AllowlistMiss,
            allow_always: policy::AlwaysOption::programs(&["/usr/bin/rg"]),
            allow_always_default: 0,
            not_stored: Vec::new(),
            why: None,
        },
    ))
}

struct Server {
    _tmp: tempfile::TempDir,
    path: PathBuf,
    approver: Arc<Scripted>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start(answer: Answer, delay: Duration, limits: Limits) -> Server {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("state/approvals.sock");
    let fs = LocalFs::new("/").unwrap();
    let listener = bind_socket(&fs, &path, uid()).await.unwrap();
    let approver = Arc::new(Scripted {
        answer,
        delay,
        seen: Mutex::new(Vec::new()),
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = ServerConfig {
        token: TOKEN.into(),
        owner_uid: uid(),
        limits,
    };
    tokio::spawn(serve(
        listener,
        config,
        approver.clone(),
        Arc::new(SystemClock),
        Arc::new(OsRandom),
        async {
            let _ = stopped.await;
        },
    ));
    Server {
        _tmp: tmp,
        path,
        approver,
        stop: Some(stop),
    }
}

fn client(path: &Path, approval_timeout: Duration) -> ClientConfig {
    ClientConfig {
        socket_path: path.to_path_buf(),
        token: TOKEN.into(),
        approver_uid: uid(),
        connect_timeout: Duration::from_secs(2),
        approval_timeout,
    }
}

fn generous() -> Limits {
    Limits {
        read_deadline: Duration::from_millis(500),
        max_connections: 64,
        max_handshakes: 128,
        rate_per_sec: 100_000,
        burst: 100_000,
    }
}

/// Send a raw frame after the challenge; true if the server answered anything.
async fn server_answers(path: &Path, make: impl FnOnce([u8; 32]) -> Vec<u8>) -> bool {
    let mut s = UnixStream::connect(path).await.unwrap();
    let nonce = decode_challenge(&read_frame(&mut s).await.unwrap()).unwrap();
    if write_frame(&mut s, &make(nonce)).await.is_err() {
        return false;
    }
    matches!(
        tokio::time::timeout(Duration::from_secs(5), read_frame(&mut s)).await,
        Ok(Ok(_))
    )
}

fn valid_request_frame(nonce: [u8; 32]) -> Vec<u8> {
    let payload = serde_json::to_vec(&prompt_request("r1")).unwrap();
    encode_request(TOKEN.as_bytes(), &nonce, SystemClock.now_ms(), &payload)
}

#[tokio::test]
async fn answers_come_back_authenticated_and_bound() {
    for answer in [Answer::AllowOnce, Answer::AllowAlways, Answer::Deny] {
        let server = start(answer, Duration::ZERO, Limits::default()).await;
        let outcome = ask(
            &client(&server.path, Duration::from_secs(5)),
            &SystemClock,
            &prompt_request("r1"),
        )
        .await;
        let AskOutcome::Answered(response) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(response.answer, answer);
        assert_eq!(response.id, "r1");
        assert_eq!(
            server.approver.seen.lock().unwrap()[0].plan(),
            Some(&plan())
        );
    }
}

#[tokio::test]
async fn exec_requests_return_the_approvers_run() {
    let server = start(Answer::AllowOnce, Duration::ZERO, Limits::default()).await;
    let Request::Prompt(prompt) = prompt_request("x1") else {
        unreachable!()
    };
    let request = Request::Exec(ExecPrompt {
        prompt,
        timeout_ms: 1000,
    });
    let AskOutcome::Answered(r) = ask(
        &client(&server.path, Duration::from_secs(5)),
        &SystemClock,
        &request,
    )
    .await
    else {
        panic!()
    };
    assert_eq!(r.report.unwrap().stdout, "ran rg -n TODO");
}

#[tokio::test]
async fn the_socket_is_0600_in_a_0700_directory() {
    let server = start(Answer::Deny, Duration::ZERO, Limits::default()).await;
    assert_eq!(
        std::fs::metadata(&server.path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(server.path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
}

#[tokio::test]
async fn a_bit_flip_in_any_byte_of_a_request_is_rejected() {
    let server = start(Answer::AllowOnce, Duration::ZERO, generous()).await;
    assert!(
        server_answers(&server.path, valid_request_frame).await,
        "the unmodified frame must work"
    );
    let len = valid_request_frame([0; 32]).len();
    for i in 0..len {
        let answered = server_answers(&server.path, |nonce| {
            let mut f = valid_request_frame(nonce);
            f[i] ^= 0x01;
            f
        })
        .await;
        assert!(!answered, "flipping byte {i} of {len} was accepted");
    }
}

#[tokio::test]
async fn a_bit_flip_in_any_byte_of_a_response_is_rejected() {
    // A fake approver that answers correctly except for one flipped byte.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("fake.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let flip: Arc<Mutex<Option<usize>>> = Arc::new(Mutex::new(None));
    let flip_server = flip.clone();
    let response_len = Arc::new(Mutex::new(0usize));
    let len_server = response_len.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, req, nonce, mac) = accept_request(&listener, [9u8; 32]).await;
            let resp = Response {
                id: req.prompt().id.clone(),
                digest: req.prompt().digest.clone(),
                answer: Answer::AllowOnce,
                allow_always_option: None,
                report: None,
            };
            let mut out = encode_response(
                TOKEN.as_bytes(),
                &nonce,
                &mac,
                SystemClock.now_ms(),
                &serde_json::to_vec(&resp).unwrap(),
            );
            *len_server.lock().unwrap() = out.len();
            if let Some(i) = *flip_server.lock().unwrap() {
                out[i] ^= 0x01;
            }
            let _ = write_frame(&mut s, &out).await;
        }
    });
    let c = client(&path, Duration::from_secs(5));
    assert!(matches!(
        ask(&c, &SystemClock, &prompt_request("r1")).await,
        AskOutcome::Answered(_)
    ));
    let len = *response_len.lock().unwrap();
    assert!(len > 100);
    let Request::Prompt(prompt) = prompt_request("r1") else {
        unreachable!()
    };
    let exec = Request::Exec(ExecPrompt {
        prompt,
        timeout_ms: 1000,
    });
    for i in 0..len {
        *flip.lock().unwrap() = Some(i);
        let outcome = ask(&c, &SystemClock, &prompt_request("r1")).await;
        assert!(
            matches!(outcome, AskOutcome::NoApprover(_)),
            "flipping response byte {i} gave {outcome:?}"
        );
        // The same refusal for a command the approver was to run itself says that it may
        // have run there (the caller must not fall back to running it again).
        let outcome = ask(&c, &SystemClock, &exec).await;
        assert!(
            matches!(outcome, AskOutcome::MayHaveRun(_)),
            "flipping byte {i} of an exec answer gave {outcome:?}"
        );
    }
    // An approver that takes the request and goes away: the same, for either kind.
    let path = tmp.path().join("vanishing.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let nonce = [9u8; 32];
            write_frame(&mut s, &approvals::ipc::protocol::encode_challenge(&nonce))
                .await
                .unwrap();
            let _ = read_frame(&mut s).await;
        }
    });
    let c = client(&path, Duration::from_secs(5));
    let outcome = ask(&c, &SystemClock, &prompt_request("r2")).await;
    assert!(matches!(outcome, AskOutcome::NoApprover(_)), "{outcome:?}");
    let outcome = ask(&c, &SystemClock, &exec).await;
    let AskOutcome::MayHaveRun(why) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(why.contains("went away without answering"), "{why}");
}

#[tokio::test]
async fn replays_and_reflections_are_rejected() {
    let server = start(Answer::AllowOnce, Duration::ZERO, generous()).await;
    // Capture a valid request and the answer to it.
    let mut s = UnixStream::connect(&server.path).await.unwrap();
    let nonce = decode_challenge(&read_frame(&mut s).await.unwrap()).unwrap();
    let captured = valid_request_frame(nonce);
    write_frame(&mut s, &captured).await.unwrap();
    let response = read_frame(&mut s).await.unwrap();
    // Same connection: a second request is never read.
    let _ = write_frame(&mut s, &captured).await;
    assert!(matches!(
        tokio::time::timeout(Duration::from_secs(5), read_frame(&mut s)).await,
        Ok(Err(_))
    ));
    // New connection, new nonce: the captured frame does not verify.
    assert!(!server_answers(&server.path, |_| captured.clone()).await);
    // The server's response presented as a request.
    assert!(!server_answers(&server.path, |_| response.clone()).await);
    // A request under another token.
    assert!(
        !server_answers(&server.path, |n| encode_request(
            b"wrong",
            &n,
            SystemClock.now_ms(),
            b"{}"
        ))
        .await
    );
    // A stale timestamp.
    assert!(
        !server_answers(&server.path, |n| {
            let payload = serde_json::to_vec(&prompt_request("r")).unwrap();
            encode_request(
                TOKEN.as_bytes(),
                &n,
                SystemClock.now_ms() - 60_000,
                &payload,
            )
        })
        .await
    );
    // A digest that does not match the prompt shown.
    assert!(
        !server_answers(&server.path, |n| {
            let Request::Prompt(mut p) = prompt_request("r") else {
                unreachable!()
            };
            if let PromptKind::Command { plan, .. } = &mut p.kind
                && let Launch::Exec { argv, .. } = &mut plan.launch
            {
                argv.push("--and-more".into());
            }
            encode_request(
                TOKEN.as_bytes(),
                &n,
                SystemClock.now_ms(),
                &serde_json::to_vec(&Request::Prompt(p)).unwrap(),
            )
        })
        .await
    );
    // Unknown fields in an authenticated payload.
    assert!(
        !server_answers(&server.path, |n| {
            let mut v = serde_json::to_value(prompt_request("r")).unwrap();
            v["surprise"] = 1.into();
            encode_request(
                TOKEN.as_bytes(),
                &n,
                SystemClock.now_ms(),
                &serde_json::to_vec(&v).unwrap(),
            )
        })
        .await
    );
    assert_eq!(
        server.approver.seen.lock().unwrap().len(),
        1,
        "only the one valid request reached the human"
    );
}

#[tokio::test]
async fn oversized_and_slow_senders_are_cut_off_while_others_are_served() {
    let server = start(Answer::AllowOnce, Duration::ZERO, generous()).await;
    // Oversized: a length prefix far beyond the limit.
    let mut big = UnixStream::connect(&server.path).await.unwrap();
    read_frame(&mut big).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut big, &(50u32 << 20).to_be_bytes())
        .await
        .unwrap();
    // Slow: never sends its request.
    let mut slow = UnixStream::connect(&server.path).await.unwrap();
    read_frame(&mut slow).await.unwrap();
    let started = Instant::now();
    let outcome = ask(
        &client(&server.path, Duration::from_secs(5)),
        &SystemClock,
        &prompt_request("ok"),
    )
    .await;
    assert!(matches!(outcome, AskOutcome::Answered(_)), "{outcome:?}");
    // Both bad connections are closed by the server (EOF), the slow one after the deadline.
    assert!(read_frame(&mut big).await.is_err());
    assert!(read_frame(&mut slow).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_flood_from_one_peer_is_rate_limited_and_others_are_still_served() {
    let limits = Limits {
        read_deadline: Duration::from_millis(500),
        max_connections: 64,
        max_handshakes: 128,
        rate_per_sec: 20,
        burst: 40,
    };
    let server = start(Answer::AllowOnce, Duration::ZERO, limits).await;
    // 1,000 connection attempts within about a second from this process.
    let mut challenged = 0;
    let started = Instant::now();
    for _ in 0..1000 {
        let mut s = UnixStream::connect(&server.path).await.unwrap();
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(200), read_frame(&mut s)).await
        {
            challenged += 1;
        }
    }
    assert!(
        challenged <= 40 + 20 * (started.elapsed().as_secs() as usize + 1),
        "{challenged} connections got through the limiter"
    );
    // A different process is not affected.
    let socket = server.path.to_str().unwrap().to_owned();
    // Blocking on a child process must not stall the runtime the server runs on.
    let out = tokio::task::spawn_blocking(move || run_helper("ask", &[("SOCKET", &socket)], false))
        .await
        .unwrap();
    assert_eq!(out.trim(), "answered allow-once");
}

#[tokio::test]
async fn a_peer_with_another_uid_is_refused_before_anything_is_read() {
    if uid() != 0 {
        println!("SKIPPED: needs root to run a client as another uid (setpriv)");
        return;
    }
    let server = start(Answer::AllowOnce, Duration::ZERO, generous()).await;
    // Open the directory and socket so that uid 65534 can reach the peer check at all.
    std::fs::set_permissions(
        server.path.parent().unwrap(),
        std::fs::Permissions::from_mode(0o711),
    )
    .unwrap();
    std::fs::set_permissions(server._tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&server.path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = server.path.to_str().unwrap().to_owned();
    let out =
        tokio::task::spawn_blocking(move || run_helper("foreign", &[("SOCKET", &socket)], true))
            .await
            .unwrap();
    assert_eq!(out.trim(), "closed-without-challenge", "{out}");
    assert!(server.approver.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_listener_of_another_user_is_sent_nothing() {
    if uid() != 0 {
        println!("SKIPPED: needs root to listen as another uid (setpriv)");
        return;
    }
    // The socket path lies in a directory anyone can write; another user got there first.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = tmp.path().join("approver.sock");
    let socket_text = socket.to_str().unwrap().to_owned();
    let impostor = {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = dir.path().join("helper");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args([
                "--exact",
                "helper_process",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env("IPC_HELPER", "impostor")
            .env("SOCKET", &socket_text)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        (child, dir)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the impostor never listened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let outcome = ask(
        &client(&socket, Duration::from_secs(5)),
        &SystemClock,
        &prompt_request("secret-env"),
    )
    .await;
    let AskOutcome::NoApprover(why) = outcome else {
        panic!("asked an impostor: {outcome:?}");
    };
    assert!(
        why.contains("uid 65534") && why.contains("nothing was sent"),
        "{why}"
    );
    let out = tokio::task::spawn_blocking(move || impostor.0.wait_with_output().unwrap())
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("answered-bytes 0"),
        "the impostor received: {said}"
    );
}

#[tokio::test]
async fn idle_connections_cannot_keep_a_real_requester_out() {
    let server = start(Answer::AllowOnce, Duration::ZERO, generous()).await;
    // Far more idle connections than there are places: each takes its challenge and
    // then says nothing.
    let mut idle = Vec::new();
    for _ in 0..(generous().max_handshakes + generous().max_connections) * 2 {
        let mut s = UnixStream::connect(&server.path).await.unwrap();
        let _ = tokio::time::timeout(Duration::from_millis(200), read_frame(&mut s)).await;
        idle.push(s);
    }
    let outcome = ask(
        &client(&server.path, Duration::from_secs(5)),
        &SystemClock,
        &prompt_request("real"),
    )
    .await;
    assert!(matches!(outcome, AskOutcome::Answered(_)), "{outcome:?}");
    // The oldest idle ones were closed to make room.
    let mut closed = 0;
    for s in &mut idle {
        if let Ok(Err(_)) = tokio::time::timeout(Duration::from_millis(50), read_frame(s)).await {
            closed += 1;
        }
    }
    assert!(
        closed >= generous().max_handshakes,
        "only {closed} idle connections were closed"
    );
}

#[tokio::test]
async fn no_socket_or_a_stale_one_means_no_approver_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("none.sock");
    let started = Instant::now();
    assert!(matches!(
        ask(
            &client(&missing, Duration::from_secs(60)),
            &SystemClock,
            &prompt_request("r")
        )
        .await,
        AskOutcome::NoApprover(_)
    ));
    let stale = tmp.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(matches!(
        ask(
            &client(&stale, Duration::from_secs(60)),
            &SystemClock,
            &prompt_request("r")
        )
        .await,
        AskOutcome::NoApprover(_)
    ));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_approver_that_never_answers_times_out_within_the_bound() {
    let server = start(
        Answer::AllowOnce,
        Duration::from_secs(3600),
        Limits::default(),
    )
    .await;
    let started = Instant::now();
    let outcome = ask(
        &client(&server.path, Duration::from_millis(700)),
        &SystemClock,
        &prompt_request("r"),
    )
    .await;
    assert_eq!(outcome, AskOutcome::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_approver_killed_mid_prompt_means_no_approver_promptly() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("state/approver.sock");
    let mut server = helper_command("serve-forever", &[("SOCKET", path.to_str().unwrap())])
        .spawn()
        .unwrap();
    for _ in 0..500 {
        if path.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = server.id();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    });
    let started = Instant::now();
    let outcome = ask(
        &client(&path, Duration::from_secs(120)),
        &SystemClock,
        &prompt_request("r"),
    )
    .await;
    killer.await.unwrap();
    server.wait().unwrap();
    assert!(matches!(outcome, AskOutcome::NoApprover(_)), "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn socket_setup_handles_stale_sockets_and_refuses_foreign_files() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = LocalFs::new("/").unwrap();
    let dir = tmp.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A stale socket is replaced.
    let path = dir.join("a.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let live = bind_socket(&fs, &path, uid()).await.unwrap();
    // A live one is not.
    assert!(matches!(
        bind_socket(&fs, &path, uid()).await,
        Err(approvals::ipc::ServeError::AlreadyRunning(_))
    ));
    drop(live);
    // A regular file or a symlink at the path is never deleted.
    let file = dir.join("b.sock");
    std::fs::write(&file, "precious").unwrap();
    assert!(bind_socket(&fs, &file, uid()).await.is_err());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    std::os::unix::fs::symlink("/etc/passwd", dir.join("c.sock")).unwrap();
    assert!(bind_socket(&fs, &dir.join("c.sock"), uid()).await.is_err());
    // A directory others can enter is refused.
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(bind_socket(&fs, &open.join("x.sock"), uid()).await.is_err());
}

// ---- helper processes ----

fn helper_command(mode: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "helper_process",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env("IPC_HELPER", mode);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn run_helper(mode: &str, env: &[(&str, &str)], as_nobody: bool) -> String {
    let out = if as_nobody {
        // Run a copy of this test binary that uid 65534 can execute.
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = dir.path().join("helper");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe);
        cmd.args([
            "--exact",
            "helper_process",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("IPC_HELPER", mode);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    } else {
        helper_command(mode, env).output().unwrap()
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.starts_with("answered")
                || l.starts_with("closed")
                || l.starts_with("challenge")
                || l.starts_with("no-approver")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Not a test on its own: the body of helper processes (selected by `IPC_HELPER`).
#[test]
fn helper_process() {
    let Ok(mode) = std::env::var("IPC_HELPER") else {
        return;
    };
    let socket = PathBuf::from(std::env::var("SOCKET").unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match mode.as_str() {
            "ask" => match ask(
                &client(&socket, Duration::from_secs(5)),
                &SystemClock,
                &prompt_request("h"),
            )
            .await
            {
                AskOutcome::Answered(r) => println!(
                    "answered {}",
                    serde_json::to_value(r.answer).unwrap().as_str().unwrap()
                ),
                other => println!("no-approver {other:?}"),
            },
            "foreign" => {
                let mut s = UnixStream::connect(&socket).await.unwrap();
                match tokio::time::timeout(Duration::from_secs(5), read_frame(&mut s)).await {
                    Ok(Ok(_)) => println!("challenge-received"),
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        println!("closed-without-challenge")
                    }
                    Ok(Err(e)) => println!("closed-with-error {e}"),
                    Err(_) => println!("closed? no: timed out waiting"),
                }
            }
            "serve-forever" => {
                let fs = LocalFs::new("/").unwrap();
                let listener = bind_socket(&fs, &socket, uid()).await.unwrap();
                let approver = Arc::new(Scripted {
                    answer: Answer::AllowOnce,
                    delay: Duration::from_secs(3600),
                    seen: Mutex::new(Vec::new()),
                });
                let config = ServerConfig {
                    token: TOKEN.into(),
                    owner_uid: uid(),
                    limits: Limits::default(),
                };
                serve(
                    listener,
                    config,
                    approver,
                    Arc::new(SystemClock),
                    Arc::new(OsRandom),
                    std::future::pending(),
                )
                .await;
            }
            "impostor" => {
                // Listen as another user; report how many bytes any requester sent.
                let listener = tokio::net::UnixListener::bind(&socket).unwrap();
                std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
                println!("challenge-listening");
                let (mut s, _) = listener.accept().await.unwrap();
                let fake = encode_challenge(&[7u8; 32]);
                let _ = write_frame(&mut s, &fake).await;
                let mut got = Vec::new();
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    tokio::io::AsyncReadExt::read_to_end(&mut s, &mut got),
                )
                .await;
                println!("answered-bytes {}", got.len());
            }
            other => panic!("unknown helper mode {other}"),
        }
    });
}

/// A prompt offering two allow-always scopes for `git status -s`.
fn scoped_request() -> Request {
    let rule = |args: Option<Vec<String>>, exact: bool| policy::RuleSpec {
        args,
        args_match: if exact {
            policy::ArgsMatch::Exact
        } else {
            policy::ArgsMatch::Prefix
        },
        ..policy::RuleSpec::program("/usr/bin/git")
    };
    Request::Prompt(Prompt::new(
        "r-scope",
        "coder",
        "s1",
        "gateway",
        PromptKind::Command {
            plan: plan(),
            command: "git status -s".into(),
            security: policy::Security::Allowlist,
            ask: policy::Ask::OnMiss,
            reason: policy::AskReason::AllowlistMiss,
            allow_always: vec![
                policy::AlwaysOption {
                    scope: policy::Scope::Exact,
                    rules: vec![rule(Some(vec!["status".into(), "-s".into()]), true)],
                },
                policy::AlwaysOption {
                    scope: policy::Scope::Subcommand,
                    rules: vec![rule(Some(vec!["status".into()]), false)],
                },
            ],
            allow_always_default: 1,
            not_stored: Vec::new(),
            why: None,
        },
    ))
}

#[tokio::test]
async fn an_allow_always_choice_must_be_one_the_prompt_offered() {
    // A fake approver (it holds the token) that answers with whatever choice it is set
    // to, correctly authenticated: only the requester's check stands in its way.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("fake.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let reply: Arc<Mutex<(Answer, Option<usize>)>> =
        Arc::new(Mutex::new((Answer::AllowOnce, None)));
    let reply_server = reply.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, req, nonce, mac) = accept_request(&listener, [5u8; 32]).await;
            let (answer, choice) = *reply_server.lock().unwrap();
            let resp = Response {
                id: req.prompt().id.clone(),
                digest: req.prompt().digest.clone(),
                answer,
                allow_always_option: choice,
                report: None,
            };
            let out = encode_response(
                TOKEN.as_bytes(),
                &nonce,
                &mac,
                SystemClock.now_ms(),
                &serde_json::to_vec(&resp).unwrap(),
            );
            let _ = write_frame(&mut s, &out).await;
        }
    });
    let c = client(&path, Duration::from_secs(5));
    let request = scoped_request();
    let cases = [
        ((Answer::AllowAlways, None), Ok(Some("status"))),
        ((Answer::AllowAlways, Some(0)), Ok(Some("-s"))),
        ((Answer::AllowAlways, Some(1)), Ok(Some("status"))),
        ((Answer::AllowAlways, Some(2)), Err("only 2 were offered")),
        (
            (Answer::AllowAlways, Some(usize::MAX)),
            Err("only 2 were offered"),
        ),
        ((Answer::AllowOnce, Some(0)), Err("without allow-always")),
        ((Answer::Deny, Some(1)), Err("without allow-always")),
    ];
    for ((answer, choice), want) in cases {
        *reply.lock().unwrap() = (answer, choice);
        let outcome = ask(&c, &SystemClock, &request).await;
        match (want, outcome) {
            (Ok(last_word), AskOutcome::Answered(r)) => {
                let rules = request
                    .prompt()
                    .allow_always_rules(r.allow_always_option)
                    .unwrap();
                let args = rules[0].args.clone().unwrap();
                assert_eq!(args.last().map(String::as_str), last_word, "{choice:?}");
            }
            (Err(why), AskOutcome::NoApprover(got)) => {
                assert!(got.contains(why), "{choice:?}: {got}");
            }
            (want, got) => panic!("{answer:?} {choice:?}: want {want:?}, got {got:?}"),
        }
    }
    // The options are part of the digest: another set of scopes is another prompt.
    let mut other = scoped_request();
    if let Request::Prompt(p) = &mut other
        && let PromptKind::Command { allow_always, .. } = &mut p.kind
    {
        allow_always.swap(0, 1);
        assert_ne!(p.compute_digest(), p.digest);
    }
}

/// Allows always with the first scope, and for an exec request reports a run.
struct ChoosesFirstScope;

#[async_trait::async_trait]
impl Approver for ChoosesFirstScope {
    async fn decide(&self, _: &Prompt) -> (Answer, Option<usize>) {
        (Answer::AllowAlways, Some(0))
    }
    async fn exec(&self, _: &ExecPrompt) -> (Answer, Option<usize>, Option<ExecReport>) {
        let report = ExecReport {
            exit_code: 0,
            stdout: "ran".into(),
            stderr: String::new(),
            signal: None,
            stdout_size: None,
            stderr_size: None,
            truncated: false,
            timed_out: false,
            duration_ms: 1,
            error: None,
        };
        (Answer::AllowAlways, Some(0), Some(report))
    }
}

#[tokio::test]
async fn an_exec_request_answered_allow_always_carries_the_chosen_scope_and_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("state/approvals.sock");
    let fs = LocalFs::new("/").unwrap();
    let listener = bind_socket(&fs, &path, uid()).await.unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = ServerConfig {
        token: TOKEN.into(),
        owner_uid: uid(),
        limits: generous(),
    };
    tokio::spawn(serve(
        listener,
        config,
        Arc::new(ChoosesFirstScope),
        Arc::new(SystemClock),
        Arc::new(OsRandom),
        async {
            let _ = stopped.await;
        },
    ));
    let Request::Prompt(prompt) = scoped_request() else {
        unreachable!()
    };
    let c = client(&path, Duration::from_secs(5));
    // A prompt and an exec request of the same prompt: both carry the choice.
    for request in [
        Request::Prompt(prompt.clone()),
        Request::Exec(ExecPrompt {
            prompt: prompt.clone(),
            timeout_ms: 1000,
        }),
    ] {
        let AskOutcome::Answered(r) = ask(&c, &SystemClock, &request).await else {
            panic!("{request:?}")
        };
        assert_eq!(r.answer, Answer::AllowAlways);
        assert_eq!(r.allow_always_option, Some(0));
        let rules = prompt.allow_always_rules(r.allow_always_option).unwrap();
        assert_eq!(rules[0].args_match, policy::ArgsMatch::Exact);
        assert_eq!(
            r.report.is_some(),
            matches!(request, Request::Exec(_)),
            "{r:?}"
        );
    }
}
