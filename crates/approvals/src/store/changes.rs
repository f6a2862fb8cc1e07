//! What an edit of the approvals file changed, in words, for the record: settings,
//! agents, allowlist entries, `egressAllow` rules, the approver's socket and token
//! (named, never shown).
//! An edit that only updates entries' last-use fields changes no policy and is not
//! described.

use crate::file::{AgentEntry, ApprovalsFile, Ceilings};

/// The policy `before` → `after` changed, or none if only usage fields differ.
pub fn describe(before: &ApprovalsFile, after: &ApprovalsFile) -> Option<String> {
    let mut parts = Vec::new();
    ceilings(
        "defaults",
        &before.defaults.ceilings,
        &after.defaults.ceilings,
        &mut parts,
    );
    let (socket_before, socket_after) = (before.socket.as_ref(), after.socket.as_ref());
    let token = |s: Option<&crate::file::SocketSettings>| s.and_then(|s| s.token.clone());
    match (token(socket_before), token(socket_after)) {
        (None, Some(_)) => parts.push("approver token created".to_owned()),
        (Some(_), None) => parts.push("approver token removed".to_owned()),
        (Some(a), Some(b)) if a != b => parts.push("approver token replaced".to_owned()),
        _ => {}
    }
    let path = |s: Option<&crate::file::SocketSettings>| s.and_then(|s| s.path.clone());
    if path(socket_before) != path(socket_after) {
        parts.push(format!(
            "socket.path: {} → {}",
            path(socket_before).unwrap_or_else(|| "default".into()),
            path(socket_after).unwrap_or_else(|| "default".into())
        ));
    }
    for (id, entry) in &before.agents {
        if !after.agents.contains_key(id) {
            parts.push(format!(
                "agent {id} removed ({} entries)",
                entry.allowlist.len()
            ));
        }
    }
    let empty = AgentEntry::default();
    for (id, entry) in &after.agents {
        let old = before.agents.get(id);
        if old.is_none() {
            parts.push(format!("agent {id} added"));
        }
        let old = old.unwrap_or(&empty);
        ceilings(
            &format!("agents.{id}"),
            &old.ceilings,
            &entry.ceilings,
            &mut parts,
        );
        for e in &entry.allowlist {
            if !old.allowlist.iter().any(|o| o.rule().same_rule(&e.rule())) {
                parts.push(format!("{id} allowlist + {}", e.rule().describe()));
            }
        }
        for o in &old.allowlist {
            if !entry
                .allowlist
                .iter()
                .any(|e| e.rule().same_rule(&o.rule()))
            {
                parts.push(format!("{id} allowlist - {}", o.rule().describe()));
            }
        }
        for rule in entry
            .egress_allow
            .iter()
            .filter(|r| !old.egress_allow.contains(r))
        {
            parts.push(format!("{id} egressAllow + {rule}"));
        }
        for rule in old
            .egress_allow
            .iter()
            .filter(|r| !entry.egress_allow.contains(r))
        {
            parts.push(format!("{id} egressAllow - {rule}"));
        }
    }
    if before.extra != after.extra || before.defaults.extra != after.defaults.extra {
        parts.push("fields this version does not know changed".to_owned());
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn ceilings(scope: &str, before: &Ceilings, after: &Ceilings, parts: &mut Vec<String>) {
    let show = |v: Option<String>| v.unwrap_or_else(|| "unset".into());
    let mut one = |key: &str, a: Option<String>, b: Option<String>| {
        if a != b {
            parts.push(format!("{scope}.{key}: {} → {}", show(a), show(b)));
        }
    };
    one(
        "security",
        before.security.map(|v| v.to_string()),
        after.security.map(|v| v.to_string()),
    );
    one(
        "ask",
        before.ask.map(|v| v.to_string()),
        after.ask.map(|v| v.to_string()),
    );
    one(
        "askFallback",
        before.ask_fallback.map(|v| v.to_string()),
        after.ask_fallback.map(|v| v.to_string()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{AllowlistEntry, SocketSettings};

    fn entry(pattern: &str) -> AllowlistEntry {
        serde_json::from_value(serde_json::json!({ "pattern": pattern })).unwrap()
    }

    #[test]
    fn settings_agents_entries_and_the_token_are_described_never_its_value() {
        let before = ApprovalsFile::default();
        let mut after = before.clone();
        after.defaults.ceilings.security = Some(policy::Security::Allowlist);
        after.socket = Some(SocketSettings {
            token: Some("s3cret-token".into()),
            ..SocketSettings::default()
        });
        let mut agent = AgentEntry::default();
        agent.allowlist.push(entry("/usr/bin/ls"));
        after.agents.insert("coder".into(), agent);
        let text = describe(&before, &after).unwrap();
        assert!(
            text.contains("defaults.security: unset → allowlist"),
            "{text}"
        );
        assert!(text.contains("approver token created"), "{text}");
        assert!(text.contains("agent coder added"), "{text}");
        assert!(text.contains("coder allowlist + /usr/bin/ls"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
        let mut stored = after.clone();
        let coder = stored.agents.get_mut("coder").unwrap();
        coder.egress_allow.push("pypi.org:443".into());
        assert_eq!(
            describe(&after, &stored).as_deref(),
            Some("coder egressAllow + pypi.org:443")
        );
        assert_eq!(
            describe(&stored, &after).as_deref(),
            Some("coder egressAllow - pypi.org:443")
        );
    }

    #[test]
    fn a_use_of_an_entry_changes_no_policy() {
        let mut before = ApprovalsFile::default();
        let mut agent = AgentEntry::default();
        agent.allowlist.push(entry("/usr/bin/ls"));
        before.agents.insert("coder".into(), agent);
        let mut after = before.clone();
        let used = &mut after.agents.get_mut("coder").unwrap().allowlist[0];
        used.last_used_at = Some(1);
        used.last_used_command = Some("ls -la".into());
        assert_eq!(describe(&before, &after), None);
    }
}
