//! Edits of `config.toml` that keep the operator's text: every comment, blank line, key
//! order and quoting outside the one setting edited stays as it was. Today that setting
//! is the node binding, `tools.exec.node`, global or of one agent (the web approver's
//! console sets and clears it).
//!
//! The edit is pure text in, text out; reading, locking and writing the file belong to
//! the caller. Two checks make it safe to write what comes back: the text must parse as
//! a config first (a file that does not is never rewritten), and the result must parse
//! to exactly the same config but for the binding asked for — anything else is an error
//! and nothing is returned to write.

use std::path::Path;

use toml_edit::{DocumentMut, Item, Table, TableLike, Value};

use super::{AgentConfig, Config};
use crate::PolicyError;
pub use crate::config_edit_error::ConfigEditError;

/// The version of a config file that does not exist.
pub const ABSENT_VERSION: &str = "absent";

/// The version an edit is based on: `sha256:<hex>` of the file's bytes, or
/// [`ABSENT_VERSION`] when there is no file.
pub fn version(bytes: Option<&[u8]>) -> String {
    use sha2::Digest as _;
    match bytes {
        Some(b) => format!("sha256:{}", crate::hex(&sha2::Sha256::digest(b))),
        None => ABSENT_VERSION.to_owned(),
    }
}

fn edit_error(file: &Path, error: ConfigEditError) -> PolicyError {
    PolicyError::ConfigEdit {
        file: file.to_path_buf(),
        error,
    }
}

/// The binding set at one level of `config`: the global `[tools.exec]` (`agent` none) or
/// agent `agent`'s own entry (`None` when it sets none or has no entry).
pub fn node_binding_at<'c>(config: &'c Config, agent: Option<&str>) -> Option<&'c str> {
    match agent {
        None => config.exec.node.as_deref(),
        Some(id) => config.agent(id).and_then(|a| a.exec.node.as_deref()),
    }
}

/// `config` with the binding at that level set to `node` (or removed).
fn with_binding(config: &Config, agent: Option<&str>, node: Option<&str>) -> Config {
    let mut next = config.clone();
    let node = node.map(str::to_owned);
    match agent {
        None => next.exec.node = node,
        Some(id) => match next.agents.iter_mut().find(|a| a.id == id) {
            Some(a) => a.exec.node = node,
            None if node.is_some() => next.agents.push(AgentConfig {
                id: id.to_owned(),
                exec: super::ExecSettings {
                    node,
                    ..Default::default()
                },
                ..Default::default()
            }),
            None => {}
        },
    }
    next
}

/// Set (`Some`) or remove (`None`) the node binding `tools.exec.node` — the global one
/// (`agent` none) or agent `agent`'s, adding an `[[agents.list]]` entry for an agent
/// the file does not list yet — in the config text `text` (read from `file`, named in
/// errors). Returns the new text (the same text when nothing changes).
///
/// Errors: `text` does not parse as a config (the parser's error, as for any load), the
/// node is empty or has control characters, or the edit could not be made without
/// changing anything else.
pub fn set_node_binding(
    text: &str,
    file: &Path,
    agent: Option<&str>,
    node: Option<&str>,
) -> Result<String, PolicyError> {
    let before = Config::parse(text, file)?;
    if let Some(n) = node
        && (n.trim().is_empty() || n.chars().any(char::is_control))
    {
        return Err(edit_error(
            file,
            ConfigEditError::NotANodeId { node: n.to_owned() },
        ));
    }
    if let Some(id) = agent
        && (id.trim().is_empty() || id.chars().any(char::is_control))
    {
        return Err(edit_error(
            file,
            ConfigEditError::NotAnAgentId {
                agent: id.to_owned(),
            },
        ));
    }
    if node_binding_at(&before, agent) == node {
        return Ok(text.to_owned());
    }
    let expected = with_binding(&before, agent, node);
    let same = |candidate: &str| Config::parse(candidate, file).is_ok_and(|c| c == expected);
    // Removing: take out the setting's own line, so the comments around it stay exactly
    // where they were (a tree edit would drop the comment lines above the key with it).
    if node.is_none()
        && let Some(cut) = without_setting_line(text, agent)
        && same(&cut)
    {
        return Ok(cut);
    }
    let edited = tree_edit(text, agent, node).map_err(|why| edit_error(file, why))?;
    if !same(&edited) {
        return Err(edit_error(file, ConfigEditError::ChangesMore));
    }
    Ok(edited)
}

/// The `[tools.exec]` table (or dotted/inline equivalent) of `parent`, if written.
fn exec_of(parent: &dyn TableLike) -> Option<&dyn TableLike> {
    parent
        .get("tools")
        .and_then(Item::as_table_like)?
        .get("exec")
        .and_then(Item::as_table_like)
}

