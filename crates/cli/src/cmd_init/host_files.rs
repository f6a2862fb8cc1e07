//! The host's own files `warden init` writes: a commented `config.toml` that works as
//! written, and the approvals file's ceilings and everyday allowlist for each agent.
//! Both are planned first and compared with what is there, so a second run changes
//! nothing and a file the user changed is never rewritten without asking.

use std::path::{Path, PathBuf};

use approvals::{Ceilings, Store};
use policy::{Ask, AskFallback, RuleSpec, Security};

use super::choices::{Choices, Strictness, Transport};

/// Programs the `allowlist` and `ask` levels let agents run on the gateway host without
/// asking: they read and print, and their grammars refuse the options that would write
/// or run something else (`find -exec`, `sort -o`). Each is looked up on the trusted
/// PATH; one that is not installed is left out and named.
pub const EVERYDAY_PROGRAMS: &[&str] = &[
    "ls", "cat", "head", "tail", "wc", "grep", "sort", "uniq", "cut", "tr", "diff", "find", "pwd",
    "echo", "date", "stat",
];

/// `git` subcommands allowed the same way (each as `--arg SUBCOMMAND`).
pub const GIT_READ_SUBCOMMANDS: &[&str] = &["status", "diff", "log", "show"];

/// The `config.toml` for `choices`: every value spelled out, with what it means and
/// what else it could be.
pub fn config_text(choices: &Choices) -> String {
    let security = match choices.strictness {
        Strictness::Sandbox => "deny",
        Strictness::Allowlist | Strictness::Ask => "allowlist",
    };
    let ask = match choices.strictness {
        Strictness::Allowlist => "off",
        Strictness::Sandbox | Strictness::Ask => "on-miss",
    };
    let mut text = format!(
        r#"# Warden's configuration, written by `warden init` (strictness "{strictness}",
# clients over {transport}). Every key: docs/configuration.md. `warden doctor` checks
# it; `warden policy explain -- COMMAND` shows how a command would be decided.

[tools.exec]
# Where commands run unless a request says otherwise:
#   sandbox — an OS sandbox: no network, the workspace read-only until a human allows
#             a write (permission_mode below); gateway — directly on this machine, only
#             what `security` and exec-approvals.json allow; node — a paired machine.
host = "sandbox"
# Commands on the gateway host: deny | allowlist (what exec-approvals.json lists for
# the agent) | full. exec-approvals.json is the ceiling: it can only make this stricter.
security = "{security}"
# Ask a human: off | on-miss (when the allowlist does not cover a command) | always.
# Nobody answering means askFallback in exec-approvals.json (deny).
ask = "{ask}"
# Each command's time limit (a number of seconds, or "30s", "5m", "1h").
timeout = "5m"

[sandbox]
# readonly | approval (a refused write in the workspace is shown to a human; if
# allowed, the command runs again, writable) | unrestricted.
permission_mode = "approval"
# Sandboxed commands have no network. "proxy" lets them reach only the hosts
# listed under [sandbox.egress] (allow = ["pypi.org", "files.pythonhosted.org"]),
# through Warden's proxy; true gives them this machine's whole network.
network = false
# Writable paths default to the workspace each client starts Warden in:
# writable_paths = ["{workspace}"]
"#,
        strictness = choices.strictness.name(),
        transport = choices.transport.name(),
        workspace = toml_escape(&choices.workspace.to_string_lossy()),
    );
    text.push_str(
        "\n# One agent per client (and `main`: `warden exec` at this terminal): each has its\n# own allowlist in exec-approvals.json",
    );
    if choices.transport == Transport::Gateway {
        text.push_str("\n# and its own gateway credential (`warden gateway token --agent ID`)");
    }
    text.push_str(".\n");
    for agent in choices.agents() {
        text.push_str(&format!("[[agents.list]]\nid = \"{agent}\"\n"));
    }
    text
}

/// `s` inside a basic TOML string.
fn toml_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// What the approvals file should say for `choices`: the host-wide ceilings (none for
/// the sandbox-only level, which keeps the strict defaults) and each agent's rules.
pub struct ApprovalsPlan {
    /// The host-wide settings to set.
    pub ceilings: Ceilings,
    /// The rules every agent gets.
    pub rules: Vec<RuleSpec>,
    /// Everyday programs not found on the trusted PATH.
    pub missing: Vec<&'static str>,
    /// The agents.
    pub agents: Vec<&'static str>,
}

