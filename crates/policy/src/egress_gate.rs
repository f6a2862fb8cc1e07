//! A run's egress rules as the sandbox proxy's gate ([`caps::AdmitConnection`]): deny
//! wins, a host the allow rules name is reached, a host no rule names is asked about
//! (the run's asker puts it to the approver, or refuses it), and what is not a host name
//! at all is refused unasked. The runner gives each proxied run the gate of its approved
//! plan's rules ([`crate::ResolvedEgress::gate`]); the composition root gives the sandbox
//! one from `[sandbox.egress]` for runs that carry none.

use std::sync::Arc;

use caps::Admission;

use crate::egress::{EgressRules, HostPattern, Verdict};

/// Rules that decide connections, and whose they are (said in every answer).
#[derive(Clone, Debug)]
pub struct RulesGate {
    rules: EgressRules,
    /// The agent whose `sandbox.egress` these are (`None`: the global `[sandbox.egress]`).
    agent: Option<String>,
}

impl RulesGate {
    /// A gate deciding by `rules`, the global `[sandbox.egress]` or (with `agent`) that
    /// agent's.
    pub fn new(rules: EgressRules, agent: Option<String>) -> Self {
        RulesGate { rules, agent }
    }

    /// As a run's options carry it.
    pub fn into_rules(self) -> caps::ConnectionRules {
        caps::ConnectionRules(Arc::new(self))
    }

    /// Where the rules were written, for the words of each answer.
    fn whose(&self) -> String {
        match &self.agent {
            None => "[sandbox.egress]".to_owned(),
            Some(id) => format!("agent {id}'s sandbox.egress"),
        }
    }
}

impl caps::AdmitConnection for RulesGate {
    fn admit(&self, host: &str, port: u16) -> Admission {
        match self.rules.verdict(host, port) {
            Verdict::Allowed(rule) => Admission::Allow {
                names_address: matches!(rule.host, HostPattern::Address(_)),
                rule: format!("{} allow {rule}", self.whose()),
            },
            Verdict::Denied(rule) => Admission::Refuse(format!("{} deny {rule}", self.whose())),
            // Only a real host name or address is put to a human (and could be stored).
            Verdict::NotAHost(why) => {
                Admission::Refuse(format!("{host:?} is not a host name or an address: {why}"))
            }
            Verdict::Unknown => Admission::Ask(match &self.agent {
                None => format!("no [sandbox.egress] allow rule names {host} on port {port}"),
                Some(_) => format!(
                    "no allow rule in {} names {host} on port {port}",
                    self.whose()
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::DomainRule;
    use caps::AdmitConnection;

    fn gate(allow: &[&str], deny: &[&str], agent: Option<&str>) -> RulesGate {
        let parse = |t: &[&str]| t.iter().map(|r| DomainRule::parse(r).unwrap()).collect();
        RulesGate::new(
            EgressRules {
                allow: parse(allow),
                deny: parse(deny),
            },
            agent.map(str::to_owned),
        )
    }

    #[test]
    fn deny_wins_unknown_is_asked_about_and_only_an_address_rule_names_an_address() {
        let g = gate(
            &["*.example.com", "10.0.0.5:8080"],
            &["bad.example.com"],
            None,
        );
        assert_eq!(
            g.admit("a.example.com", 443),
            Admission::Allow {
                rule: "[sandbox.egress] allow *.example.com".into(),
                names_address: false
            }
        );
        assert!(
            matches!(g.admit("bad.example.com", 443), Admission::Refuse(why) if why.contains("deny bad.example.com"))
        );
        assert!(
            matches!(g.admit("example.com", 443), Admission::Ask(why) if why.contains("no [sandbox.egress] allow rule"))
        );
        assert!(matches!(
            g.admit("10.0.0.5", 8080),
            Admission::Allow {
                names_address: true,
                ..
            }
        ));
        assert!(matches!(g.admit("10.0.0.5", 80), Admission::Ask(_)));
        // Junk is never put to a human.
        for junk in [
            "evil\u{1b}[2J.example",
            "a..b",
            "*.example.com",
            "under_score.example",
        ] {
            assert!(
                matches!(g.admit(junk, 443), Admission::Refuse(why) if why.contains("not a host name")),
                "{junk:?}"
            );
        }
    }

    #[test]
    fn an_agents_rules_say_whose_they_are() {
        let g = gate(&["pypi.org"], &["evil.pypi.org"], Some("ci"));
        assert_eq!(
            g.admit("pypi.org", 443),
            Admission::Allow {
                rule: "agent ci's sandbox.egress allow pypi.org".into(),
                names_address: false
            }
        );
        assert_eq!(
            g.admit("evil.pypi.org", 443),
            Admission::Refuse("agent ci's sandbox.egress deny evil.pypi.org".into())
        );
        assert_eq!(
            g.admit("example.com", 443),
            Admission::Ask(
                "no allow rule in agent ci's sandbox.egress names example.com on port 443".into()
            )
        );
    }
}
