//! The sandbox's exec allowlist as configured — `sandbox.exec_allowlist` and
//! `sandbox.exec_allowlist_mode`, globally and per agent — resolved for one exec with the
//! level each value came from. The sandbox enforces it (with Landlock); this is only what
//! the operator asked for.
//!
//! An agent's list replaces the global one (it does not add to it), like every other
//! per-agent setting; sessions and requests cannot touch it: it is the operator's.

use std::path::PathBuf;

use serde::Serialize;

use crate::config::Config;
use crate::modes::ExecAllowlistMode;
use crate::sourced::{Source, Sourced};

/// The exec allowlist one sandboxed exec runs with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedExecAllowlist {
    /// The files and directories whose programs may be executed, as configured.
    pub paths: Sourced<Vec<PathBuf>>,
    /// What happens where it cannot be enforced.
    pub mode: Sourced<ExecAllowlistMode>,
}

impl ResolvedExecAllowlist {
    /// True when a sandbox that cannot enforce it must refuse the command.
    pub fn required(&self) -> bool {
        self.mode.value == ExecAllowlistMode::Required
    }

    /// What a sandbox shell is handed to enforce.
    pub fn to_caps(&self) -> caps::ExecAllowlist {
        caps::ExecAllowlist {
            paths: self.paths.value.clone(),
        }
    }

    /// One line: the entries and the mode, each with its source.
    pub fn describe(&self) -> String {
        let paths: Vec<String> = self
            .paths
            .value
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        format!(
            "{} ({}); {} ({})",
            paths.join(", "),
            self.paths.source,
            self.mode.value,
            self.mode.source
        )
    }
}

