//! Changes to the store: allowlist entries added and removed, usage recorded, the whole
//! document replaced (compare-and-swap), settings set — each one read-modify-write under
//! the lock, validated before anything is written.

use policy::RuleSpec;

use super::{Store, StoreError, USAGE_TIME_GRANULARITY_MS, Updated};
use crate::file::{
    AgentEntry, AllowlistEntry, ApprovalsFile, Ceilings, EVERY_AGENT, REDACTED, SocketSettings,
};

/// Levenshtein distance, for "did you mean" suggestions.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `agent`'s entry in `file`, which must be there.
fn known_agent_entry<'a>(
    file: &'a mut ApprovalsFile,
    agent: &str,
) -> Result<&'a mut AgentEntry, StoreError> {
    file.agents
        .get_mut(agent)
        .ok_or_else(|| StoreError::UnknownAgent {
            agent: agent.to_owned(),
            suggestion: None,
        })
}

/// `agent`'s entry in `file`, added if it is not there. A new agent gets a plain id (as a
/// gateway credential does); one already in the file keeps whatever it was written with.
fn agent_entry<'a>(
    file: &'a mut ApprovalsFile,
    agent: &str,
) -> Result<&'a mut AgentEntry, StoreError> {
    if !file.agents.contains_key(agent) && !policy::is_agent_id(agent) {
        return Err(StoreError::Invalid {
            problems: vec![format!(
                "invalid agent id {agent:?}: {}",
                policy::AGENT_ID_RULE
            )],
        });
    }
    Ok(file.agents.entry(agent.to_owned()).or_default())
}

impl Store {
    /// Add `patterns` to `agent`'s allowlist (duplicates are skipped). An agent that is
    /// neither in the file nor in `known_agents` is refused unless `create_agent`.
    pub fn add_patterns(
        &self,
        agent: &str,
        patterns: &[String],
        known_agents: &[String],
        create_agent: bool,
    ) -> Result<Updated<Vec<String>>, StoreError> {
        self.add_patterns_based(None, agent, patterns, known_agents, create_agent)
    }

    /// [`Store::add_patterns`], only if the file still has hash `base_hash` (else
    /// [`StoreError::Conflict`], nothing written): for editors that show a version and
    /// must not apply a change to another one.
    pub fn add_patterns_based(
        &self,
        base_hash: Option<&str>,
        agent: &str,
        patterns: &[String],
        known_agents: &[String],
        create_agent: bool,
    ) -> Result<Updated<Vec<String>>, StoreError> {
        let rules: Vec<RuleSpec> = patterns.iter().map(RuleSpec::program).collect();
        self.add_rules_based(base_hash, agent, &rules, known_agents, create_agent)
    }

    /// Add `rules` (patterns with argument rules) to `agent`'s allowlist; a rule already
    /// stored is skipped. Returns the rules added, described in one line each. Every rule
    /// is checked first — pattern, argument patterns, examples against this host's
    /// profiles — and nothing is written if one fails.
    pub fn add_rules(
        &self,
        agent: &str,
        rules: &[RuleSpec],
        known_agents: &[String],
        create_agent: bool,
    ) -> Result<Updated<Vec<String>>, StoreError> {
        self.add_rules_based(None, agent, rules, known_agents, create_agent)
    }

