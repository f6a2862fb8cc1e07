//! A run's egress rules as the sandbox proxy's gate ([`caps::AdmitConnection`]): deny
//! wins, a host the allow rules name is reached, a host no rule names is asked about
//! (the run's asker puts it to the approver, or refuses it), and what is not a host name
//! at all is refused unasked. The runner gives each proxied run the gate of its approved
//! plan's rules ([`crate::ResolvedEgress::gate`]); the composition root gives the sandbox
//! one from `[sandbox.egress]` for runs that carry none.

use std::sync::Arc;

use caps::Admission;

use crate::egress::{DomainRule, EgressRules, HostPattern, Verdict};

/// Rules that decide connections, and whose they are (said in every answer).
#[derive(Clone, Debug)]
pub struct RulesGate {
    /// `None`: the rules did not read back, and every host is refused.
    rules: Option<EgressRules>,
    /// The agent whose `sandbox.egress` these are (`None`: the global `[sandbox.egress]`).
    agent: Option<String>,
    /// The request's own rules, which only narrow (made once, not per connection).
    request: Option<Narrowing>,
}

/// A request's narrowing: its deny rules, and its allow list as a filter.
#[derive(Clone, Debug)]
struct Narrowing {
    /// Its allow list (empty when it has none) and deny list, as rules.
    rules: EgressRules,
    /// Whether it has an allow list: then a host it does not name is refused.
    only_named: bool,
}

impl RulesGate {
    /// A gate deciding by `rules`, the global `[sandbox.egress]` or (with `agent`) that
    /// agent's.
    pub fn new(rules: EgressRules, agent: Option<String>) -> Self {
        RulesGate {
            rules: Some(rules),
            agent,
            request: None,
        }
    }

    /// Narrowed by a request's own rules (`RequestEgress::rules`): a host its deny rules
    /// name, or its allow list (when it has one) does not, is refused before the host's
    /// rules are looked at — so never asked about, and never reached by `egressAllow`.
    pub fn narrowed(mut self, (allow, deny): (Option<Vec<DomainRule>>, Vec<DomainRule>)) -> Self {
        self.request = Some(Narrowing {
            only_named: allow.is_some(),
            rules: EgressRules {
                allow: allow.unwrap_or_default(),
                deny,
            },
        });
        self
    }

