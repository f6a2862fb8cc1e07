//! Each agent client's configuration for Warden, as `warden init` prints it and — when
//! the user agrees — writes it into the workspace: merged into a file that is already
//! there (entries added, nothing of the user's removed), never replacing a different
//! `warden` entry.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::choices::{Client, Transport};

/// The gateway's MCP endpoint as clients are told to reach it.
pub const GATEWAY_URL: &str = "http://127.0.0.1:7878/mcp";

/// What one client needs.
pub struct ClientSetup {
    /// The client.
    pub client: Client,
    /// Files in the workspace, with what Warden's part of each is.
    pub files: Vec<Wanted>,
    /// Steps only the user can take (a setting in the client's interface, a flag).
    pub steps: Vec<String>,
}

/// Warden's part of one client file.
pub struct Wanted {
    /// Where the file goes.
    pub path: PathBuf,
    /// Warden's entries, as a document of the file's format.
    pub part: Part,
}

/// A document fragment to merge.
pub enum Part {
    /// JSON; objects at the dotted `atomic` paths are compared whole (a server entry is
    /// one thing: it is never half-merged into a different one).
    Json {
        value: Value,
        atomic: Vec<&'static str>,
    },
    /// TOML (Codex); tables merged the same way, comments kept.
    Toml {
        value: toml::Table,
        atomic: Vec<&'static str>,
    },
}

impl Part {
    /// The fragment as the text to paste.
    pub fn text(&self) -> String {
        match self {
            Part::Json { value, .. } => {
                serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
            }
            Part::Toml { value, .. } => toml::to_string(value).unwrap_or_default(),
        }
    }
}

/// The outcome of merging a part into a file's current text.
#[derive(Debug, PartialEq, Eq)]
pub struct Merged {
    /// The new text (the current text when nothing changes).
    pub text: String,
    /// True if the text changes.
    pub changed: bool,
    /// Entries already there with another value, left alone (`path: theirs`).
    pub conflicts: Vec<String>,
}