    /// [`Store::add_rules`], only if the file still has hash `base_hash` (else
    /// [`StoreError::Conflict`], nothing written).
    pub fn add_rules_based(
        &self,
        base_hash: Option<&str>,
        agent: &str,
        rules: &[RuleSpec],
        known_agents: &[String],
        create_agent: bool,
    ) -> Result<Updated<Vec<String>>, StoreError> {
        let profiles = self
            .profiles()
            .map_err(|e| StoreError::Invalid { problems: vec![e] })?;
        let mut problems = Vec::new();
        for r in rules {
            if let Err(e) = policy::validate_pattern(&r.pattern).and_then(|_| r.validate(&profiles))
            {
                problems.push(e.to_string());
            }
        }
        if !problems.is_empty() {
            return Err(StoreError::Invalid { problems });
        }
        self.update(base_hash, |file| {
            if !file.agents.contains_key(agent)
                && !known_agents.iter().any(|a| a == agent)
                && !create_agent
            {
                let mut candidates: Vec<&String> =
                    file.agents.keys().chain(known_agents.iter()).collect();
                candidates.sort_by_key(|c| distance(c, agent));
                let suggestion = candidates
                    .first()
                    .filter(|c| distance(c, agent) <= 2.max(agent.len() / 3))
                    .map(|c| c.to_string());
                return Err(StoreError::UnknownAgent {
                    agent: agent.to_owned(),
                    suggestion,
                });
            }
            let entry = agent_entry(file, agent)?;
            let mut added = Vec::new();
            for r in rules {
                if !entry.allowlist.iter().any(|e| e.rule().same_rule(r)) {
                    entry.allowlist.push(AllowlistEntry::from_rule(r));
                    added.push(r.describe());
                }
            }
            Ok(added)
        })
    }

    /// Store `rule` in `agent`'s `egressAllow` ("allow always" on a connection question);
    /// a rule already stored is not added again. The value: whether it was added.
    pub fn add_egress_allow(
        &self,
        agent: &str,
        rule: &policy::egress::DomainRule,
    ) -> Result<Updated<bool>, StoreError> {
        let text = rule.to_string();
        self.update(None, |file| {
            let entry = agent_entry(file, agent)?;
            let stored = entry
                .egress_allow
                .iter()
                .any(|t| policy::egress::DomainRule::parse(t).as_ref() == Ok(rule));
            if !stored {
                entry.egress_allow.push(text);
            }
            Ok(!stored)
        })
    }

    /// Remove `rule` (compared as a rule: `PyPI.org.:443` is `pypi.org:443`) from
    /// `agent`'s `egressAllow`; an absent rule is an error naming it.
    pub fn remove_egress_allow(
        &self,
        agent: &str,
        rule: &policy::egress::DomainRule,
    ) -> Result<Updated<()>, StoreError> {
        self.remove_egress_allow_based(None, agent, rule)
    }

    /// [`Store::remove_egress_allow`], only if the file still has hash `base_hash`.
    pub fn remove_egress_allow_based(
        &self,
        base_hash: Option<&str>,
        agent: &str,
        rule: &policy::egress::DomainRule,
    ) -> Result<Updated<()>, StoreError> {
        self.update(base_hash, |file| {
            let entry = known_agent_entry(file, agent)?;
            let before = entry.egress_allow.len();
            entry
                .egress_allow
                .retain(|t| policy::egress::DomainRule::parse(t).as_ref() != Ok(rule));
            if entry.egress_allow.len() == before {
                return Err(StoreError::Invalid {
                    problems: vec![format!("agent {agent:?} has no egressAllow rule {rule}")],
                });
            }
            Ok(())
        })
    }

    /// Remove `pattern` from `agent`'s allowlist; an absent pattern is an error naming it.
    pub fn remove_pattern(&self, agent: &str, pattern: &str) -> Result<Updated<()>, StoreError> {
        self.remove_pattern_based(None, agent, pattern)
    }

    /// [`Store::remove_pattern`], only if the file still has hash `base_hash`.
    pub fn remove_pattern_based(
        &self,
        base_hash: Option<&str>,
        agent: &str,
        pattern: &str,
    ) -> Result<Updated<()>, StoreError> {
        self.remove_entries(
            base_hash,
            agent,
            |e| e.pattern == pattern,
            || format!("{pattern:?}"),
        )
    }

    /// Remove the one entry of `agent` that is `rule` (same pattern and argument
    /// rules); an absent rule is an error naming it.
    pub fn remove_rule(&self, agent: &str, rule: &RuleSpec) -> Result<Updated<()>, StoreError> {
        self.remove_rule_based(None, agent, rule)
    }

