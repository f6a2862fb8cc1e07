//! "No looser than": one relation over every field of an approvals file, used wherever
//! a change may only tighten — a remote edit of a node's file through the gateway above
//! all (security invariant 3). A change is accepted only if it is *provably* no looser;
//! anything the relation cannot compare is a loosening.
//!
//! Over the whole file:
//! - `version`, and every field this version does not know (at the top, in `socket`,
//!   `defaults`, each agent, each entry and its examples), unchanged: a field the
//!   relation does not know makes the comparison fail closed;
//! - `socket.path` unchanged (moving it could hand the questions to another listener),
//!   and `socket.token` unchanged, absent or the redaction marker (a token the editor
//!   chose would let it answer for the approver);
//! - for the defaults, `*` and every agent either file names: security no looser, ask no
//!   less, askFallback no looser, as each resolves (an agent the new file drops falls back
//!   to the new defaults, which must then be no looser for it either);
//! - every allowlist entry of the new file is no looser than an entry in force in the old
//!   one that applies to the same agents (`policy::RuleSpec::no_looser_than`, over every
//!   field of the entry: pattern, arguments and their match mode, allowed flags): an
//!   agent's own entry may be covered by its own entries or those of `*`, an entry of `*`
//!   only by `*`'s. An old entry that is not in force (an invalid pattern or failing
//!   examples) allows nothing, and so covers nothing;
//! - every `egressAllow` rule of the new file that reads is one the old file already
//!   stores for the same agents (its own or `*`'s; for `*` only `*`'s), compared as
//!   rules (a rule that does not read allows nothing).

use policy::Profiles;
use serde_json::{Map, Value};

use crate::file::{AllowlistEntry, ApprovalsFile, EVERY_AGENT, REDACTED};

