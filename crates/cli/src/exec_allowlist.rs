//! Whether the sandbox's exec allowlist (`sandbox.exec_allowlist`) is in force on this
//! host, as `warden doctor` and `warden policy explain` report it. The runner decides the
//! same way for every run (`runner::execute`): a backend and kernel that can enforce it
//! get it; where they cannot, `required` refuses host=sandbox commands and `best-effort`
//! runs them without it.

use serde::Serialize;
use serde_json::json;

use policy::{Config, ExecAllowlistMode, Host, ResolvedExecAllowlist, ResolvedPolicy, Source};

/// Where an exec allowlist stands for one agent (or in general, for `doctor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// The kernel enforces it in the sandbox.
    Active,
    /// Required but not enforceable here: host=sandbox commands are refused.
    Refused,
    /// Best-effort and not enforceable here: commands run without it.
    Off,
    /// Configured, but this exec does not run in the OS sandbox.
    NotApplied,
}

/// A state and the sentence that explains it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    /// Where it stands.
    pub state: State,
    /// Why, in one sentence.
    pub detail: String,
    /// What a run may execute and map as code on this host, as the next run would get it.
    #[serde(flatten)]
    pub allows: Allows,
}

/// What an exec allowlist lets a run execute, resolved on this host as a run resolves it
/// (`sandbox::exec_allowlist::resolve`): everything else is on `noexec` mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Allows {
    /// Files (and directories of files) that may be executed: the entries' real paths and
    /// the dynamic loaders they need.
    pub executable: Vec<std::path::PathBuf>,
    /// Directories whose files may be mapped as code, never executed: where the listed
    /// programs' libraries are.
    pub libraries: Vec<std::path::PathBuf>,
}

impl Allows {
    /// What `paths` allow on this host.
    pub fn of(paths: &[std::path::PathBuf]) -> Allows {
        let resolved = sandbox::exec_allowlist::resolve(paths);
        Allows {
            executable: resolved.executable,
            libraries: resolved.libraries,
        }
    }