    /// [`Store::remove_rule`], only if the file still has hash `base_hash`.
    pub fn remove_rule_based(
        &self,
        base_hash: Option<&str>,
        agent: &str,
        rule: &RuleSpec,
    ) -> Result<Updated<()>, StoreError> {
        self.remove_entries(
            base_hash,
            agent,
            |e| e.rule().same_rule(rule),
            || rule.describe(),
        )
    }

    /// Remove every entry of `agent`'s allowlist that `matches`; none matching is an
    /// error naming the entry (`shown`), and nothing is written.
    fn remove_entries(
        &self,
        base_hash: Option<&str>,
        agent: &str,
        matches: impl Fn(&AllowlistEntry) -> bool,
        shown: impl Fn() -> String,
    ) -> Result<Updated<()>, StoreError> {
        self.update(base_hash, |file| {
            let entry = known_agent_entry(file, agent)?;
            let before = entry.allowlist.len();
            entry.allowlist.retain(|e| !matches(e));
            if entry.allowlist.len() == before {
                return Err(StoreError::Invalid {
                    problems: vec![format!(
                        "agent {agent:?} has no allowlist entry {}",
                        shown()
                    )],
                });
            }
            Ok(())
        })
    }

    /// Record that `pattern` (an entry without argument rules) of `agent` was used at
    /// `now_ms`. Writes only when something changed (see [`USAGE_TIME_GRANULARITY_MS`]).
    pub fn record_use(
        &self,
        agent: &str,
        pattern: &str,
        command: &str,
        resolved_path: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.record_rule_use(
            agent,
            &RuleSpec::program(pattern),
            command,
            resolved_path,
            now_ms,
        )
    }

    /// Record that `rule` of `agent` (its own entry, else the `*` entry that gave it) was
    /// used at `now_ms`. Writes only when something changed.
    pub fn record_rule_use(
        &self,
        agent: &str,
        rule: &RuleSpec,
        command: &str,
        resolved_path: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let updated = self.update(None, |file| {
            let owner = [agent, EVERY_AGENT].into_iter().find(|a| {
                file.agents
                    .get(*a)
                    .is_some_and(|e| e.allowlist.iter().any(|x| x.rule().same_rule(rule)))
            });
            let Some(entry) = owner.and_then(|a| {
                file.agents
                    .get_mut(a)
                    .and_then(|e| e.allowlist.iter_mut().find(|x| x.rule().same_rule(rule)))
            }) else {
                return Ok(());
            };
            let same_use = entry.last_used_command.as_deref() == Some(command)
                && entry.last_resolved_path.as_deref() == Some(resolved_path)
                && entry
                    .last_used_at
                    .is_some_and(|t| now_ms.saturating_sub(t) < USAGE_TIME_GRANULARITY_MS);
            if !same_use {
                entry.last_used_at = Some(now_ms);
                entry.last_used_command = Some(command.to_owned());
                entry.last_resolved_path = Some(resolved_path.to_owned());
            }
            Ok(())
        })?;
        Ok(updated.written)
    }

