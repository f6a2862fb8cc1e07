//! The macOS backend: a `sandbox-exec` (Seatbelt) profile. Deny by default; reads
//! allowed; writes only beneath the authorized writable paths and temporary directories;
//! network per policy; Warden's state hidden. Path rules follow the same plan as the
//! Linux mounts (`mounts.rs`, parents first, since the last matching SBPL rule wins), and
//! a writable repository gets the same git protection (`git.rs`) as deny rules.
//!
//! Paths never appear in the profile text: they are passed as parameters
//! (`sandbox-exec -D NAME=VALUE`) and referenced with `(param "NAME")`, so a path with
//! quotes, parentheses or newlines cannot change the profile.

use std::path::{Path, PathBuf};

use caps::process::{ProcessSpec, WorkingDir, supervise};
use caps::{ExecOptions, ExecOutput, Script, Shell};

use crate::mounts::{Mount, MountPlan};
use crate::{Profile, SandboxPolicy, Unavailable, git};

/// Where `sandbox-exec` lives on macOS.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// A generated profile and the parameters it references.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeatbeltProfile {
    /// The SBPL text (contains no caller-supplied strings).
    pub text: String,
    /// `-D` parameters: name and value.
    pub params: Vec<(String, String)>,
}

impl SeatbeltProfile {
    /// The `sandbox-exec` argv (after the program) that runs `argv` under this profile.
    pub fn command_line(&self, argv: &[String]) -> Vec<String> {
        let mut out = vec!["-p".to_owned(), self.text.clone()];
        for (name, value) in &self.params {
            out.push("-D".into());
            out.push(format!("{name}={value}"));
        }
        out.push("--".into());
        out.extend(argv.iter().cloned());
        out
    }
}

fn param(params: &mut Vec<(String, String)>, prefix: &str, path: &Path) -> String {
    let name = format!(
        "{prefix}_{}",
        params.iter().filter(|(n, _)| n.starts_with(prefix)).count()
    );
    params.push((name.clone(), path.to_string_lossy().into_owned()));
    name
}

/// The profile for `policy` with `profile`.
pub fn profile(policy: &SandboxPolicy, profile: Profile) -> SeatbeltProfile {
    let mut params = Vec::new();
    let mut text = String::from(
        "(version 1)\n\
         (deny default)\n\
         (allow process-exec process-fork)\n\
         (allow signal (target same-sandbox))\n\
         (allow sysctl-read)\n\
         (allow mach-lookup (global-name \"com.apple.system.logger\"))\n\
         (allow file-read*)\n\
         (allow file-write* (subpath \"/private/tmp\") (subpath \"/private/var/folders\") \
         (literal \"/dev/null\") (literal \"/dev/tty\") (literal \"/dev/dtracehelper\"))\n",
    );
    // Rules in mount-plan order (parents first): SBPL lets the last matching rule win,
    // so a workspace inside a hidden home shows through and a state directory inside the
    // workspace stays hidden, exactly as the Linux mounts do.
    let writable = profile == Profile::Writable;
    for mount in MountPlan::without_layout(policy, writable).mounts() {
        match mount {
            Mount::Empty(path) | Mount::Hide(path) => {
                let name = param(&mut params, "HIDDEN", path);
                text.push_str(&format!(
                    "(deny file-read* file-write* (subpath (param \"{name}\")))\n"
                ));
            }
            Mount::Pin(path) => {
                // The directory entry itself may not be renamed or removed; what is
                // inside stays as writable as before.
                let name = param(&mut params, "PINNED", path);
                text.push_str(&format!(
                    "(deny file-write* (literal (param \"{name}\")))\n"
                ));
            }
            Mount::Lock(path) => {
                // Warden's programs: readable, nothing in them written, added or removed.
                let name = param(&mut params, "LOCKED", path);
                text.push_str(&format!(
                    "(deny file-write* (subpath (param \"{name}\")))\n"
                ));
            }
            Mount::Bind { path, writable } => {
                let name = param(&mut params, "BOUND", path);
                let write = if *writable { "allow" } else { "deny" };
                text.push_str(&format!(
                    "(allow file-read* (subpath (param \"{name}\")))\n\
                     ({write} file-write* (subpath (param \"{name}\")))\n"
                ));
            }
        }
    }
    // What git would execute from stays read-only and cannot be planted (`git.rs`).
    if writable {
        for root in &policy.writable_paths {
            for (path, subtree) in git::Protection::of(root, &policy.writable_paths).write_denied()
            {
                let name = param(&mut params, "PROTECTED", &path);
                let filter = if subtree { "subpath" } else { "literal" };
                text.push_str(&format!(
                    "(deny file-write* ({filter} (param \"{name}\")))\n"
                ));
            }
        }
    }
    if policy.network == crate::Network::On {
        text.push_str("(allow network*)\n");
    }
    SeatbeltProfile { text, params }
}