fn has_id(table: &dyn TableLike, id: &str) -> bool {
    table.get("id").and_then(Item::as_str) == Some(id)
}

/// `text` without the line that sets the binding at that level, if it is written on a
/// line of its own (what the caller checks by parsing the result).
fn without_setting_line(text: &str, agent: Option<&str>) -> Option<String> {
    let doc = toml_edit::Document::parse(text).ok()?;
    let root: &dyn TableLike = doc.as_table();
    let exec = match agent {
        None => exec_of(root)?,
        Some(id) => {
            let list = root
                .get("agents")
                .and_then(Item::as_table_like)?
                .get("list")?;
            let entry: &dyn TableLike = match list {
                Item::ArrayOfTables(entries) => entries.iter().find(|t| has_id(*t, id))?,
                Item::Value(Value::Array(entries)) => entries
                    .iter()
                    .filter_map(Value::as_inline_table)
                    .find(|t| has_id(*t, id))?,
                _ => return None,
            };
            exec_of(entry)?
        }
    };
    let key = exec.key("node")?.span()?;
    let value = exec.get("node")?.span()?;
    let start = text[..key.start].rfind('\n').map_or(0, |i| i + 1);
    let end = text[value.end..]
        .find('\n')
        .map_or(text.len(), |i| value.end + i + 1);
    Some(format!("{}{}", &text[..start], &text[end..]))
}

/// The child table `key` of `parent`, made if missing: dotted under a dotted parent or
/// where `dotted` asks for it (`tools.exec.node = …` inside an agent's entry), else a
/// `[tools.exec]` section (`tools` itself implicit, no header of its own).
fn child<'a>(
    parent: &'a mut dyn TableLike,
    key: &str,
    dotted: bool,
) -> Result<&'a mut dyn TableLike, ConfigEditError> {
    if !parent.contains_key(key) {
        let mut table = Table::new();
        table.set_implicit(true);
        table.set_dotted(dotted || parent.is_dotted());
        parent.insert(key, Item::Table(table));
    }
    parent
        .get_mut(key)
        .and_then(Item::as_table_like_mut)
        .ok_or_else(|| ConfigEditError::NotATable {
            key: key.to_owned(),
        })
}

/// The entry of agent `id` in `[[agents.list]]`, added (with just its id) if missing.
fn agent_entry<'a>(
    doc: &'a mut DocumentMut,
    id: &str,
) -> Result<&'a mut dyn TableLike, ConfigEditError> {
    let root: &mut dyn TableLike = doc.as_table_mut();
    let agents = child(root, "agents", false)?;
    if !agents.contains_key("list") {
        agents.insert("list", Item::ArrayOfTables(Default::default()));
    }
    match agents.get_mut("list") {
        Some(Item::ArrayOfTables(entries)) => {
            if !entries.iter().any(|t| has_id(t, id)) {
                let mut entry = Table::new();
                entry.insert("id", toml_edit::value(id));
                entries.push(entry);
            }
            let i = entries
                .iter()
                .position(|t| has_id(t, id))
                .ok_or(ConfigEditError::NewAgentEntryMissing)?;
            entries
                .get_mut(i)
                .map(|t| t as &mut dyn TableLike)
                .ok_or(ConfigEditError::AgentEntryMissing)
        }
        Some(Item::Value(Value::Array(entries))) => {
            if !entries
                .iter()
                .filter_map(Value::as_inline_table)
                .any(|t| has_id(t, id))
            {
                let mut entry = toml_edit::InlineTable::new();
                entry.insert("id", Value::from(id));
                entries.push(entry);
            }
            entries
                .iter_mut()
                .filter_map(Value::as_inline_table_mut)
                .find(|t| has_id(*t, id))
                .map(|t| t as &mut dyn TableLike)
                .ok_or(ConfigEditError::AgentEntryMissing)
        }
        _ => Err(ConfigEditError::AgentsNotAList),
    }
}