/// Every way `incoming` could allow more than `current`, with `profiles` deciding which
/// of `current`'s entries are in force; empty when it is provably no looser.
pub fn loosenings(
    current: &ApprovalsFile,
    incoming: &ApprovalsFile,
    profiles: &Profiles,
) -> Vec<String> {
    let mut out = Vec::new();
    if incoming.version != current.version {
        out.push(format!(
            "version {} → {} cannot be compared",
            current.version, incoming.version
        ));
    }
    unknown_fields("the file", &current.extra, &incoming.extra, &mut out);
    socket(current, incoming, &mut out);
    unknown_fields(
        "defaults",
        &current.defaults.extra,
        &incoming.defaults.extra,
        &mut out,
    );
    ceilings(current, incoming, &mut out);
    for (agent, entry) in &incoming.agents {
        let empty = Map::new();
        let before = current.agents.get(agent).map_or(&empty, |e| &e.extra);
        unknown_fields(&format!("agents.{agent}"), before, &entry.extra, &mut out);
        // Its own and `*`'s for an agent, only `*`'s for `*`.
        let stored = current.egress_allow_for(agent);
        for text in &entry.egress_allow {
            let Ok(rule) = policy::egress::DomainRule::parse(text) else {
                continue;
            };
            if !stored.contains(&rule) {
                out.push(format!(
                    "agents.{agent}: egressAllow {rule}: a host its runs may not reach now"
                ));
            }
        }
        let covering = covering_entries(current, agent, profiles);
        for e in &entry.allowlist {
            if let Err(why) = covered(e, &covering) {
                out.push(format!(
                    "agents.{agent}: entry {}: {why}",
                    e.rule().describe()
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Fields this version does not know must be the same on both sides.
fn unknown_fields(
    whose: &str,
    before: &Map<String, Value>,
    after: &Map<String, Value>,
    out: &mut Vec<String>,
) {
    if before != after {
        let mut names: Vec<&String> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .collect();
        names.sort();
        names.dedup();
        out.push(format!(
            "{whose}: fields this Warden does not know changed ({}): it cannot show they do not loosen",
            names
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

fn socket(current: &ApprovalsFile, incoming: &ApprovalsFile, out: &mut Vec<String>) {
    let path = |f: &ApprovalsFile| f.socket.as_ref().and_then(|s| s.path.clone());
    if path(current) != path(incoming) {
        out.push("socket.path may not be changed remotely".to_owned());
    }
    let token = incoming.socket.as_ref().and_then(|s| s.token.as_deref());
    if token.is_some_and(|t| t != REDACTED && Some(t) != current.token()) {
        out.push("socket.token may not be changed remotely".to_owned());
    }
    let empty = Map::new();
    let extra = |f: &ApprovalsFile| -> Map<String, Value> {
        f.socket.as_ref().map_or(empty.clone(), |s| s.extra.clone())
    };
    unknown_fields("socket", &extra(current), &extra(incoming), out);
}

/// Security, ask and askFallback as they resolve for the defaults and every agent either
/// file names.
fn ceilings(current: &ApprovalsFile, incoming: &ApprovalsFile, out: &mut Vec<String>) {
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
}

/// The entries of `current` in force that apply to every agent an entry of `agent`
/// applies to: its own and `*`'s, or for `*` only `*`'s.
fn covering_entries<'a>(
    current: &'a ApprovalsFile,
    agent: &str,
    profiles: &Profiles,
) -> Vec<&'a AllowlistEntry> {
    let own = (agent != EVERY_AGENT)
        .then(|| current.agents.get(agent))
        .flatten();
    own.into_iter()
        .chain(current.agents.get(EVERY_AGENT))
        .flat_map(|e| &e.allowlist)
        .filter(|e| in_force(e, profiles))
        .collect()
}

/// Whether `entry` can match at all: a valid pattern, and argument rules and examples
/// that hold.
fn in_force(entry: &AllowlistEntry, profiles: &Profiles) -> bool {
    policy::validate_pattern(&entry.pattern).is_ok() && entry.rule().validate(profiles).is_ok()
}

/// Whether `entry` is no looser than one of `covering` (every field: the rule's, and the
/// fields this version does not know, which must be the same).
fn covered(entry: &AllowlistEntry, covering: &[&AllowlistEntry]) -> Result<(), String> {
    let mut why = None;
    for c in covering {
        let same_unknown = entry.extra == c.extra && examples_extra(entry) == examples_extra(c);
        match entry.rule().no_looser_than(&c.rule()) {
            Ok(()) if same_unknown => return Ok(()),
            Ok(()) => {
                why.get_or_insert_with(|| {
                    "it has fields this Warden does not know, which it cannot show do not loosen"
                        .to_owned()
                });
            }
            // The reason against an entry for the same program says most.
            Err(e) if c.pattern == entry.pattern => {
                why = Some(format!("allows more than the entry in force: {e}"));
            }
            Err(_) => {}
        }
    }
    Err(why.unwrap_or_else(|| "a new allowlist entry".to_owned()))
}

/// The unknown fields of an entry's examples (none when it has no examples).
fn examples_extra(entry: &AllowlistEntry) -> Option<&Map<String, Value>> {
    entry
        .examples
        .as_ref()
        .map(|e| &e.extra)
        .filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{AgentEntry, AllowlistEntry};
    use policy::{Ask, Security};

    fn file(json: &str) -> ApprovalsFile {
        serde_json::from_str(json).unwrap()
    }

    fn shipped() -> std::sync::Arc<Profiles> {
        Profiles::shipped()
    }

    fn loosened(current: &ApprovalsFile, incoming: &ApprovalsFile) -> String {
        loosenings(current, incoming, &shipped()).join("\n")
    }

    #[test]
    fn an_egress_rule_is_kept_or_dropped_remotely_but_never_added_or_widened() {
        let current = file(
            r#"{"version":1,"agents":{"main":{"egressAllow":["pypi.org:443","bad rule"]},
                "*":{"egressAllow":["files.example:443"]}}}"#,
        );
        let mut same = current.clone();
        // Spelled another way, still the same rule; one dropped; one `*` covers.
        same.agents.get_mut("main").unwrap().egress_allow =
            vec!["PyPI.org.:443".into(), "files.example:443".into()];
        assert_eq!(loosened(&current, &same), "");
        for (agent, added) in [
            ("main", "pypi.org"),
            ("main", "*.pypi.org:443"),
            ("main", "evil.example:443"),
            ("*", "pypi.org:443"),
            ("new", "evil.example:443"),
        ] {
            let mut looser = current.clone();
            looser
                .agents
                .entry(agent.into())
                .or_default()
                .egress_allow
                .push(added.into());
            let got = loosened(&current, &looser);
            assert!(
                got.contains(&format!("agents.{agent}: egressAllow")),
                "{agent} {added}: {got:?}"
            );
        }
        // A rule that does not read allows nothing: adding one loosens nothing.
        let mut unreadable = current.clone();
        unreadable
            .agents
            .get_mut("main")
            .unwrap()
            .egress_allow
            .push("a b".into());
        assert_eq!(loosened(&current, &unreadable), "");
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
        assert_eq!(loosened(&current, &tighter), "");

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
        let got = loosened(&current, &looser);
        assert!(got.contains("defaults: security allowlist → full"), "{got}");
        assert!(
            got.contains("entry /bin/sh: a new allowlist entry"),
            "{got}"
        );
        assert!(got.contains("ask on-miss → off"), "{got}");

        // Dropping an agent whose entry was stricter than the defaults loosens it.
        let strict = file(
            r#"{"version":1,"defaults":{"security":"full"},"agents":{"x":{"security":"deny"}}}"#,
        );
        let dropped = file(r#"{"version":1,"defaults":{"security":"full"}}"#);
        assert!(loosened(&strict, &dropped).contains("agents.x"));
        let moved = file(r#"{"version":1,"socket":{"path":"/tmp/evil.sock"}}"#);
        assert!(!loosened(&file(r#"{"version":1}"#), &moved).is_empty());
    }

    #[test]
    fn widening_an_entry_in_any_field_is_a_loosening() {
        let current = file(
            r#"{"version":1,"defaults":{"security":"allowlist"},"agents":{"main":{"allowlist":[
                {"pattern":"/usr/bin/git","args":["status"],"argsMatch":"exact"}]}}}"#,
        );
        let with = |entry: &str| {
            file(&format!(
                r#"{{"version":1,"defaults":{{"security":"allowlist"}},"agents":{{"main":{{"allowlist":[{entry}]}}}}}}"#
            ))
        };
        for (entry, expect) in [
            (
                r#"{"pattern":"/usr/bin/git","args":["status"],"argsMatch":"exact","allowFlags":["-c alias.*"]}"#,
                "allowFlags",
            ),
            (r#"{"pattern":"/usr/bin/git"}"#, "any arguments"),
            (r#"{"pattern":"/usr/bin/git","args":["status"]}"#, "prefix"),
            (
                r#"{"pattern":"/usr/bin/git","args":["*"],"argsMatch":"exact"}"#,
                "matches more",
            ),
            (
                r#"{"pattern":"/usr/bin/git","args":["status"],"argsMatch":"exact","runAs":"root"}"#,
                "does not know",
            ),
            (
                r#"{"pattern":"/usr/bin/git","args":["status"],"argsMatch":"exact","examples":{"match":[["git","status"]],"future":1}}"#,
                "does not know",
            ),
            (r#"{"pattern":"/usr/bin/*"}"#, "a new allowlist entry"),
        ] {
            let got = loosened(&current, &with(entry));
            assert!(got.contains(expect), "{entry}: {got}");
        }
        // The same entry, the same entry used (bookkeeping), or a narrower one: fine.
        for entry in [
            r#"{"pattern":"/usr/bin/git","args":["status"],"argsMatch":"exact"}"#,
            r#"{"pattern":"/usr/bin/git","args":["status"],"argsMatch":"exact","lastUsedAt":5,"lastUsedCommand":"git status"}"#,
            r#"{"pattern":"/usr/bin/git","args":["status"],"argsMatch":"exact","examples":{"match":[["git","status"]]}}"#,
        ] {
            assert_eq!(loosened(&current, &with(entry)), "", "{entry}");
        }
        // Covered by an entry of `*`, for one agent; an entry of `*` only by `*`'s.
        let every =
            file(r#"{"version":1,"agents":{"*":{"allowlist":[{"pattern":"/usr/bin/ls"}]}}}"#);
        let own = file(
            r#"{"version":1,"agents":{"*":{"allowlist":[{"pattern":"/usr/bin/ls"}]},
                "main":{"allowlist":[{"pattern":"/usr/bin/ls","args":["-la"]}]}}}"#,
        );
        assert_eq!(loosened(&every, &own), "");
        let main_only =
            file(r#"{"version":1,"agents":{"main":{"allowlist":[{"pattern":"/usr/bin/ls"}]}}}"#);
        let to_every = file(
            r#"{"version":1,"agents":{"main":{"allowlist":[{"pattern":"/usr/bin/ls"}]},
                "*":{"allowlist":[{"pattern":"/usr/bin/ls"}]}}}"#,
        );
        assert!(loosened(&main_only, &to_every).contains("agents.*"));
    }

    #[test]
    fn an_entry_not_in_force_covers_nothing() {
        // Its example fails: it allows nothing, so a copy without the example loosens.
        let current = file(
            r#"{"version":1,"agents":{"main":{"allowlist":[{"pattern":"/usr/bin/git",
                "examples":{"notMatch":[["git","status"]]}}]}}}"#,
        );
        let incoming = file(
            r#"{"version":1,"agents":{"main":{"allowlist":[{"pattern":"/usr/bin/git","args":["log"]}]}}}"#,
        );
        assert!(loosened(&current, &incoming).contains("a new allowlist entry"));
    }

    #[test]
    fn the_token_and_unknown_fields_may_not_change() {
        let current = file(
            r#"{"version":1,"socket":{"path":"/s","token":"secret"},"future":{"a":1},
                "defaults":{"later":true}}"#,
        );
        let same = |t: &str| {
            file(&format!(
                r#"{{"version":1,"socket":{{"path":"/s"{t}}},"future":{{"a":1}},"defaults":{{"later":true}}}}"#
            ))
        };
        assert_eq!(loosened(&current, &same("")), "");
        assert_eq!(loosened(&current, &same(r#","token":"<redacted>""#)), "");
        assert_eq!(loosened(&current, &same(r#","token":"secret""#)), "");
        assert!(loosened(&current, &same(r#","token":"mine""#)).contains("socket.token"));
        let changed = file(r#"{"version":1,"socket":{"path":"/s"},"future":{"a":2}}"#);
        let got = loosened(&current, &changed);
        assert!(
            got.contains("the file: fields this Warden does not know changed (future)"),
            "{got}"
        );
        assert!(got.contains("defaults: fields"), "{got}");
    }

    mod property {
        use super::*;
        use caps::FileId;
        use policy::{Allowlist, CaseMode, Invocation, ResolvedExe};
        use proptest::prelude::*;
        use std::path::{Path, PathBuf};

        fn entry() -> impl Strategy<Value = Value> {
            (
                prop::sample::select(vec!["/usr/bin/git", "/usr/bin/ls", "/usr/bin/*"]),
                prop::option::of(prop::collection::vec(
                    prop::sample::select(vec!["status", "log", "*", "-la"]),
                    0..3,
                )),
                any::<bool>(),
                prop::collection::vec(prop::sample::select(vec!["-c alias.*", "*"]), 0..2),
            )
                .prop_map(|(pattern, args, exact, flags)| {
                    let mut e = serde_json::json!({"pattern": pattern});
                    if let Some(args) = args {
                        e["args"] = serde_json::json!(args);
                        if exact {
                            e["argsMatch"] = "exact".into();
                        }
                    }
                    if !flags.is_empty() {
                        e["allowFlags"] = serde_json::json!(flags);
                    }
                    e
                })
        }

        fn approvals() -> impl Strategy<Value = ApprovalsFile> {
            // Mostly `allowlist`, where entries matter.
            let level = || {
                (
                    prop::option::of(prop::sample::select(vec![
                        "deny",
                        "allowlist",
                        "allowlist",
                        "allowlist",
                        "full",
                    ])),
                    prop::option::of(prop::sample::select(vec!["off", "on-miss", "on-miss"])),
                    prop::option::of(prop::sample::select(vec!["deny", "allowlist", "full"])),
                )
            };
            (
                level(),
                prop::collection::btree_map(
                    prop::sample::select(vec!["main", "other", "*"]),
                    (level(), prop::collection::vec(entry(), 0..3)),
                    0..3,
                ),
            )
                .prop_map(|(defaults, agents)| {
                    let set =
                        |v: &mut Value, (s, a, f): (Option<&str>, Option<&str>, Option<&str>)| {
                            if let Some(s) = s {
                                v["security"] = s.into();
                            }
                            if let Some(a) = a {
                                v["ask"] = a.into();
                            }
                            if let Some(f) = f {
                                v["askFallback"] = f.into();
                            }
                        };
                    let mut doc = serde_json::json!({"version": 1, "defaults": {}, "agents": {}});
                    set(&mut doc["defaults"], defaults);
                    for (agent, (level, entries)) in agents {
                        let mut a = serde_json::json!({"allowlist": entries});
                        set(&mut a, level);
                        doc["agents"][agent] = a;
                    }
                    serde_json::from_value(doc).unwrap()
                })
        }

        fn exe(path: &str) -> ResolvedExe {
            ResolvedExe {
                invoked: path.to_owned(),
                how: Invocation::Absolute,
                path: PathBuf::from(path),
                id: FileId { dev: 1, ino: 1 },
            }
        }

        /// Whether `file` lets `agent` run `argv` (the program `argv[0]`) without asking:
        /// its ceiling, and for `allowlist` a matching entry.
        fn allows(file: &ApprovalsFile, agent: &str, argv: &[String]) -> bool {
            let ceiling = file.ceiling_for(Some(agent));
            let list = Allowlist::compile_rules(
                &file.rules_for(Some(agent)),
                Path::new("/root"),
                CaseMode::Sensitive,
                Profiles::shipped(),
            );
            match ceiling.security {
                Security::Deny => false,
                Security::Full => ceiling.ask != Ask::Always,
                Security::Allowlist => {
                    ceiling.ask != Ask::Always
                        && list
                            .match_command(
                                &exe(&argv[0]),
                                argv,
                                &policy::profiles::Invocation::example(),
                            )
                            .rule
                            .is_some()
                }
            }
        }

        /// One change an editor could make to a file.
        #[derive(Clone, Debug)]
        enum Edit {
            Flag(usize, &'static str),
            DropArgs(usize),
            Prefix(usize),
            WidenWord(usize),
            Add(Value),
            Security(&'static str),
            Drop(usize),
        }

        fn edits() -> impl Strategy<Value = Vec<Edit>> {
            let edit = prop_oneof![
                (0..4usize, prop::sample::select(vec!["-c alias.*", "*"]))
                    .prop_map(|(i, f)| Edit::Flag(i, f)),
                (0..4usize).prop_map(Edit::DropArgs),
                (0..4usize).prop_map(Edit::Prefix),
                (0..4usize).prop_map(Edit::WidenWord),
                entry().prop_map(Edit::Add),
                prop::sample::select(vec!["deny", "allowlist", "full"]).prop_map(Edit::Security),
                (0..4usize).prop_map(Edit::Drop),
            ];
            prop::collection::vec(edit, 0..3)
        }

        /// `file` with `edits` made to the entries of `agent` (and its ceiling).
        fn edited(file: &ApprovalsFile, agent: &str, edits: &[Edit]) -> ApprovalsFile {
            let mut doc = serde_json::to_value(file).unwrap();
            if doc["agents"][agent].is_null() {
                doc["agents"][agent] = serde_json::json!({"allowlist": []});
            }
            let a = &mut doc["agents"][agent];
            for e in edits {
                let list = a["allowlist"].as_array_mut().unwrap();
                let n = list.len().max(1);
                match e {
                    Edit::Flag(i, f) => {
                        if let Some(x) = list.get_mut(i % n) {
                            x["allowFlags"] = serde_json::json!([f]);
                        }
                    }
                    Edit::DropArgs(i) => {
                        if let Some(x) = list.get_mut(i % n).and_then(Value::as_object_mut) {
                            x.remove("args");
                        }
                    }
                    Edit::Prefix(i) => {
                        if let Some(x) = list.get_mut(i % n).and_then(Value::as_object_mut) {
                            x.remove("argsMatch");
                        }
                    }
                    Edit::WidenWord(i) => {
                        if let Some(args) =
                            list.get_mut(i % n).and_then(|x| x["args"].as_array_mut())
                            && let Some(w) = args.first_mut()
                        {
                            *w = "*".into();
                        }
                    }
                    Edit::Add(x) => list.push(x.clone()),
                    Edit::Drop(i) => {
                        if !list.is_empty() {
                            list.remove(i % n);
                        }
                    }
                    Edit::Security(s) => a["security"] = (*s).into(),
                }
            }
            serde_json::from_value(doc).unwrap()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]
            #[test]
            fn whenever_an_edit_is_accepted_every_command_it_allows_the_old_file_allowed(
                current in approvals(),
                edit_agent in prop::sample::select(vec!["main", "*"]),
                changes in edits(),
                agent in prop::sample::select(vec!["main", "main", "other", "nobody"]),
                program in prop::sample::select(vec!["/usr/bin/git", "/usr/bin/git", "/usr/bin/ls", "/usr/bin/id"]),
                args in prop_oneof![
                    Just(vec!["-c", "alias.x=!sh", "x"]),
                    Just(vec!["status", "-la"]),
                    Just(vec!["log", "status", "-la"]),
                    prop::collection::vec(
                        prop::sample::select(vec!["status", "log", "-la", "-c", "alias.x=!sh"]), 0..3),
                ],
            ) {
                let incoming = edited(&current, edit_agent, &changes);
                if loosenings(&current, &incoming, &shipped()).is_empty() {
                    let mut argv = vec![program.to_owned()];
                    argv.extend(args.iter().map(|a| a.to_string()));
                    prop_assert!(
                        !allows(&incoming, agent, &argv) || allows(&current, agent, &argv),
                        "{agent} may run {argv:?} after {incoming:?}, not before ({current:?})"
                    );
                    let (now, next) = (current.ceiling_for(Some(agent)), incoming.ceiling_for(Some(agent)));
                    prop_assert!(next.security <= now.security && next.ask >= now.ask
                        && next.ask_fallback <= now.ask_fallback);
                }
            }

            #[test]
            fn a_file_is_no_looser_than_itself(f in approvals()) {
                prop_assert!(loosenings(&f, &f, &shipped()).is_empty());
            }
        }
    }
}