/// A `caps::Shell` running commands under `sandbox-exec` (macOS only).
#[derive(Debug)]
pub struct SeatbeltShell {
    policy: SandboxPolicy,
    profile: Profile,
}

impl SeatbeltShell {
    /// Fails closed where `sandbox-exec` does not exist (every system but macOS).
    pub fn new(policy: SandboxPolicy, profile: Profile) -> Result<Self, Unavailable> {
        if !Path::new(SANDBOX_EXEC).is_file() {
            return Err(Unavailable(format!(
                "{SANDBOX_EXEC} was not found (the seatbelt backend needs macOS)"
            )));
        }
        Ok(SeatbeltShell { policy, profile })
    }

    async fn run_argv(&self, argv: &[String], options: &ExecOptions) -> caps::Result<ExecOutput> {
        options.validate_request(argv)?;
        let generated = profile(&self.policy, self.profile);
        let mut full = vec![SANDBOX_EXEC.to_owned()];
        full.extend(generated.command_line(argv));
        let spec = ProcessSpec::for_request(
            PathBuf::from(SANDBOX_EXEC),
            full.into_iter().map(Into::into).collect(),
            WorkingDir::Path(options.cwd.clone()),
            options,
            &argv[0],
        );
        let mut output = supervise(spec, options.timeout, options.limits).await?;
        // The read-only profile cannot watch writes: classify a refusal by its message.
        if self.profile == Profile::ReadOnly {
            output.refused_writes = crate::classify_refused_writes(&output, None);
        }
        Ok(output)
    }
}

#[async_trait::async_trait]
impl Shell for SeatbeltShell {
    async fn exec(&self, argv: &[String], options: &ExecOptions) -> caps::Result<ExecOutput> {
        self.run_argv(argv, options).await
    }