/// The exec allowlist of `agent`: its own list, else the global one; `None` when neither
/// is configured. The mode follows the same order, then the built-in `required`.
pub fn resolve_exec_allowlist(
    config: &Config,
    agent: Option<&str>,
) -> Option<ResolvedExecAllowlist> {
    let agent = agent.and_then(|id| config.agent(id));
    let paths = agent
        .and_then(|a| a.exec_allowlist.clone())
        .map(|value| Sourced {
            value,
            source: Source::Agent,
        })
        .or_else(|| {
            config.sandbox.exec_allowlist.clone().map(|value| Sourced {
                value,
                source: Source::Global,
            })
        })?;
    let mode = agent
        .and_then(|a| a.exec_allowlist_mode)
        .map(|value| Sourced {
            value,
            source: Source::Agent,
        })
        .or_else(|| {
            config.sandbox.exec_allowlist_mode.map(|value| Sourced {
                value,
                source: Source::Global,
            })
        })
        .unwrap_or(Sourced {
            value: ExecAllowlistMode::default(),
            source: Source::Default,
        });
    Some(ResolvedExecAllowlist { paths, mode })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Config {
        Config::parse(text, Path::new("/h/config.toml")).unwrap()
    }

    #[test]
    fn an_agent_list_replaces_the_global_one_and_modes_resolve_in_the_same_order() {
        let c = parse(
            "[sandbox]\nexec_allowlist = [\"/usr/bin/git\", \"/usr/bin/sh\"]\n\
             [[agents.list]]\nid = \"ci\"\nsandbox.exec_allowlist = [\"/usr/bin/make\"]\n\
             sandbox.exec_allowlist_mode = \"best-effort\"\n\
             [[agents.list]]\nid = \"plain\"\n",
        );
        let ci = resolve_exec_allowlist(&c, Some("ci")).unwrap();
        assert_eq!(ci.paths.value, vec![PathBuf::from("/usr/bin/make")]);
        assert_eq!(ci.paths.source, Source::Agent);
        assert_eq!(
            (ci.mode.value, ci.mode.source),
            (ExecAllowlistMode::BestEffort, Source::Agent)
        );
        assert!(!ci.required());
        let plain = resolve_exec_allowlist(&c, Some("plain")).unwrap();
        assert_eq!(plain.paths.source, Source::Global);
        assert_eq!(plain.paths.value.len(), 2);
        assert_eq!(
            (plain.mode.value, plain.mode.source),
            (ExecAllowlistMode::Required, Source::Default)
        );
        assert!(plain.required());
        assert_eq!(
            plain.describe(),
            "/usr/bin/git, /usr/bin/sh (global); required (built-in default)"
        );
        assert_eq!(
            plain.to_caps().paths,
            vec![PathBuf::from("/usr/bin/git"), PathBuf::from("/usr/bin/sh")]
        );
        assert_eq!(
            resolve_exec_allowlist(&c, None).map(|r| r.paths.source),
            Some(Source::Global)
        );
    }

    #[test]
    fn nothing_configured_means_no_allowlist_whatever_the_mode() {
        let c = parse("[sandbox]\nexec_allowlist_mode = \"best-effort\"\n");
        assert_eq!(resolve_exec_allowlist(&c, Some("main")), None);
        // An agent-only list applies to that agent alone.
        let c = parse(
            "[[agents.list]]\nid = \"a\"\nsandbox.exec_allowlist = [\"/usr/bin\"]\n\
             [sandbox]\nexec_allowlist_mode = \"best-effort\"\n",
        );
        assert_eq!(resolve_exec_allowlist(&c, Some("b")), None);
        let a = resolve_exec_allowlist(&c, Some("a")).unwrap();
        assert_eq!(
            (a.mode.value, a.mode.source),
            (ExecAllowlistMode::BestEffort, Source::Global)
        );
    }

    #[test]
    fn bad_entries_and_modes_are_errors_naming_the_key() {
        let file = Path::new("/h/config.toml");
        for (text, key, expected) in [
            (
                "[sandbox]\nexec_allowlist = \"/usr/bin\"",
                "`sandbox.exec_allowlist`",
                "expected a list of absolute paths",
            ),
            (
                "[sandbox]\nexec_allowlist = []",
                "`sandbox.exec_allowlist`",
                "an empty list would let nothing run",
            ),
            (
                "[sandbox]\nexec_allowlist = [\"usr/bin/git\"]",
                "`sandbox.exec_allowlist`",
                "expected an absolute path",
            ),
            (
                "[sandbox]\nexec_allowlist = [\"~/bin\"]",
                "`sandbox.exec_allowlist`",
                "expected an absolute path",
            ),
            (
                "[sandbox]\nexec_allowlist = [\"/usr/../tmp\"]",
                "`sandbox.exec_allowlist`",
                "`..`",
            ),
            (
                "[sandbox]\nexec_allowlist = [\"/\"]",
                "`sandbox.exec_allowlist`",
                "every program",
            ),
            (
                "[sandbox]\nexec_allowlist = [\"/usr/bin\", 7]",
                "`sandbox.exec_allowlist`",
                "expected a string",
            ),
            (
                "[sandbox]\nexec_allowlist_mode = \"sometimes\"",
                "`sandbox.exec_allowlist_mode`",
                "expected one of required, best-effort",
            ),
            (
                "[[agents.list]]\nid = \"a\"\nsandbox.exec_allowlist = [\"bin\"]",
                "`agents.list[0].sandbox.exec_allowlist`",
                "expected an absolute path",
            ),
            (
                "[[agents.list]]\nid = \"a\"\nsandbox.exec_allowlist_mode = \"auto\"",
                "`agents.list[0].sandbox.exec_allowlist_mode`",
                "required, best-effort",
            ),
            (
                "[[agents.list]]\nid = \"a\"\nsandbox.exec_allow = [\"/bin\"]",
                "unknown key `agents.list[0].sandbox.exec_allow`",
                "",
            ),
        ] {
            let err = Config::parse(text, file).unwrap_err().to_string();
            assert!(
                err.contains(key) && err.contains(expected) && err.contains("/h/config.toml"),
                "{text}: {err}"
            );
        }
        let c = parse("[sandbox]\nexec_allowlist = [\"/usr/bin/\", \"/opt/tools/bin/rg\"]\n");
        assert_eq!(
            c.sandbox.exec_allowlist,
            Some(vec![
                PathBuf::from("/usr/bin/"),
                PathBuf::from("/opt/tools/bin/rg")
            ])
        );
    }
}