impl ApprovalsPlan {
    /// The plan for `choices`, looking programs up in `path_dirs`.
    pub fn new(choices: &Choices, path_dirs: &[PathBuf]) -> ApprovalsPlan {
        let mut plan = ApprovalsPlan {
            ceilings: Ceilings::default(),
            rules: Vec::new(),
            missing: Vec::new(),
            agents: choices.agents(),
        };
        if choices.strictness == Strictness::Sandbox {
            // The strict default, said explicitly: a file an earlier, looser init wrote
            // is then found to differ (and asked about) instead of silently kept.
            plan.ceilings.security = Some(Security::Deny);
            return plan;
        }
        plan.ceilings = Ceilings {
            security: Some(Security::Allowlist),
            ask: Some(if choices.strictness == Strictness::Ask {
                Ask::OnMiss
            } else {
                Ask::Off
            }),
            ask_fallback: Some(AskFallback::Deny),
        };
        for name in EVERYDAY_PROGRAMS {
            match find_program(name, path_dirs) {
                Some(path) => plan.rules.push(rule(&path, &[])),
                None => plan.missing.push(name),
            }
        }
        match find_program("git", path_dirs) {
            Some(git) => {
                for sub in GIT_READ_SUBCOMMANDS {
                    plan.rules.push(rule(&git, &[sub]));
                }
            }
            None => plan.missing.push("git"),
        }
        plan
    }

    /// The settings the file has that this plan would change (`key: now → planned`):
    /// set to something else by someone. Unset ones are simply set.
    pub fn conflicts(&self, current: &Ceilings) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |key: &str, now: Option<String>, want: Option<String>| {
            if let (Some(now), Some(want)) = (now, want)
                && now != want
            {
                out.push(format!("{key}: {now} → {want}"));
            }
        };
        check(
            "security",
            current.security.map(|v| v.to_string()),
            self.ceilings.security.map(|v| v.to_string()),
        );
        check(
            "ask",
            current.ask.map(|v| v.to_string()),
            self.ceilings.ask.map(|v| v.to_string()),
        );
        check(
            "askFallback",
            current.ask_fallback.map(|v| v.to_string()),
            self.ceilings.ask_fallback.map(|v| v.to_string()),
        );
        out
    }

    /// `ceilings` with the planned values put in the unset places only (what is applied
    /// when the user keeps their own settings).
    pub fn fill_unset(&self, current: &Ceilings) -> Ceilings {
        Ceilings {
            security: current.security.or(self.ceilings.security),
            ask: current.ask.or(self.ceilings.ask),
            ask_fallback: current.ask_fallback.or(self.ceilings.ask_fallback),
        }
    }

    /// Apply: the ceilings (`settings`, when they differ from the file's), then each
    /// agent's rules. Returns what changed, in words.
    pub fn apply(
        &self,
        store: &Store,
        settings: Ceilings,
        known_agents: &[String],
    ) -> anyhow::Result<Vec<String>> {
        let mut changed = Vec::new();
        let current = store.load()?.file.defaults.ceilings;
        if settings != current && settings != Ceilings::default() {
            let u = store.set_settings(None, settings, known_agents, true)?;
            if u.written {
                changed.push(format!(
                    "gateway host: security {}, ask {}, askFallback {}",
                    show(settings.security),
                    show(settings.ask),
                    show(settings.ask_fallback)
                ));
            }
        }
        for agent in &self.agents {
            if self.rules.is_empty() {
                continue;
            }
            let u = store.add_rules(agent, &self.rules, known_agents, true)?;
            if !u.value.is_empty() {
                changed.push(format!("{} allowlist entries for {agent}", u.value.len()));
            }
        }
        Ok(changed)
    }

    /// What applying with `settings` sets, in words (for a dry run).
    pub fn describe(&self, settings: Ceilings) -> String {
        let mut text = format!(
            "gateway host: security {}, ask {}, askFallback {}",
            show(settings.security),
            show(settings.ask),
            show(settings.ask_fallback)
        );
        if !self.rules.is_empty() {
            text.push_str(&format!(
                "; {} allowlist entries for each of {}",
                self.rules.len(),
                self.agents.join(", ")
            ));
        }
        text
    }

    /// True if applying would change nothing in `file` and nothing there differs from
    /// the plan.
    pub fn is_applied(&self, file: &approvals::ApprovalsFile) -> bool {
        let current = &file.defaults.ceilings;
        let settings_done =
            self.fill_unset(current) == *current && self.conflicts(current).is_empty();
        let rules_done = self.rules.is_empty()
            || self.agents.iter().all(|agent| {
                file.agents.get(*agent).is_some_and(|entry| {
                    self.rules
                        .iter()
                        .all(|r| entry.allowlist.iter().any(|e| e.rule().same_rule(r)))
                })
            });
        settings_done && rules_done
    }
}