/// The edit made on the parsed document (toml_edit keeps every untouched part as
/// written); a value replaced keeps its spacing and the comment after it.
fn tree_edit(
    text: &str,
    agent: Option<&str>,
    node: Option<&str>,
) -> Result<String, ConfigEditError> {
    let mut doc: DocumentMut = text.parse().map_err(|e| ConfigEditError::Unparsable {
        message: format!("{e}"),
    })?;
    let exec = match agent {
        None => {
            let tools = child(doc.as_table_mut(), "tools", false)?;
            child(tools, "exec", false)?
        }
        Some(id) => {
            let entry = agent_entry(&mut doc, id)?;
            let tools = child(entry, "tools", true)?;
            child(tools, "exec", true)?
        }
    };
    match node {
        Some(node) => match exec.get_mut("node") {
            Some(Item::Value(old)) => {
                let decor = old.decor().clone();
                let mut new = Value::from(node);
                *new.decor_mut() = decor;
                *old = new;
            }
            _ => {
                exec.insert("node", toml_edit::value(node));
            }
        },
        None => {
            exec.remove("node");
        }
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/home/u/.warden/config.toml";

    fn set(text: &str, agent: Option<&str>, node: Option<&str>) -> Result<String, PolicyError> {
        set_node_binding(text, Path::new(FILE), agent, node)
    }

    fn parse(text: &str) -> Config {
        Config::parse(text, Path::new(FILE)).unwrap()
    }

    const COMMENTED: &str = "# Warden on the build host — keep this header
[tools.exec]
host = \"gateway\"    # commands run here
security = \"allowlist\"

# the agents
[[agents.list]]
id = \"main\"   # the coding agent
# main's own limits
tools.exec.timeout = \"20m\"

[[agents.list]]
id = \"ops\"
[agents.list.tools.exec]
ask = \"always\" # ops always asks
";

    #[test]
    fn binding_an_agent_adds_one_line_and_keeps_every_comment() {
        let out = set(COMMENTED, Some("main"), Some("build")).unwrap();
        assert_eq!(
            out,
            COMMENTED.replace(
                "tools.exec.timeout = \"20m\"\n",
                "tools.exec.timeout = \"20m\"\ntools.exec.node = \"build\"\n"
            )
        );
        let c = parse(&out);
        assert_eq!(node_binding_at(&c, Some("main")), Some("build"));
        assert_eq!(node_binding_at(&c, None), None);
        // An agent whose tools.exec is a section of its own gets it there.
        let out = set(&out, Some("ops"), Some("gpu")).unwrap();
        assert!(
            out.ends_with("ask = \"always\" # ops always asks\nnode = \"gpu\"\n"),
            "{out}"
        );
        assert_eq!(node_binding_at(&parse(&out), Some("ops")), Some("gpu"));
    }

    #[test]
    fn an_agent_without_settings_or_entry_gets_them() {
        // main has an entry but no tools at all.
        let text = "[[agents.list]]\nid = \"main\" # me\n\n# trailing comment\n";
        let out = set(text, Some("main"), Some("build")).unwrap();
        assert_eq!(
            out,
            "[[agents.list]]\nid = \"main\" # me\ntools.exec.node = \"build\"\n\n# trailing comment\n"
        );
        // An agent only exec-approvals.json knows gets an entry.
        let out = set(&out, Some("new"), Some("gpu")).unwrap();
        assert!(
            out.starts_with("[[agents.list]]\nid = \"main\" # me\n"),
            "{out}"
        );
        assert!(out.contains("# trailing comment\n"), "{out}");
        let c = parse(&out);
        assert_eq!(node_binding_at(&c, Some("new")), Some("gpu"));
        assert_eq!(node_binding_at(&c, Some("main")), Some("build"));
        // Clearing an agent the file does not list changes nothing.
        assert_eq!(set(text, Some("nobody"), None).unwrap(), text);
    }

    #[test]
    fn the_global_binding_is_set_replaced_and_cleared_in_place() {
        let out = set(COMMENTED, None, Some("build")).unwrap();
        assert_eq!(
            out,
            COMMENTED.replace(
                "security = \"allowlist\"\n",
                "security = \"allowlist\"\nnode = \"build\"\n"
            )
        );
        // Replacing keeps the comment after the value and the spacing before it.
        let text = COMMENTED.replace(
            "security = \"allowlist\"\n",
            "# the binding\nnode   =   \"build\"   # the build box\nsecurity = \"allowlist\"\n",
        );
        let out = set(&text, None, Some("gpu-1")).unwrap();
        assert_eq!(
            out,
            text.replace("\"build\"   # the build", "\"gpu-1\"   # the build")
        );
        // Clearing takes out that line only: the comment above it stays.
        let out = set(&out, None, None).unwrap();
        assert_eq!(
            out,
            COMMENTED.replace(
                "security = \"allowlist\"\n",
                "# the binding\nsecurity = \"allowlist\"\n"
            )
        );
        assert_eq!(node_binding_at(&parse(&out), None), None);
    }

    #[test]
    fn a_file_without_tools_exec_gets_a_section_and_an_empty_one_too() {
        let text = "# only agents here\n[[agents.list]]\nid = \"main\"\n";
        let out = set(text, None, Some("build")).unwrap();
        assert_eq!(node_binding_at(&parse(&out), None), Some("build"));
        assert!(out.starts_with(text), "{out}");
        assert!(out.contains("[tools.exec]\nnode = \"build\"\n"), "{out}");
        let out = set("", None, Some("build")).unwrap();
        assert_eq!(out, "[tools.exec]\nnode = \"build\"\n");
        // Dotted at the top level stays dotted.
        let out = set("tools.exec.host = \"gateway\" # here\n", None, Some("b")).unwrap();
        assert_eq!(
            out,
            "tools.exec.host = \"gateway\" # here\ntools.exec.node = \"b\"\n"
        );
        assert_eq!(
            set(&out, None, None).unwrap(),
            "tools.exec.host = \"gateway\" # here\n"
        );
    }

    #[test]
    fn clearing_an_agent_binding_keeps_the_rest_of_its_entry() {
        let bound = set(COMMENTED, Some("main"), Some("build")).unwrap();
        let bound = set(&bound, Some("ops"), Some("gpu")).unwrap();
        let out = set(&bound, Some("main"), None).unwrap();
        let out = set(&out, Some("ops"), None).unwrap();
        assert_eq!(out, COMMENTED);
        // Inline tables are edited as values.
        let text = "agents.list = [{ id = \"main\", tools = { exec = { node = \"b\", ask = \"always\" } } }]\n";
        let out = set(text, Some("main"), None).unwrap();
        let c = parse(&out);
        assert_eq!(node_binding_at(&c, Some("main")), None);
        assert_eq!(c.agent("main").unwrap().exec.ask, Some(crate::Ask::Always));
        let out = set(&out, Some("main"), Some("c")).unwrap();
        assert_eq!(node_binding_at(&parse(&out), Some("main")), Some("c"));
    }

    #[test]
    fn a_file_that_does_not_parse_is_refused_and_bad_ids_too() {
        for bad in [
            "[tools.exec\nnode = \"x\"\n",
            "[tools.exec]\nnodes = \"x\"\n",
            "[tools.exec]\nnode = 3\n",
        ] {
            let e = set(bad, None, Some("build")).unwrap_err();
            assert!(
                matches!(
                    e,
                    PolicyError::ConfigSyntax { .. }
                        | PolicyError::UnknownKey { .. }
                        | PolicyError::InvalidValue { .. }
                ),
                "{bad:?}: {e}"
            );
            assert!(e.to_string().contains(FILE), "{e}");
        }
        for node in ["", "  ", "a\nb"] {
            let e = set(COMMENTED, None, Some(node)).unwrap_err();
            assert!(e.to_string().contains("is not a node id"), "{e}");
        }
        assert!(set(COMMENTED, Some(""), Some("b")).is_err());
    }

    #[test]
    fn hostile_ids_are_data_and_can_change_nothing_else() {
        // Names that would be TOML if pasted into the file: they land as quoted strings,
        // and the edited file means exactly the old one plus the binding.
        let mut edited_files = 0;
        for (agent, node) in [
            ("main\"\n[tools.exec]\nsecurity = \"full", "build"),
            ("a.b", "b\" security = \"full"),
            ("[[agents.list]]", "x]] host = \"gateway"),
            ("agent'quoted", "#not-a-comment"),
        ] {
            let result = set(COMMENTED, Some(agent), Some(node));
            if format!("{agent}{node}").contains('\n') {
                // A line break is no part of an id: refused outright.
                assert!(result.is_err(), "{agent:?}/{node:?} was written");
                continue;
            }
            let edited = result.unwrap_or_else(|e| panic!("{agent:?}/{node:?}: {e}"));
            let config = Config::parse(&edited, Path::new(FILE)).unwrap();
            let before = Config::parse(COMMENTED, Path::new(FILE)).unwrap();
            assert_eq!(
                config,
                with_binding(&before, Some(agent), Some(node)),
                "{agent:?}/{node:?} changed more than the binding:\n{edited}"
            );
            assert_eq!(node_binding_at(&config, Some(agent)), Some(node));
            assert_eq!(node_binding_at(&config, Some("main")), None, "{edited}");
            edited_files += 1;
        }
        assert_eq!(edited_files, 3);
    }

    #[test]
    fn setting_what_is_already_set_changes_nothing() {
        let bound = set(COMMENTED, Some("main"), Some("build")).unwrap();
        assert_eq!(set(&bound, Some("main"), Some("build")).unwrap(), bound);
        assert_eq!(set(COMMENTED, None, None).unwrap(), COMMENTED);
    }
}