    async fn run(&self, script: &Script, options: &ExecOptions) -> caps::Result<ExecOutput> {
        self.run_argv(&script.argv()?, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> SandboxPolicy {
        SandboxPolicy {
            writable_paths: vec![PathBuf::from(
                "/Users/u/work \"quoted\" (paren)\n(allow default)",
            )],
            readable_extra_paths: vec![PathBuf::from("/opt/data")],
            hidden_paths: vec![PathBuf::from("/Users/u/.warden")],
            read_only_paths: Vec::new(),
            network: crate::Network::Off,
            landlock: crate::LandlockMode::Off,
        }
    }

    #[test]
    fn denies_by_default_and_reads_are_allowed() {
        let p = profile(&policy(), Profile::Writable);
        assert!(p.text.starts_with("(version 1)\n(deny default)\n"));
        assert!(p.text.contains("(allow file-read*)"));
        assert!(!p.text.contains("(allow network*)"));
        assert!(!p.text.contains("(allow default)"));
    }

    /// The parameter name given to `path`.
    fn name_of(p: &SeatbeltProfile, path: &Path) -> String {
        let value = path.to_string_lossy();
        p.params
            .iter()
            .find(|(_, v)| *v == value)
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| panic!("{} is not a parameter of {p:?}", path.display()))
    }

    #[test]
    fn paths_are_parameters_never_profile_text() {
        let pol = policy();
        let p = profile(&pol, Profile::Writable);
        assert!(
            !p.text.contains("/Users"),
            "a path was spliced into the profile:\n{}",
            p.text
        );
        assert!(!p.text.contains("quoted"));
        let ws = name_of(&p, &pol.writable_paths[0]);
        assert!(
            p.text
                .contains(&format!("(allow file-write* (subpath (param \"{ws}\")))"))
        );
        let hidden = name_of(&p, &pol.hidden_paths[0]);
        assert!(p.text.contains(&format!(
            "(deny file-read* file-write* (subpath (param \"{hidden}\")))"
        )));
        let argv = p.command_line(&["/bin/ls".into()]);
        assert_eq!(argv[0], "-p");
        assert!(
            argv.iter()
                .any(|a| a.starts_with(&format!("{ws}=/Users/u/work")))
        );
        assert_eq!(argv[argv.len() - 2..], ["--".to_string(), "/bin/ls".into()]);
    }

    #[test]
    fn a_workspace_inside_a_hidden_home_shows_through_and_state_inside_it_stays_hidden() {
        // SBPL: the last matching rule wins, so rules must come parents first.
        let pol = SandboxPolicy {
            writable_paths: vec![PathBuf::from("/Users/u/work")],
            readable_extra_paths: vec![PathBuf::from("/Users/u/work/ref")],
            hidden_paths: vec![
                PathBuf::from("/Users/u"),
                PathBuf::from("/Users/u/work/.warden"),
            ],
            read_only_paths: vec![PathBuf::from("/Users/u/work/bin")],
            network: crate::Network::Off,
            landlock: crate::LandlockMode::Off,
        };
        let p = profile(&pol, Profile::Writable);
        let at = |path: &str, rule: &str| {
            let name = name_of(&p, Path::new(path));
            p.text
                .find(&format!("({rule} (subpath (param \"{name}\")))"))
                .unwrap_or_else(|| panic!("no {rule} for {path} in\n{}", p.text))
        };
        let home = at("/Users/u", "deny file-read* file-write*");
        let work = at("/Users/u/work", "allow file-write*");
        let reference = at("/Users/u/work/ref", "deny file-write*");
        let state = at("/Users/u/work/.warden", "deny file-read* file-write*");
        // Warden's programs in the workspace: read, never written.
        let programs = at("/Users/u/work/bin", "deny file-write*");
        assert!(!p.text.contains(&format!(
            "(deny file-read* file-write* (subpath (param \"{}\")))",
            name_of(&p, Path::new("/Users/u/work/bin"))
        )));
        assert!(
            home < work && work < reference && work < state && work < programs,
            "{}",
            p.text
        );
    }

    #[test]
    fn read_only_profile_has_no_workspace_writes_and_git_is_protected_when_writable() {
        let repo = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(repo.path()).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        let pol = SandboxPolicy {
            writable_paths: vec![root.clone()],
            ..policy()
        };
        let p = profile(&pol, Profile::ReadOnly);
        assert!(
            !p.text
                .contains("(allow file-write* (subpath (param \"BOUND")
        );
        assert!(!p.text.contains("PROTECTED"));
        let w = profile(&pol, Profile::Writable);
        for protected in [".git/hooks", ".git/config", ".git/commondir"] {
            let name = name_of(&w, &root.join(protected));
            assert!(
                w.text
                    .contains(&format!("(deny file-write* (subpath (param \"{name}\")))")),
                "{protected}: {}",
                w.text
            );
        }
        // `.git` itself cannot be renamed or replaced, but commits still write inside it.
        let dot_git = name_of(&w, &root.join(".git"));
        assert!(w.text.contains(&format!(
            "(deny file-write* (literal (param \"{dot_git}\")))"
        )));
        assert!(!w.text.contains(&format!(
            "(deny file-write* (subpath (param \"{dot_git}\")))"
        )));
    }

    #[test]
    fn network_follows_policy() {
        let mut pol = policy();
        pol.network = crate::Network::On;
        assert!(
            profile(&pol, Profile::ReadOnly)
                .text
                .contains("(allow network*)")
        );
    }

    #[test]
    fn fails_closed_without_sandbox_exec() {
        if Path::new(SANDBOX_EXEC).exists() {
            return;
        }
        assert!(SeatbeltShell::new(policy(), Profile::ReadOnly).is_err());
    }
}