    /// Replace the whole document with `text` (as printed by `get`, token redacted or
    /// not), provided the file still has hash `base_hash`. The token is kept when `text`
    /// carries the redaction marker or none.
    pub fn set_from_text(&self, text: &str, base_hash: &str) -> Result<Updated<()>, StoreError> {
        // `get` prints `# path` and `# hash` lines before the document; JSON never starts
        // with `#`, so they are skipped rather than refused.
        let body: Vec<&str> = text
            .lines()
            .skip_while(|l| l.trim_start().starts_with('#'))
            .collect();
        let text = body.join("\n");
        let mut incoming: ApprovalsFile =
            serde_json::from_str(&text).map_err(|e| StoreError::Invalid {
                problems: vec![format!("not a valid approvals document: {e}")],
            })?;
        let mut problems = incoming.problems();
        if incoming.socket.as_ref().is_some_and(|s| s.path.is_some()) {
            let socket = self.socket_path(&incoming);
            problems.extend(crate::socket_location::location_problem(
                self.fs(),
                &socket,
                self.config().owner_uid,
            ));
        }
        if !problems.is_empty() {
            return Err(StoreError::Invalid { problems });
        }
        self.update(Some(base_hash), |file| {
            let keep_token = file.token().map(str::to_owned);
            let socket = incoming.socket.get_or_insert_with(SocketSettings::default);
            if socket.token.as_deref().is_none_or(|t| t == REDACTED) {
                socket.token = keep_token;
            }
            if incoming
                .socket
                .as_ref()
                .is_some_and(|s| *s == SocketSettings::default())
            {
                incoming.socket = None;
            }
            *file = incoming;
            Ok(())
        })
    }

    /// Set the host-wide defaults (`agent` = `None`) or one agent's settings. An agent
    /// that is neither in the file nor in `known_agents` is refused unless `create_agent`.
    pub fn set_settings(
        &self,
        agent: Option<&str>,
        change: Ceilings,
        known_agents: &[String],
        create_agent: bool,
    ) -> Result<Updated<()>, StoreError> {
        self.update(None, |file| {
            let ceilings = match agent {
                None => &mut file.defaults.ceilings,
                Some(id) => {
                    if id.trim().is_empty() || id.chars().any(char::is_control) {
                        return Err(StoreError::Invalid {
                            problems: vec![format!("invalid agent id {id:?}")],
                        });
                    }
                    if !file.agents.contains_key(id)
                        && !known_agents.iter().any(|a| a == id)
                        && !create_agent
                    {
                        return Err(StoreError::UnknownAgent {
                            agent: id.to_owned(),
                            suggestion: None,
                        });
                    }
                    &mut file.agents.entry(id.to_owned()).or_default().ceilings
                }
            };
            ceilings.apply(change);
            Ok(())
        })
    }
}

impl Store {
    /// Replace the host-wide defaults (`agent` = `None`) or one agent's settings with
    /// exactly `ceilings` — `None` values unset (an agent then inherits the defaults, the
    /// defaults the strict values) — only if the file still has hash `base_hash`. An
    /// agent that is in neither the file nor `known_agents` is refused.
    pub fn set_ceilings_based(
        &self,
        base_hash: Option<&str>,
        agent: Option<&str>,
        ceilings: Ceilings,
        known_agents: &[String],
    ) -> Result<Updated<()>, StoreError> {
        self.update(base_hash, |file| {
            let target = match agent {
                None => &mut file.defaults.ceilings,
                Some(id) => {
                    if !file.agents.contains_key(id) && !known_agents.iter().any(|a| a == id) {
                        return Err(StoreError::UnknownAgent {
                            agent: id.to_owned(),
                            suggestion: None,
                        });
                    }
                    &mut file.agents.entry(id.to_owned()).or_default().ceilings
                }
            };
            *target = ceilings;
            Ok(())
        })
    }

    /// Add an agent entry with nothing set (it inherits the defaults and has an empty
    /// allowlist), only if the file still has hash `base_hash`. An agent already in the
    /// file is an error: nothing of it is replaced.
    pub fn create_agent_based(
        &self,
        base_hash: Option<&str>,
        agent: &str,
    ) -> Result<Updated<()>, StoreError> {
        if !policy::is_agent_id(agent) {
            return Err(StoreError::Invalid {
                problems: vec![format!(
                    "invalid agent id {agent:?}: {}",
                    policy::AGENT_ID_RULE
                )],
            });
        }
        self.update(base_hash, |file| {
            if file.agents.contains_key(agent) {
                return Err(StoreError::Invalid {
                    problems: vec![format!("agent {agent:?} is already in the file")],
                });
            }
            file.agents.insert(agent.to_owned(), AgentEntry::default());
            Ok(())
        })
    }
}