    /// A gate that refuses every host: for rules that did not read back (a plan from
    /// elsewhere), which are never used with a rule dropped.
    pub fn refusing_all() -> Self {
        RulesGate {
            rules: None,
            agent: None,
            request: None,
        }
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
        let Some(rules) = &self.rules else {
            return Admission::Refuse(
                "the run's egress rules did not read back: nothing is reached".into(),
            );
        };
        // The request's narrowing first: deny rules as rules, the allow list as a
        // filter (an empty list: nothing at all).
        if let Some(request) = &self.request {
            match request.rules.verdict(host, port) {
                Verdict::Denied(rule) => {
                    return Admission::Refuse(format!("the request's egress deny {rule}"));
                }
                Verdict::Unknown if request.only_named => {
                    return Admission::Refuse(format!(
                        "the request's egress allow names no {host} on port {port}"
                    ));
                }
                // Junk is refused below, the same way with or without a request.
                Verdict::Allowed(_) | Verdict::Unknown | Verdict::NotAHost(_) => {}
            }
        }
        match rules.verdict(host, port) {
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

    /// A name is looked up exactly when some port of it would be reached: every port a
    /// rule names, and one no rule names, are put to [`Self::admit`] — so the request's
    /// narrowing, deny rules and their ports decide a lookup as they decide connections.
    /// What `admit` would ask about is refused (nobody is asked about a lookup).
    fn admit_name(&self, host: &str) -> Admission {
        if host.parse::<std::net::IpAddr>().is_ok() {
            return Admission::Refuse(format!("{host} is an address, not a name to look up"));
        }
        let mut ports = std::collections::BTreeSet::new();
        let mut note = |rules: &EgressRules| {
            ports.extend(rules.allow.iter().chain(&rules.deny).filter_map(|r| r.port));
        };
        if let Some(rules) = &self.rules {
            note(rules);
        }
        if let Some(request) = &self.request {
            note(&request.rules);
        }
        if let Some(unnamed) = (1..=u16::MAX).find(|p| !ports.contains(p)) {
            ports.insert(unnamed);
        }
        let mut refused = None;
        for port in ports {
            match self.admit(host, port) {
                Admission::Allow { rule, .. } => {
                    return Admission::Allow {
                        rule,
                        names_address: false,
                    };
                }
                Admission::Refuse(why) => {
                    refused.get_or_insert(why);
                }
                Admission::Ask(_) => {}
            }
        }
        Admission::Refuse(refused.unwrap_or_else(|| {
            format!(
                "no allow rule in {} names {host}, and lookups are never asked about",
                self.whose()
            )
        }))
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

    /// A request's own rules only narrow: outside its allow list nothing is reached or
    /// asked about (not even what the host's rules allow), inside it the host's rules
    /// decide as before (allowed, denied, or asked), and its deny rules refuse.
    #[test]
    fn a_requests_rules_only_narrow() {
        let parse = |t: &[&str]| t.iter().map(|r| DomainRule::parse(r).unwrap()).collect();
        let g = gate(&["pypi.org", "*.pythonhosted.org"], &["evil.test"], None).narrowed((
            Some(parse(&["pypi.org", "evil.test", "new.example"])),
            parse(&["pypi.org:80"]),
        ));
        assert!(matches!(g.admit("pypi.org", 443), Admission::Allow { .. }));
        assert_eq!(
            g.admit("pypi.org", 80),
            Admission::Refuse("the request's egress deny pypi.org:80".into())
        );
        assert_eq!(
            g.admit("files.pythonhosted.org", 443),
            Admission::Refuse(
                "the request's egress allow names no files.pythonhosted.org on port 443".into()
            )
        );
        // Named by the request: the host's deny still wins, and an unknown host is asked.
        assert!(
            matches!(g.admit("evil.test", 443), Admission::Refuse(why) if why.contains("[sandbox.egress] deny"))
        );
        assert!(matches!(g.admit("new.example", 443), Admission::Ask(_)));
        assert!(
            matches!(g.admit("a..b", 443), Admission::Refuse(why) if why.contains("not a host name"))
        );
        // An empty allow list: nothing at all.
        let none = gate(&["pypi.org"], &[], None).narrowed((Some(Vec::new()), Vec::new()));
        assert!(matches!(none.admit("pypi.org", 443), Admission::Refuse(_)));
        // Only a deny list: the host's rules decide the rest.
        let deny_only = gate(&["pypi.org"], &[], None).narrowed((None, parse(&["*.bad.example"])));
        assert!(matches!(
            deny_only.admit("pypi.org", 443),
            Admission::Allow { .. }
        ));
        assert!(matches!(
            deny_only.admit("a.bad.example", 443),
            Admission::Refuse(_)
        ));
        assert!(matches!(deny_only.admit("b.test", 443), Admission::Ask(_)));
    }

    /// A name is looked up only as the rules allow it, narrowed by the request, and
    /// never asked about: what a connection would ask about, a lookup refuses.
    #[test]
    fn a_lookup_is_answered_only_for_a_name_the_rules_allow() {
        let parse = |t: &[&str]| t.iter().map(|r| DomainRule::parse(r).unwrap()).collect();
        let g = gate(
            &["pypi.org", "*.pythonhosted.org"],
            &["evil.pythonhosted.org"],
            None,
        );
        assert_eq!(
            g.admit_name("pypi.org"),
            Admission::Allow {
                rule: "[sandbox.egress] allow pypi.org".into(),
                names_address: false
            }
        );
        assert!(matches!(
            g.admit_name("files.pythonhosted.org"),
            Admission::Allow { .. }
        ));
        assert!(
            matches!(g.admit_name("evil.pythonhosted.org"), Admission::Refuse(why) if why.contains("deny"))
        );
        assert!(
            matches!(g.admit_name("secret-data.example"), Admission::Refuse(why) if why.contains("never asked about")),
            "what a connection would ask about"
        );
        assert!(matches!(g.admit_name("a..b"), Admission::Refuse(_)));
        let narrowed = g.narrowed((Some(parse(&["pypi.org"])), Vec::new()));
        assert!(matches!(
            narrowed.admit_name("pypi.org"),
            Admission::Allow { .. }
        ));
        assert!(
            matches!(narrowed.admit_name("files.pythonhosted.org"), Admission::Refuse(why) if why.contains("the request's egress allow"))
        );
        // Ports count: a request denying the one port the host allows leaves nothing to
        // look up; one denying another port does not.
        let on_443 = || gate(&["*.example.com:443"], &[], None);
        let denied_443 = on_443().narrowed((None, parse(&["*.example.com:443"])));
        assert!(matches!(
            denied_443.admit_name("a.example.com"),
            Admission::Refuse(_)
        ));
        let denied_80 = on_443().narrowed((None, parse(&["*.example.com:80"])));
        assert!(matches!(
            denied_80.admit_name("a.example.com"),
            Admission::Allow { .. }
        ));
        assert!(
            matches!(on_443().admit_name("10.0.0.5"), Admission::Refuse(_)),
            "an address"
        );
        let deny = gate(&["pypi.org"], &[], None).narrowed((None, parse(&["pypi.org"])));
        assert!(matches!(deny.admit_name("pypi.org"), Admission::Refuse(_)));
        assert!(matches!(
            RulesGate::refusing_all().admit_name("pypi.org"),
            Admission::Refuse(_)
        ));
    }

    /// Rules that do not read back (a plan from elsewhere) refuse everything: no rule
    /// is ever dropped in a way that could allow more.
    #[test]
    fn unreadable_rules_refuse_everything() {
        let bad = crate::ResolvedEgress {
            allow: vec!["pypi.org".into()],
            deny: vec!["not a rule".into()],
            ..Default::default()
        };
        assert_eq!(bad.rules(), None);
        assert!(
            matches!(bad.gate().0.admit("pypi.org", 443), Admission::Refuse(why) if why.contains("did not read back"))
        );
        let good = crate::ResolvedEgress {
            allow: vec!["pypi.org".into()],
            ..Default::default()
        };
        assert!(matches!(
            good.gate().0.admit("pypi.org", 443),
            Admission::Allow { .. }
        ));
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