/// The setup of `client`: the command that starts `warden` (for stdio), or the gateway.
pub fn setup(client: Client, transport: Transport, warden: &str, workspace: &Path) -> ClientSetup {
    let agent = client.agent();
    let args = json!([
        "mcp",
        "--agent",
        agent,
        "--workspace",
        workspace.to_string_lossy()
    ]);
    let in_ws = |rel: &str| workspace.join(rel);
    let token_hint = format!("export WARDEN_TOKEN=\"$(warden gateway token --agent {agent})\"");
    match client {
        Client::Claude => {
            let server = match transport {
                Transport::Stdio => json!({"type": "stdio", "command": warden, "args": args}),
                Transport::Gateway => json!({
                    "type": "http", "url": GATEWAY_URL,
                    "headers": {"Authorization": "Bearer ${WARDEN_TOKEN}"}
                }),
            };
            let mut steps = vec![
                "Claude Code applies the project's permissions only in a workspace it trusts: run `claude` there once and accept; headless, pass `claude -p --allowedTools mcp__warden --disallowedTools Bash \"…\"`".to_owned(),
            ];
            if transport == Transport::Gateway {
                steps.insert(
                    0,
                    format!("start Claude Code with its credential: {token_hint}"),
                );
            }
            ClientSetup {
                client,
                files: vec![
                    Wanted {
                        path: in_ws(".mcp.json"),
                        part: Part::Json {
                            value: json!({"mcpServers": {"warden": server}}),
                            atomic: vec!["mcpServers.warden"],
                        },
                    },
                    Wanted {
                        path: in_ws(".claude/settings.json"),
                        part: Part::Json {
                            // The project's servers need Claude Code's one-time approval unless
                            // the settings name them.
                            value: json!({
                                "enabledMcpjsonServers": ["warden"],
                                "permissions": {"allow": ["mcp__warden"], "deny": ["Bash"]}
                            }),
                            atomic: vec![],
                        },
                    },
                ],
                steps,
            }
        }
        Client::Codex => {
            let mut server = toml::Table::new();
            match transport {
                Transport::Stdio => {
                    server.insert("command".into(), warden.into());
                    let args: Vec<toml::Value> = args
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str().map(toml::Value::from))
                        .collect();
                    server.insert("args".into(), toml::Value::Array(args));
                }
                Transport::Gateway => {
                    server.insert("url".into(), GATEWAY_URL.into());
                    server.insert("bearer_token_env_var".into(), "WARDEN_TOKEN".into());
                }
            }
            server.insert("default_tools_approval_mode".into(), "approve".into());
            let mut servers = toml::Table::new();
            servers.insert("warden".into(), toml::Value::Table(server));
            let mut features = toml::Table::new();
            features.insert("shell_tool".into(), false.into());
            let mut value = toml::Table::new();
            value.insert("mcp_servers".into(), toml::Value::Table(servers));
            value.insert("features".into(), toml::Value::Table(features));
            let mut steps = vec![
                "Codex reads a project's .codex/config.toml only in a trusted project (or copy it into ~/.codex/config.toml)".to_owned(),
            ];
            if transport == Transport::Gateway {
                steps.insert(0, format!("start Codex with its credential: {token_hint}"));
            }
            ClientSetup {
                client,
                files: vec![Wanted {
                    path: in_ws(".codex/config.toml"),
                    part: Part::Toml {
                        value,
                        atomic: vec!["mcp_servers.warden"],
                    },
                }],
                steps,
            }
        }
        Client::Cursor => {
            let server = match transport {
                Transport::Stdio => json!({"command": warden, "args": args}),
                Transport::Gateway => json!({
                    "url": GATEWAY_URL,
                    "headers": {"Authorization": "Bearer ${env:WARDEN_TOKEN}"}
                }),
            };
            let mut steps = vec![
                "in Cursor's agent settings, put Warden's tools on the auto-run (MCP) allowlist and keep the terminal tool off it".to_owned(),
            ];
            if transport == Transport::Gateway {
                steps.insert(0, format!("start Cursor with its credential: {token_hint}"));
            }
            ClientSetup {
                client,
                files: vec![Wanted {
                    path: in_ws(".cursor/mcp.json"),
                    part: Part::Json {
                        value: json!({"mcpServers": {"warden": server}}),
                        atomic: vec!["mcpServers.warden"],
                    },
                }],
                steps,
            }
        }
        Client::Vscode => {
            let value = match transport {
                Transport::Stdio => json!({
                    "servers": {"warden": {"type": "stdio", "command": warden, "args": args}}
                }),
                Transport::Gateway => json!({
                    "servers": {"warden": {
                        "type": "http", "url": GATEWAY_URL,
                        "headers": {"Authorization": "Bearer ${input:warden-token}"}
                    }},
                    "inputs": [{
                        "id": "warden-token", "type": "promptString",
                        "description": format!("warden gateway token --agent {agent}"),
                        "password": true
                    }]
                }),
            };
            ClientSetup {
                client,
                files: vec![Wanted {
                    path: in_ws(".vscode/mcp.json"),
                    part: Part::Json {
                        value,
                        atomic: vec!["servers.warden"],
                    },
                }],
                steps: vec![
                    "approve Warden's tools for the workspace when VS Code first asks (\"Always allow\") and deselect the built-in terminal tools in the chat's tool picker".to_owned(),
                ],
            }
        }
        Client::Other => {
            let how = match transport {
                Transport::Stdio => format!(
                    "have the client start `{warden} mcp --agent {agent} --workspace {}` (stdio)",
                    workspace.display()
                ),
                Transport::Gateway => format!(
                    "have the client POST to {GATEWAY_URL} with `Authorization: Bearer <token>`, the token from `warden gateway token --agent {agent}`"
                ),
            };
            ClientSetup {
                client,
                files: Vec::new(),
                steps: vec![
                    how,
                    "let the client run Warden's tools without its own prompt and switch off its built-in shell: Warden does the approving".to_owned(),
                ],
            }
        }
    }
}