fn show<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unset".to_owned(), |v| v.to_string())
}

/// An allowlist rule for `program`, its arguments starting with `args` (none: any).
fn rule(program: &Path, args: &[&str]) -> RuleSpec {
    RuleSpec {
        pattern: program.to_string_lossy().into_owned(),
        args: (!args.is_empty()).then(|| args.iter().map(|a| (*a).to_owned()).collect()),
        args_match: policy::ArgsMatch::Prefix,
        allow_flags: Vec::new(),
        examples: policy::Examples::default(),
    }
}

/// `name` in the first of `dirs` that has it as an executable file, as `command -v`
/// finds it.
pub fn find_program(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    dirs.iter().map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd_init::choices::Client;

    fn choices(strictness: Strictness, transport: Transport) -> Choices {
        Choices {
            workspace: PathBuf::from("/home/u/my \"proj\""),
            clients: vec![Client::Claude, Client::Codex],
            transport,
            strictness,
        }
    }

    #[test]
    fn every_config_init_writes_is_valid_and_says_what_it_chose() {
        for strictness in [Strictness::Sandbox, Strictness::Allowlist, Strictness::Ask] {
            for transport in [Transport::Stdio, Transport::Gateway] {
                let text = config_text(&choices(strictness, transport));
                let config = policy::Config::parse(&text, Path::new("/w/config.toml"))
                    .unwrap_or_else(|e| panic!("{e}\n{text}"));
                let ids: Vec<&str> = config.agents.iter().map(|a| a.id.as_str()).collect();
                assert_eq!(ids, ["claude", "codex", "main"]);
                let want = if strictness == Strictness::Sandbox {
                    Security::Deny
                } else {
                    Security::Allowlist
                };
                assert_eq!(config.exec.security, Some(want), "{text}");
                // Nothing in it names a path that must exist.
                assert!(config.sandbox.writable_paths.is_empty(), "{text}");
            }
        }
    }

    #[test]
    fn the_plan_finds_programs_on_the_path_and_names_the_missing() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["ls", "git"] {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        std::fs::write(dir.path().join("cat"), "not executable").unwrap();
        let plan = ApprovalsPlan::new(
            &choices(Strictness::Ask, Transport::Stdio),
            &[dir.path().to_path_buf()],
        );
        let patterns: Vec<String> = plan.rules.iter().map(|r| r.describe()).collect();
        assert_eq!(
            plan.rules.len(),
            1 + GIT_READ_SUBCOMMANDS.len(),
            "{patterns:?}"
        );
        assert!(plan.missing.contains(&"cat"), "{:?}", plan.missing);
        assert!(!plan.missing.contains(&"git"));
        let sandbox_only = ApprovalsPlan::new(
            &choices(Strictness::Sandbox, Transport::Stdio),
            &[dir.path().to_path_buf()],
        );
        assert!(sandbox_only.rules.is_empty());
        assert_eq!(sandbox_only.ceilings.security, Some(Security::Deny));
        assert_eq!(sandbox_only.ceilings.ask, None);
    }

    #[test]
    fn settings_someone_set_otherwise_are_conflicts_and_unset_ones_are_filled() {
        let plan = ApprovalsPlan::new(&choices(Strictness::Ask, Transport::Stdio), &[]);
        let current = Ceilings {
            security: Some(Security::Full),
            ask: None,
            ask_fallback: Some(AskFallback::Deny),
        };
        assert_eq!(plan.conflicts(&current), ["security: full → allowlist"]);
        let filled = plan.fill_unset(&current);
        assert_eq!(filled.security, Some(Security::Full));
        assert_eq!(filled.ask, Some(Ask::OnMiss));
    }
}
