//! The JSON Schema in `docs/protocol-bridge.schema.json` describes what this build
//! sends: every message type is there, and a sample of each serializes to exactly the
//! fields the schema allows, with every field it requires. (A structural check, so the
//! document cannot drift from the code unnoticed.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use bridge::message::{GatewayReply, Msg, NodeAuth, Opening};
use serde_json::{Value, json};

fn schema() -> Value {
    serde_json::from_str(include_str!("../../../docs/protocol-bridge.schema.json")).unwrap()
}

/// Every object schema in the document that fixes a `type`, by that type.
fn by_type(v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(map) => {
            if let Some(t) = map
                .get("properties")
                .and_then(|p| p.get("type"))
                .and_then(|t| t.get("const"))
                .and_then(Value::as_str)
            {
                out.insert(t.to_owned(), v.clone());
            }
            map.values().for_each(|x| by_type(x, out));
        }
        Value::Array(items) => items.iter().for_each(|x| by_type(x, out)),
        _ => {}
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn every_message_this_build_sends_matches_the_schema() {
    let mut types = BTreeMap::new();
    by_type(&schema(), &mut types);
    let samples: Vec<Value> = vec![
        serde_json::to_value(Opening::Hello {
            protocol: "warden-bridge".into(),
            versions: vec![1],
            node_id: "n".into(),
            display_name: Some("N".into()),
            nonce: "00".repeat(32),
            capabilities: vec![],
        })
        .unwrap(),
        serde_json::to_value(Opening::PairRequest {
            protocol: "warden-bridge".into(),
            versions: vec![1],
            node_id: "n".into(),
            display_name: None,
            public_key: "00".repeat(32),
            capabilities: vec![],
        })
        .unwrap(),
        serde_json::to_value(GatewayReply::Challenge {
            version: 1,
            nonce: "00".repeat(32),
        })
        .unwrap(),
        serde_json::to_value(GatewayReply::Welcome {
            proof: "00".repeat(32),
        })
        .unwrap(),
        serde_json::to_value(GatewayReply::Error {
            code: "revoked".into(),
            message: "m".into(),
        })
        .unwrap(),
        serde_json::to_value(GatewayReply::PairPending {
            code: bridge::requests::pairing_code(&"ab".repeat(32)).unwrap(),
            expires_at_ms: 1,
        })
        .unwrap(),
        serde_json::to_value(GatewayReply::PairApproved {
            public_key: "00".repeat(32),
        })
        .unwrap(),
        serde_json::to_value(GatewayReply::PairRejected {
            message: "m".into(),
        })
        .unwrap(),
        serde_json::to_value(NodeAuth::Auth {
            proof: "00".repeat(32),
        })
        .unwrap(),
        serde_json::to_value(Msg::Invoke {
            id: 1,
            command: "system.run".into(),
            params: json!({}),
        })
        .unwrap(),
        serde_json::to_value(Msg::InvokeResult {
            id: 1,
            ok: Some(json!({})),
            error: None,
        })
        .unwrap(),
        serde_json::to_value(Msg::ExecStarted { run_id: "r".into() }).unwrap(),
        serde_json::to_value(Msg::ExecFinished {
            run_id: "r".into(),
            code: 0,
            signal: Some(9),
            timed_out: false,
            cancelled: false,
            tail: String::new(),
        })
        .unwrap(),
        serde_json::to_value(Msg::ExecDenied {
            run_id: "r".into(),
            reason: policy::DenyReason::SecurityDeny,
        })
        .unwrap(),
        serde_json::to_value(Msg::ExecCancelled { run_id: "r".into() }).unwrap(),
        serde_json::to_value(Msg::ExecOutput {
            run_id: "r".into(),
            data: "aGk=".into(),
        })
        .unwrap(),
        serde_json::to_value(Msg::ExecInput {
            run_id: "r".into(),
            data: "aGk=".into(),
        })
        .unwrap(),
        serde_json::to_value(Msg::ExecInputTaken {
            run_id: "r".into(),
            bytes: 2,
        })
        .unwrap(),
        serde_json::to_value(Msg::ExecEof { run_id: "r".into() }).unwrap(),
        serde_json::to_value(Msg::ExecSignal {
            run_id: "r".into(),
            signal: "INT".into(),
        })
        .unwrap(),
        serde_json::to_value(Msg::ExecResize {
            run_id: "r".into(),
            rows: 24,
            cols: 80,
        })
        .unwrap(),
        serde_json::to_value(Msg::Cancel { id: 1 }).unwrap(),
        serde_json::to_value(Msg::Heartbeat {}).unwrap(),
    ];
    let mut seen = BTreeSet::new();
    for sample in &samples {
        let t = sample["type"].as_str().unwrap().to_owned();
        let s = types
            .get(&t)
            .unwrap_or_else(|| panic!("{t} is not in the schema"));
        let allowed = keys(&s["properties"]);
        let required: BTreeSet<String> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect();
        let have = keys(sample);
        assert!(have.is_subset(&allowed), "{t}: {have:?} ⊄ {allowed:?}");
        assert!(
            required.is_subset(&have),
            "{t}: requires {required:?}, has {have:?}"
        );
        seen.insert(t);
    }
    let documented: BTreeSet<String> = types.keys().cloned().collect();
    assert_eq!(
        seen, documented,
        "the schema and the code list the same message types"
    );
}

#[test]
fn a_run_result_matches_the_schema_fields() {
    let s = schema();
    let result = s["$defs"]["runResult"].clone();
    let sample = bridge::message::RunResult {
        run_id: "r".into(),
        security: policy::Sourced {
            value: policy::Security::Allowlist,
            source: policy::Source::HostFile,
        },
        ask: policy::Sourced {
            value: policy::Ask::OnMiss,
            source: policy::Source::ToolParam,
        },
        ask_fallback: policy::Sourced {
            value: policy::AskFallback::Deny,
            source: policy::Source::Default,
        },
        decision: bridge::message::WireDecision::Deny {
            reason: policy::DenyReason::NoApprover,
            rule: "x".into(),
        },
        executed: None,
        outcome: bridge::message::WireOutcome::Denied {
            reason: policy::DenyReason::NoApprover,
            rule: "x".into(),
        },
        notices: vec!["x".into()],
    };
    let v = serde_json::to_value(&sample).unwrap();
    assert!(keys(&v).is_subset(&keys(&result["properties"])));
    let sources: Vec<Value> = result["properties"]["security"]["properties"]["source"]["enum"]
        .as_array()
        .unwrap()
        .clone();
    for field in ["security", "ask", "askFallback"] {
        assert!(
            sources.contains(&v[field]["source"]),
            "{field}: {}",
            v[field]
        );
    }
}

#[test]
fn a_run_request_is_the_exec_request_type_and_the_schema_says_so() {
    let s = schema();
    // The document's exec request is the very schema the type generates (the MCP exec
    // tool publishes the same one).
    let documented = &s["$defs"]["execArgs"];
    let generated = Value::Object(policy::ExecArgs::schema().clone());
    assert_eq!(
        documented,
        &generated,
        "docs/protocol-bridge.schema.json $defs.execArgs must be:\n{}",
        serde_json::to_string_pretty(&generated).unwrap()
    );
    let params = bridge::message::RunParams {
        run_id: "r".into(),
        agent: "a".into(),
        session: "s".into(),
        request: policy::ExecArgs {
            security: Some(policy::Security::Allowlist),
            ask: Some(policy::Ask::OnMiss),
            timeout: Some(1.5),
            ..policy::ExecArgs::new(policy::Command::Shell("true".into()))
        },
        stream: true,
        notices: true,
    };
    let v = serde_json::to_value(&params).unwrap();
    let run = &s["$defs"]["runParams"];
    assert_eq!(keys(&v), keys(&run["properties"]));
    assert_eq!(run["properties"]["request"]["$ref"], "#/$defs/execArgs");
    // What a gateway sends, a node reads back unchanged.
    let back: bridge::message::RunParams = serde_json::from_value(v).unwrap();
    assert_eq!(back, params);
}
