//! Remote edits of a node's approvals file may only tighten it (security invariant 3):
//! no looser security, ask or askFallback for the defaults or any agent (an agent the
//! new file drops falls back to the new defaults, which must then be no looser for it
//! either), no allowlist entry the node does not already have, and the approver socket
//! stays where it is (moving it could hand the questions to another listener).

use approvals::ApprovalsFile;

/// Every way `incoming` would loosen `current`; empty when it only tightens.
pub fn loosenings(current: &ApprovalsFile, incoming: &ApprovalsFile) -> Vec<String> {
    let mut out = Vec::new();
    let agents: Vec<Option<&str>> = std::iter::once(None)
        .chain(current.agents.keys().map(|a| Some(a.as_str())))
        .chain(incoming.agents.keys().map(|a| Some(a.as_str())))
        .collect();
    for agent in agents {
        let (now, next) = (current.ceiling_for(agent), incoming.ceiling_for(agent));
        let whose = agent.map_or("defaults".to_owned(), |a| format!("agents.{a}"));
        if next.security > now.security {
            out.push(format!(
                "{whose}: security {} → {} is looser",
                now.security, next.security
            ));
        }
        if next.ask < now.ask {
            out.push(format!("{whose}: ask {} → {} asks less", now.ask, next.ask));
        }
        if next.ask_fallback > now.ask_fallback {
            out.push(format!(
                "{whose}: askFallback {} → {} is looser",
                now.ask_fallback, next.ask_fallback
            ));
        }
    }
    for (agent, entry) in &incoming.agents {
        let known = current.patterns_for(Some(agent));
        for e in &entry.allowlist {
            if !known.contains(&e.pattern) {
                out.push(format!(
                    "agents.{agent}: new allowlist entry {:?}",
                    e.pattern
                ));
            }
        }
    }
    let socket = |f: &ApprovalsFile| f.socket.as_ref().and_then(|s| s.path.clone());
    if socket(current) != socket(incoming) {
        out.push("socket.path may not be changed remotely".to_owned());
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use approvals::{AgentEntry, AllowlistEntry};
    use policy::{Ask, Security};

    fn file(json: &str) -> ApprovalsFile {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn tightening_passes_and_every_loosening_is_named() {
        let current = file(
            r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss"},
                "agents":{"main":{"security":"full","allowlist":[{"pattern":"/bin/true"}]}}}"#,
        );
        let mut tighter = current.clone();
        tighter.agents.get_mut("main").unwrap().ceilings.security = Some(Security::Allowlist);
        tighter.agents.get_mut("main").unwrap().allowlist.clear();
        tighter.defaults.ceilings.ask = Some(Ask::Always);
        assert!(loosenings(&current, &tighter).is_empty());

        let mut looser = current.clone();
        looser.defaults.ceilings.security = Some(Security::Full);
        looser
            .agents
            .get_mut("main")
            .unwrap()
            .allowlist
            .push(AllowlistEntry::new("/bin/sh"));
        looser.agents.insert("new".into(), AgentEntry::default());
        looser.defaults.ceilings.ask = Some(Ask::Off);
        let got = loosenings(&current, &looser).join("\n");
        assert!(got.contains("defaults: security allowlist → full"), "{got}");
        assert!(got.contains("new allowlist entry \"/bin/sh\""), "{got}");
        assert!(got.contains("ask on-miss → off"), "{got}");

        // Dropping an agent whose entry was stricter than the defaults loosens it.
        let strict = file(
            r#"{"version":1,"defaults":{"security":"full"},"agents":{"x":{"security":"deny"}}}"#,
        );
        let dropped = file(r#"{"version":1,"defaults":{"security":"full"}}"#);
        assert!(loosenings(&strict, &dropped).join("").contains("agents.x"));
        let moved = file(r#"{"version":1,"socket":{"path":"/tmp/evil.sock"}}"#);
        assert!(!loosenings(&file(r#"{"version":1}"#), &moved).is_empty());
    }
}