    /// Two lines for a person: what may run, and where code may be loaded from.
    pub fn lines(&self) -> Vec<String> {
        let list = |paths: &[std::path::PathBuf]| {
            if paths.is_empty() {
                "nothing".to_owned()
            } else {
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        vec![
            format!("may execute: {}", list(&self.executable)),
            format!(
                "may map libraries from: {} (every other mount is noexec)",
                list(&self.libraries)
            ),
        ]
    }
}

/// Whether this host's configured backend and kernel can enforce an exec allowlist.
pub fn host_support(config: &Config) -> Result<String, String> {
    match config.sandbox.backend {
        policy::SandboxBackend::Bwrap => {
            let abi = sandbox::landlock::abi();
            sandbox::exec_allowlist::kernel_support(abi)
                .map(|()| format!("noexec mounts and Landlock ABI {abi} enforce it in the sandbox"))
                .map_err(|e| e.to_string())
        }
        other => Err(format!(
            "the {} backend cannot enforce it",
            format!("{other:?}").to_lowercase()
        )),
    }
}

/// Where `list` stands with `support` (see [`host_support`]).
pub fn status(list: &ResolvedExecAllowlist, support: &Result<String, String>) -> Status {
    match (support, list.mode.value) {
        (Ok(how), _) => Status {
            state: State::Active,
            detail: format!("active ({how})"),
            allows: Allows::of(&list.paths.value),
        },
        (Err(why), ExecAllowlistMode::Required) => Status {
            state: State::Refused,
            detail: format!(
                "REFUSED: required but cannot be enforced here ({why}): host=sandbox commands are refused"
            ),
            allows: Allows::default(),
        },
        (Err(why), ExecAllowlistMode::BestEffort) => Status {
            state: State::Off,
            detail: format!(
                "OFF: best-effort and cannot be enforced here ({why}): commands run without it"
            ),
            allows: Allows::default(),
        },
    }
}

/// The status `warden policy explain` shows for a resolved exec (`None`: no allowlist).
pub fn for_exec(config: &Config, policy: &ResolvedPolicy, direct_mode: bool) -> Option<Status> {
    let list = policy.exec_allowlist.as_ref()?;
    Some(if policy.host.value != Host::Sandbox {
        Status {
            state: State::NotApplied,
            detail: format!(
                "not applied: host={} does not run in the OS sandbox",
                policy.host.value
            ),
            allows: Allows::default(),
        }
    } else if direct_mode {
        Status {
            state: State::NotApplied,
            detail: "not applied: direct mode runs host=sandbox commands without an OS sandbox"
                .into(),
            allows: Allows::default(),
        }
    } else {
        status(list, &host_support(config))
    })
}

/// `warden doctor`'s report: every configured list (global, then each agent's own), where
/// they stand here, and what `notes` says about their entries.
pub struct DoctorReport {
    /// True when no configured list makes commands be refused.
    pub ok: bool,
    /// One line.
    pub detail: String,
    /// Warnings about entries, each naming its list.
    pub notes: Vec<String>,
    /// What each list lets runs execute here, each line naming its list.
    pub allows: Vec<String>,
    /// The same as JSON.
    pub json: serde_json::Value,
}

/// Build `doctor`'s report; `notes(entries)` diagnoses a list's entries.
pub fn doctor(
    config: &Config,
    notes: impl Fn(&[std::path::PathBuf]) -> Vec<String>,
) -> DoctorReport {
    let support = host_support(config);
    let mut lists: Vec<(String, ResolvedExecAllowlist)> = Vec::new();
    if let Some(global) = policy::resolve_exec_allowlist(config, None) {
        lists.push(("global".into(), global));
    }
    for agent in &config.agents {
        if let Some(list) = policy::resolve_exec_allowlist(config, Some(&agent.id))
            && (list.paths.source == Source::Agent || list.mode.source == Source::Agent)
        {
            lists.push((format!("agent {}", agent.id), list));
        }
    }
    if lists.is_empty() {
        return DoctorReport {
            ok: true,
            detail: "not configured (sandbox.exec_allowlist): commands may execute any program they can see".into(),
            notes: Vec::new(),
            allows: Vec::new(),
            json: json!({ "configured": false }),
        };
    }
    let mut ok = true;
    let mut parts = Vec::new();
    let mut all_notes = Vec::new();
    let mut all_allows = Vec::new();
    let mut levels = Vec::new();
    for (level, list) in &lists {
        let status = status(list, &support);
        ok &= status.state != State::Refused;
        let n = list.paths.value.len();
        parts.push(format!(
            "{level}: {n} {}, {} — {}",
            if n == 1 { "entry" } else { "entries" },
            list.mode.value,
            match status.state {
                State::Active => "active",
                State::Refused => "commands REFUSED",
                State::Off | State::NotApplied => "off",
            }
        ));
        let list_notes = notes(&list.paths.value);
        all_notes.extend(list_notes.iter().map(|n| format!("{level}: {n}")));
        let allows = Allows::of(&list.paths.value);
        all_allows.extend(allows.lines().iter().map(|l| format!("{level}: {l}")));
        levels.push(json!({
            "level": level,
            "paths": list.paths.value,
            "mode": list.mode.value,
            "state": status.state,
            "detail": status.detail,
            "notes": list_notes,
            "executable": allows.executable,
            "libraries": allows.libraries,
        }));
    }
    let how = match &support {
        Ok(how) => how.clone(),
        Err(why) => format!("cannot be enforced here: {why}"),
    };
    DoctorReport {
        ok,
        detail: format!("{how}; {}", parts.join("; ")),
        notes: all_notes,
        allows: all_allows,
        json: json!({
            "configured": true,
            "ok": ok,
            "enforceable": support.is_ok(),
            "detail": how,
            "lists": levels,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(text: &str) -> Config {
        Config::parse(text, Path::new("/h/config.toml")).unwrap()
    }

    #[test]
    fn required_refuses_and_best_effort_is_off_where_it_cannot_be_enforced() {
        let c = config(
            "[sandbox]\nexec_allowlist = [\"/usr/bin\"]\n\
             [[agents.list]]\nid = \"lax\"\nsandbox.exec_allowlist_mode = \"best-effort\"\n",
        );
        let absent: Result<String, String> = Err("no Landlock".into());
        let strict = policy::resolve_exec_allowlist(&c, Some("main")).unwrap();
        let lax = policy::resolve_exec_allowlist(&c, Some("lax")).unwrap();
        assert_eq!(status(&strict, &absent).state, State::Refused);
        assert!(status(&strict, &absent).detail.contains("no Landlock"));
        assert_eq!(status(&lax, &absent).state, State::Off);
        assert!(status(&lax, &absent).detail.starts_with("OFF"));
        let present: Result<String, String> = Ok("Landlock ABI 7".into());
        assert_eq!(status(&strict, &present).state, State::Active);
        // The container backend cannot enforce it, whatever the kernel.
        let c = config(
            "[sandbox]\nbackend = \"container\"\ncontainer.name = \"dev\"\nexec_allowlist = [\"/usr/bin\"]\n",
        );
        assert!(host_support(&c).unwrap_err().contains("container"));
        let report = doctor(&c, |_| vec!["a note".into()]);
        assert!(!report.ok);
        assert!(report.detail.contains("REFUSED"), "{}", report.detail);
        assert_eq!(report.notes, vec!["global: a note".to_owned()]);
        assert!(report.allows[0].starts_with("global: may execute: "));
        assert!(report.allows[1].starts_with("global: may map libraries from: "));
        assert_eq!(report.json["lists"][0]["state"], "refused");
    }

    #[test]
    fn doctor_lists_the_global_list_and_agents_with_their_own() {
        let c = config(
            "[sandbox]\nbackend = \"container\"\ncontainer.name = \"dev\"\nexec_allowlist = [\"/usr/bin\"]\nexec_allowlist_mode = \"best-effort\"\n\
             [[agents.list]]\nid = \"same\"\n\
             [[agents.list]]\nid = \"own\"\nsandbox.exec_allowlist = [\"/usr/bin/git\", \"/usr/bin/make\"]\n",
        );
        let report = doctor(&c, |_| Vec::new());
        assert!(report.ok, "best-effort never refuses");
        assert!(
            report.detail.contains("global: 1 entry"),
            "{}",
            report.detail
        );
        assert!(
            report.detail.contains("agent own: 2 entries"),
            "{}",
            report.detail
        );
        assert!(!report.detail.contains("agent same"), "{}", report.detail);
        let none = doctor(&config(""), |_| Vec::new());
        assert!(none.ok && none.detail.contains("not configured"));
        assert_eq!(none.json["configured"], false);
    }
}
