//! In process: an MCP client drives the gateway's tools over an in-memory stream, through
//! the whole pipeline — session, decision, route, executor — to scripted shells on the
//! memory provider. What reaches a shell is the plan the decision made; denials, routing
//! refusals and events come back as tool results. No process is started.

// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use approvals::{Store, StoreConfig};
use caps::testkit::{MemoryWorld, ok_output};
use caps::{Fs, RecordedCall, ScriptedShell};
use gateway::{Gateway, Routes, SandboxRoute, WardenMcp};
use policy::{CaseMode, Config, TrustedPath};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use runner::{Executor, HostContext, RunHost, Runner, SandboxShells};
use serde_json::{Value, json};

const APPROVALS: &str = r#"{"version":1,
  "defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},
  "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/ls"},{"pattern":"/usr/bin/cat"}]}}}"#;
const CONFIG: &str = "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\n";

struct Lab {
    gateway: Arc<Gateway>,
    gateway_shell: ScriptedShell,
    sandbox_shell: ScriptedShell,
    client: RunningService<RoleClient, ()>,
}

async fn lab(sandbox: bool) -> Lab {
    let fs = MemoryWorld::new(1000)
        .dirs(&["/home/u/.warden", "/work"])
        .programs(&["/usr/bin/ls", "/usr/bin/cat", "/usr/bin/rm", "/bin/sh"])
        .file("/home/u/.warden/exec-approvals.json", APPROVALS, 0o600)
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
    let host = HostContext::builder(
        fs.clone(),
        store,
        Config::parse(CONFIG, Path::new("config.toml")).unwrap(),
    )
    .trusted_path(TrustedPath::parse("/usr/bin:/bin"))
    .default_cwd("/work")
    .build();
    let gateway_shell = ScriptedShell::new();
    gateway_shell.respond_with(|_| Ok(ok_output("from the gateway\n")));
    gateway_shell.with_files(fs.clone());
    let sandbox_shell = ScriptedShell::new();
    sandbox_shell.respond_with(|_| Ok(ok_output("from the sandbox\n")));
    let sandboxed: Arc<dyn caps::Shell> = Arc::new(sandbox_shell.clone());
    let routes = Routes {
        gateway: Executor::Plain {
            shell: Arc::new(gateway_shell.clone()),
            host: RunHost::Gateway,
        },
        sandbox: if sandbox {
            SandboxRoute::Available(Executor::Sandbox(SandboxShells {
                readonly: Arc::clone(&sandboxed),
                watched: Arc::clone(&sandboxed),
                writable: sandboxed,
                unconfined: None,
                read_only_unavailable: None,
                network: policy::PlannedNetwork::Plain(false),
            }))
        } else {
            SandboxRoute::Unavailable("no backend in this test".into())
        },
        direct: None,
        node: None,
    };
    let gateway = Arc::new(Gateway::new(Runner::new(host), routes, None));
    let (server_end, client_end) = tokio::io::duplex(1 << 16);
    let served = Arc::clone(&gateway);
    tokio::spawn(async move {
        if let Ok(running) = WardenMcp::new(served, "coder", "s1")
            .serve(server_end)
            .await
        {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_end).await.unwrap();
    Lab {
        gateway,
        gateway_shell,
        sandbox_shell,
        client,
    }
}

async fn call(lab: &Lab, tool: &str, args: Value) -> (Value, CallToolResult) {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    let r = lab
        .client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .unwrap();
    (r.structured_content.clone().unwrap_or(Value::Null), r)
}

fn calls(shell: &ScriptedShell) -> Vec<String> {
    shell
        .calls()
        .iter()
        .map(|c| match c {
            RecordedCall::Exec { argv, .. } => format!("exec {}", argv.join(" ")),
            RecordedCall::Run { script, .. } => format!("run {}", script.source),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_calls_flow_through_decision_route_and_plan_to_the_shell() {
    let lab = lab(true).await;
    // Allowlisted: the rebuilt command reaches the gateway's shell.
    let (v, r) = call(&lab, "exec", json!({"command": "ls -la && cat notes"})).await;
    assert_eq!(r.is_error, Some(false), "{v:#}");
    assert_eq!(v["status"], "finished");
    assert_eq!(v["exitCode"], 0);
    assert_eq!(v["stdout"], "from the gateway\n");
    assert_eq!(v["decision"]["reason"], "allowlist-match");
    assert_eq!(
        calls(&lab.gateway_shell),
        vec!["run /usr/bin/ls -la && /usr/bin/cat notes"]
    );
    let first = v["runId"].as_str().unwrap().to_owned();
    // A miss with nobody to ask: denied by the fallback, nothing reaches a shell, and the
    // previous run's events ride along — one line, since its result was returned whole.
    let (v, r) = call(&lab, "exec", json!({"argv": ["rm", "-rf", "x"]})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(v["status"], "denied");
    assert_eq!(v["reason"], "no-approver");
    assert_eq!(v["exitCode"], 75);
    assert!(
        v["message"].as_str().unwrap().contains("askFallback=deny"),
        "{v:#}"
    );
    assert_eq!(
        v["events"],
        json!([format!("Exec finished (node=gateway, id={first}, code=0)")])
    );
    assert_eq!(lab.gateway_shell.calls().len(), 1);
    // The session moves to the sandbox: the same command now reaches the sandbox's shell,
    // as written (the sandbox resolves it inside).
    let (v, _) = call(&lab, "session", json!({"command": "/exec host=sandbox"})).await;
    assert_eq!(v["ok"], true, "{v:#}");
    let (v, _) = call(&lab, "exec", json!({"argv": ["rm", "-rf", "x"]})).await;
    assert_eq!(v["status"], "finished", "{v:#}");
    assert_eq!(v["host"], "sandbox");
    assert_eq!(calls(&lab.sandbox_shell), vec!["exec rm -rf x"]);
    // Tool parameters cannot loosen the host file.
    let (v, _) = call(
        &lab,
        "exec",
        json!({"argv": ["rm", "y"], "host": "gateway", "security": "full", "ask": "off"}),
    )
    .await;
    assert_eq!(v["status"], "denied", "{v:#}");
    assert_eq!(lab.gateway_shell.calls().len(), 1);
    lab.client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_that_cannot_serve_a_request_refuse_it_with_one_spelling() {
    let lab = lab(false).await;
    for (args, reason) in [
        (
            json!({"argv": ["ls"], "host": "sandbox"}),
            "sandbox-unavailable",
        ),
        (json!({"argv": ["ls"], "host": "node"}), "no-node"),
    ] {
        let (v, r) = call(&lab, "exec", args.clone()).await;
        assert_eq!(r.is_error, Some(true), "{args}");
        assert_eq!(v["reason"], reason, "{v:#}");
        assert_eq!(v["decision"]["reason"], reason, "{v:#}");
        assert_eq!(v["exitCode"], 77);
    }
    assert!(lab.gateway_shell.calls().is_empty());
    assert!(lab.sandbox_shell.calls().is_empty());
    lab.client.cancel().await.unwrap();
}

/// A run's future is kept on the heap where the gateway starts it: every future above it
/// — the MCP call, its progress, rmcp's session and the HTTP server's connection — holds
/// the gateway's, and when that held the run itself (~70 KiB in a debug build) one more
/// field in a request overflowed a worker thread's 2 MiB stack. This holds it small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_exec_future_is_small_whatever_a_run_holds() {
    let lab = lab(false).await;
    let key = gateway::SessionKey {
        agent: "coder".into(),
        session: "s1".into(),
    };
    let request = runner::ExecRequest::new(
        "coder",
        "s1",
        policy::Command::Argv(vec!["/usr/bin/ls".into()]),
    );
    let exec = lab.gateway.exec(&key, request, std::future::pending());
    let size = std::mem::size_of_val(&exec);
    assert!(size <= 4096, "Gateway::exec's future is {size} bytes");
    drop(exec);
}