/// Merge `part` into a file's `current` text (none: no file yet). With `replace`, a
/// different entry at an atomic path (a `warden` server) is replaced by Warden's;
/// other values the user set are never changed.
pub fn merge(current: Option<&str>, part: &Part, replace: bool) -> Result<Merged, String> {
    match part {
        Part::Json { value, atomic } => {
            let mut doc: Value = match current {
                None => Value::Object(serde_json::Map::new()),
                Some(text) if text.trim().is_empty() => Value::Object(serde_json::Map::new()),
                Some(text) => serde_json::from_str(text).map_err(|e| {
                    format!(
                        "it is not plain JSON ({e}); comments and trailing commas are not merged"
                    )
                })?,
            };
            if !doc.is_object() {
                return Err("its top level is not a JSON object".into());
            }
            let mut conflicts = Vec::new();
            let changed = merge_json(&mut doc, value, "", (atomic, replace), &mut conflicts);
            let text = match (changed, current) {
                (false, Some(text)) => text.to_owned(),
                _ => serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n",
            };
            Ok(Merged {
                text,
                changed,
                conflicts,
            })
        }
        Part::Toml { value, atomic } => {
            let mut doc: toml_edit::DocumentMut = current
                .unwrap_or("")
                .parse()
                .map_err(|e| format!("it is not valid TOML: {e}"))?;
            let mut conflicts = Vec::new();
            let changed = merge_toml(
                doc.as_table_mut(),
                value,
                "",
                (atomic, replace),
                &mut conflicts,
            );
            Ok(Merged {
                text: if changed {
                    doc.to_string()
                } else {
                    current.unwrap_or("").to_owned()
                },
                changed,
                conflicts,
            })
        }
    }
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Add `want` into `have`; true if anything was added.
fn merge_json(
    have: &mut Value,
    want: &Value,
    path: &str,
    atomic: Atomic<'_>,
    conflicts: &mut Vec<String>,
) -> bool {
    if atomic.0.contains(&path) {
        return merge_atomic(have, want, path, atomic.1, conflicts);
    }
    match (have, want) {
        (Value::Object(have), Value::Object(want)) => {
            let mut changed = false;
            for (key, value) in want {
                let sub = child_path(path, key);
                match have.get_mut(key) {
                    None => {
                        have.insert(key.clone(), value.clone());
                        changed = true;
                    }
                    Some(existing) => {
                        changed |= merge_json(existing, value, &sub, atomic, conflicts)
                    }
                }
            }
            changed
        }
        (Value::Array(have), Value::Array(want)) => {
            let mut changed = false;
            for item in want {
                if !have.contains(item) {
                    have.push(item.clone());
                    changed = true;
                }
            }
            changed
        }
        (have, want) => merge_atomic(have, want, path, false, conflicts),
    }
}

/// The dotted paths compared whole, and whether a different one there is replaced.
type Atomic<'a> = (&'a [&'a str], bool);

/// `want` at `path` as one value: the same, replaced (with `replace`), or a conflict.
fn merge_atomic(
    have: &mut Value,
    want: &Value,
    path: &str,
    replace: bool,
    conflicts: &mut Vec<String>,
) -> bool {
    if have == want {
        false
    } else if replace {
        *have = want.clone();
        true
    } else {
        conflicts.push(format!("{path} is {have}"));
        false
    }
}

/// Add `want` into `have` (comments and layout kept); true if anything was added.
fn merge_toml(
    have: &mut toml_edit::Table,
    want: &toml::Table,
    path: &str,
    atomic: Atomic<'_>,
    conflicts: &mut Vec<String>,
) -> bool {
    let mut changed = false;
    for (key, value) in want {
        let sub = child_path(path, key);
        match (have.get_mut(key), value) {
            (None, _) => {
                have.insert(key, to_edit_item(value));
                changed = true;
            }
            (Some(toml_edit::Item::Table(table)), toml::Value::Table(inner))
                if !atomic.0.contains(&sub.as_str()) =>
            {
                changed |= merge_toml(table, inner, &sub, atomic, conflicts);
            }
            (Some(existing), _) => {
                let theirs = existing.to_string();
                let same = parse_item(&theirs, existing).is_some_and(|v| &v == value);
                if same {
                } else if atomic.1 && atomic.0.contains(&sub.as_str()) {
                    *existing = to_edit_item(value);
                    changed = true;
                } else {
                    conflicts.push(format!("{sub} is set otherwise"));
                }
            }
        }
    }
    changed
}

/// A TOML value as a `toml_edit` item (a table as a `[table]`, not inline).
fn to_edit_item(value: &toml::Value) -> toml_edit::Item {
    match value {
        toml::Value::Table(t) => {
            let mut table = toml_edit::Table::new();
            for (k, v) in t {
                table.insert(k, to_edit_item(v));
            }
            // `[mcp_servers.warden]` without an empty `[mcp_servers]` above it.
            table.set_implicit(t.values().all(toml::Value::is_table));
            toml_edit::Item::Table(table)
        }
        other => {
            let text = format!("v = {other}");
            let doc: toml_edit::DocumentMut = text.parse().unwrap_or_default();
            doc.get("v").cloned().unwrap_or(toml_edit::Item::None)
        }
    }
}

/// An existing item as a plain TOML value, to compare with Warden's.
fn parse_item(text: &str, item: &toml_edit::Item) -> Option<toml::Value> {
    match item {
        toml_edit::Item::Table(_) => toml::from_str::<toml::Table>(text)
            .ok()
            .map(toml::Value::Table),
        toml_edit::Item::Value(v) => {
            let doc: toml::Table = toml::from_str(&format!("v = {v}")).ok()?;
            doc.get("v").cloned()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude_stdio() -> ClientSetup {
        setup(Client::Claude, Transport::Stdio, "warden", Path::new("/w"))
    }

    #[test]
    fn a_new_file_is_warden_s_part_and_a_second_merge_changes_nothing() {
        let setup = claude_stdio();
        let part = &setup.files[0].part;
        let first = merge(None, part, false).unwrap();
        assert!(first.changed && first.conflicts.is_empty());
        let v: Value = serde_json::from_str(&first.text).unwrap();
        assert_eq!(v["mcpServers"]["warden"]["args"][2], "claude");
        let again = merge(Some(&first.text), part, false).unwrap();
        assert!(!again.changed, "{again:?}");
        assert_eq!(again.text, first.text);
    }

    #[test]
    fn the_user_s_entries_stay_in_order_and_a_different_warden_entry_is_never_replaced() {
        let setup = claude_stdio();
        let theirs =
            r#"{"z": 1, "mcpServers": {"other": {"command": "x"}, "warden": {"command": "old"}}}"#;
        let merged = merge(Some(theirs), &setup.files[0].part, false).unwrap();
        assert!(!merged.changed, "{merged:?}");
        assert_eq!(merged.text, theirs);
        assert_eq!(merged.conflicts.len(), 1, "{merged:?}");
        assert!(merged.conflicts[0].starts_with("mcpServers.warden"));
        // With replace: Warden's own entry is replaced, the user's others stay.
        let replaced = merge(Some(theirs), &setup.files[0].part, true).unwrap();
        let v: Value = serde_json::from_str(&replaced.text).unwrap();
        assert!(replaced.changed && replaced.conflicts.is_empty());
        assert_eq!(v["mcpServers"]["warden"]["args"][2], "claude");
        assert_eq!(v["mcpServers"]["other"]["command"], "x");
        assert_eq!(v["z"], 1);
        // Settings: arrays gain Warden's entries, keep the user's, in their order.
        let settings =
            r#"{"permissions": {"allow": ["Read"], "deny": ["WebFetch"]}, "model": "x"}"#;
        let merged = merge(Some(settings), &setup.files[1].part, true).unwrap();
        let v: Value = serde_json::from_str(&merged.text).unwrap();
        assert_eq!(v["permissions"]["allow"], json!(["Read", "mcp__warden"]));
        assert_eq!(v["permissions"]["deny"], json!(["WebFetch", "Bash"]));
        assert_eq!(v["model"], "x");
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["permissions", "model", "enabledMcpjsonServers"]);
    }

    #[test]
    fn jsonc_is_refused_not_mangled() {
        let setup = setup(
            Client::Vscode,
            Transport::Gateway,
            "warden",
            Path::new("/w"),
        );
        let err = merge(
            Some("{ // mine\n \"servers\": {} }"),
            &setup.files[0].part,
            false,
        )
        .unwrap_err();
        assert!(err.contains("not plain JSON"), "{err}");
    }

    #[test]
    fn codex_toml_keeps_comments_and_is_idempotent() {
        let setup = setup(
            Client::Codex,
            Transport::Stdio,
            "/opt/warden",
            Path::new("/w"),
        );
        let part = &setup.files[0].part;
        let theirs = "# my settings\nmodel = \"o3\"\n\n[features]\n# keep\nweb_search = true\n";
        let merged = merge(Some(theirs), part, false).unwrap();
        assert!(merged.changed && merged.conflicts.is_empty(), "{merged:?}");
        assert!(
            merged.text.starts_with("# my settings\nmodel = \"o3\""),
            "{}",
            merged.text
        );
        assert!(merged.text.contains("# keep"), "{}", merged.text);
        let parsed: toml::Table = toml::from_str(&merged.text).unwrap();
        assert_eq!(
            parsed["features"]["shell_tool"],
            toml::Value::Boolean(false)
        );
        assert_eq!(
            parsed["mcp_servers"]["warden"]["command"].as_str(),
            Some("/opt/warden")
        );
        let again = merge(Some(&merged.text), part, false).unwrap();
        assert!(!again.changed && again.conflicts.is_empty(), "{again:?}");
        // Their own shell_tool = true is left alone and reported.
        let on = "[features]\nshell_tool = true\n";
        let merged = merge(Some(on), part, true).unwrap();
        assert_eq!(merged.conflicts, ["features.shell_tool is set otherwise"]);
        assert!(merged.text.contains("shell_tool = true"));
    }
}
