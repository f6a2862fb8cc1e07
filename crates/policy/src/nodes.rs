//! Node selection (the pure part of product spec §6.3): exact node id, then remote IP,
//! then normalised display name, then a node-id prefix of at least six characters. A tie
//! inside the winning class is an ambiguity error naming the candidates; a binding
//! restricts the agent to one node.

use crate::PolicyError;

/// Shortest node-id prefix accepted as a query.
pub const MIN_ID_PREFIX: usize = 6;

/// What the gateway knows about a connected node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node id.
    pub id: String,
    /// The remote address it connected from.
    pub remote_ip: Option<String>,
    /// Its human-chosen display name.
    pub display_name: Option<String>,
}

/// Case-folded, trimmed, internal whitespace, `_` and `-` runs collapsed to one `-`.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::new();
    let mut dash = false;
    for c in name.trim().chars() {
        if c.is_whitespace() || c == '_' || c == '-' {
            dash = !out.is_empty();
        } else {
            if dash {
                out.push('-');
                dash = false;
            }
            out.extend(c.to_lowercase());
        }
    }
    out
}

fn err(msg: String) -> PolicyError {
    PolicyError::NodeSelection(msg)
}

fn candidates(nodes: &[&NodeInfo]) -> String {
    nodes
        .iter()
        .map(|n| n.id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A test for one match class.
type NodePredicate<'q> = Box<dyn Fn(&NodeInfo) -> bool + 'q>;

/// Resolve `query` among `nodes` by class, strongest class first.
fn resolve_query<'a>(nodes: &'a [NodeInfo], query: &str) -> Result<&'a NodeInfo, PolicyError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(err("empty node name".into()));
    }
    let normalized = normalize_name(query);
    let classes: [(&str, NodePredicate<'_>); 4] = [
        ("node id", Box::new(|n: &NodeInfo| n.id == query)),
        (
            "remote IP",
            Box::new(|n: &NodeInfo| n.remote_ip.as_deref() == Some(query)),
        ),
        (
            "display name",
            Box::new(|n: &NodeInfo| {
                n.display_name.as_deref().map(normalize_name) == Some(normalized.clone())
            }),
        ),
        (
            "node id prefix",
            Box::new(|n: &NodeInfo| query.len() >= MIN_ID_PREFIX && n.id.starts_with(query)),
        ),
    ];
    for (class, matches) in &classes {
        let found: Vec<&NodeInfo> = nodes.iter().filter(|n| matches(n)).collect();
        match found.as_slice() {
            [] => continue,
            [one] => return Ok(one),
            many => {
                return Err(err(format!(
                    "node {query:?} is ambiguous: it matches the {class} of {}",
                    candidates(many)
                )));
            }
        }
    }
    Err(err(format!("no connected node matches {query:?}")))
}

/// Pick the node for an exec: `query` (the request's or session's node) within the
/// agent's `binding`, or the single connected node when neither is given.
pub fn select_node<'a>(
    nodes: &'a [NodeInfo],
    query: Option<&str>,
    binding: Option<&str>,
) -> Result<&'a NodeInfo, PolicyError> {
    let bound = binding.map(|b| resolve_query(nodes, b)).transpose()?;
    match (query, bound) {
        (Some(q), Some(bound)) => {
            let chosen = resolve_query(nodes, q)?;
            if chosen.id != bound.id {
                return Err(err(format!(
                    "this agent is bound to node {} and may not use {}",
                    bound.id, chosen.id
                )));
            }
            Ok(chosen)
        }
        (Some(q), None) => resolve_query(nodes, q),
        (None, Some(bound)) => Ok(bound),
        (None, None) => match nodes {
            [] => Err(err("no node is connected".into())),
            [one] => Ok(one),
            many => Err(err(format!(
                "several nodes are connected ({}); name one with node=",
                candidates(&many.iter().collect::<Vec<_>>())
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, ip: &str, name: &str) -> NodeInfo {
        NodeInfo {
            id: id.into(),
            remote_ip: Some(ip.into()),
            display_name: Some(name.into()),
        }
    }

    fn fleet() -> Vec<NodeInfo> {
        vec![
            node("a1b2c3d4e5", "10.0.0.1", "Build Box"),
            node("a1b2c3ffff", "10.0.0.2", "GPU box"),
            node("zz9", "10.0.0.3", "a1b2c3d4e5"),
            node("10.0.0.9", "10.0.0.1", "weird"),
        ]
    }

    #[test]
    fn classes_are_tried_strongest_first() {
        let f = fleet();
        // Exact id beats the display name "a1b2c3d4e5" of zz9.
        assert_eq!(
            select_node(&f, Some("a1b2c3d4e5"), None).unwrap().id,
            "a1b2c3d4e5"
        );
        // Exact id "10.0.0.9" even though it looks like an IP.
        assert_eq!(
            select_node(&f, Some("10.0.0.9"), None).unwrap().id,
            "10.0.0.9"
        );
        assert_eq!(
            select_node(&f, Some("10.0.0.2"), None).unwrap().id,
            "a1b2c3ffff"
        );
        assert_eq!(
            select_node(&f, Some("  build_box "), None).unwrap().id,
            "a1b2c3d4e5"
        );
        assert_eq!(
            select_node(&f, Some("a1b2c3f"), None).unwrap().id,
            "a1b2c3ffff"
        );
    }

    #[test]
    fn ties_and_short_prefixes_are_errors() {
        let f = fleet();
        let e = select_node(&f, Some("10.0.0.1"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ambiguous") && e.contains("a1b2c3d4e5") && e.contains("10.0.0.9"),
            "{e}"
        );
        let e = select_node(&f, Some("a1b2c3"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("ambiguous"), "{e}");
        assert!(
            select_node(&f, Some("a1b2c"), None).is_err(),
            "prefixes under 6 characters never match"
        );
        assert!(select_node(&f, Some("nope"), None).is_err());
    }

    #[test]
    fn bindings_restrict_and_defaults_need_exactly_one_node() {
        let f = fleet();
        assert_eq!(
            select_node(&f, None, Some("GPU box")).unwrap().id,
            "a1b2c3ffff"
        );
        assert!(select_node(&f, Some("zz9"), Some("GPU box")).is_err());
        assert_eq!(
            select_node(&f, Some("10.0.0.2"), Some("a1b2c3ffff"))
                .unwrap()
                .id,
            "a1b2c3ffff"
        );
        assert!(
            select_node(&f, None, None)
                .unwrap_err()
                .to_string()
                .contains("several")
        );
        assert_eq!(select_node(&f[..1], None, None).unwrap().id, "a1b2c3d4e5");
        assert!(select_node(&[], None, None).is_err());
    }

    #[test]
    fn names_normalise() {
        assert_eq!(normalize_name("  Build   Box_2 "), "build-box-2");
        assert_eq!(normalize_name("--x--"), "x");
    }
}
