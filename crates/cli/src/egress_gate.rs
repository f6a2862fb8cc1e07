//! `sandbox.network = "proxy"` composed: the sandbox's network mode, the plan's view of
//! it, and the gate that decides each connection by `[sandbox.egress]` — the policy
//! crate's rules adapted to the sandbox proxy's `Gate` (neither crate knows the other).

use std::sync::Arc;

use policy::egress::{EgressRules, HostPattern, Verdict};
use policy::{Config, PlannedNetwork, SandboxNetwork};
use sandbox::egress::proxy::{Admission, Gate, Limits, SystemResolver};

/// The sandbox's network mode for `config`.
pub fn sandbox_network(config: &Config) -> sandbox::Network {
    match config.sandbox.network {
        SandboxNetwork::Off => sandbox::Network::Off,
        SandboxNetwork::On => sandbox::Network::On,
        SandboxNetwork::Proxy => sandbox::Network::Proxy,
    }
}

/// What a sandbox built from `config` gives a run, as plans say it (the runner refuses a
/// plan that says otherwise).
pub fn planned_network(config: &Config) -> PlannedNetwork {
    PlannedNetwork::of_sandbox(&config.sandbox)
}

/// How a sandbox built from `config` decides its runs' connections.
pub fn egress(config: &Config) -> sandbox::Egress {
    sandbox::Egress {
        gate: Arc::new(RulesGate(config.sandbox.egress.clone())),
        resolver: Arc::new(SystemResolver),
        limits: Limits::default(),
    }
}

/// `[sandbox.egress]` as the proxy's gate: deny wins, and a host no rule names is asked
/// about (the run's asker puts it to the approver, or refuses it).
struct RulesGate(EgressRules);

impl Gate for RulesGate {
    fn admit(&self, host: &str, port: u16) -> Admission {
        match self.0.verdict(host, port) {
            Verdict::Allowed(rule) => Admission::Allow {
                names_address: matches!(rule.host, HostPattern::Address(_)),
                rule: format!("[sandbox.egress] allow {rule}"),
            },
            Verdict::Denied(rule) => Admission::Refuse(format!("[sandbox.egress] deny {rule}")),
            // Only a real host name or address is put to a human (and could be stored).
            Verdict::NotAHost(why) => {
                Admission::Refuse(format!("{host:?} is not a host name or an address: {why}"))
            }
            Verdict::Unknown => Admission::Ask(format!(
                "no [sandbox.egress] allow rule names {host} on port {port}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::egress::DomainRule;

    fn gate(allow: &[&str], deny: &[&str]) -> RulesGate {
        let parse = |t: &[&str]| t.iter().map(|r| DomainRule::parse(r).unwrap()).collect();
        RulesGate(EgressRules {
            allow: parse(allow),
            deny: parse(deny),
        })
    }

    #[test]
    fn deny_wins_unknown_is_asked_about_and_only_an_address_rule_names_an_address() {
        let g = gate(&["*.example.com", "10.0.0.5:8080"], &["bad.example.com"]);
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
}
