//! Checking a container before any command runs in it: a name that cannot be mistaken
//! for an option, a container that exists and runs (and what it sees of the host, see
//! `view.rs`), and one that can host the wrapper (`/bin/sh`, an `env` program and a
//! readable `/proc`, which a probe script verifies; the same probe finds the programs the
//! read-only view needs).

use caps::ExitStatus;

use super::command::{CONTAINER_SHELL, RUN_MARKER_PREFIX, Target};
use super::engine::{ENGINE_QUERY_TIMEOUT, describe_status, first_line, run_blocking};
use super::readonly::FIND_PROGRAMS;
use super::view::{INSPECT_FORMAT, Inspected};
use crate::Unavailable;

/// Checks what the wrapper and the killer rely on, and prints the `env` program to use.
/// Exit 3: no `env`; exit 4: `/proc` cannot be read the way the killer reads it.
const PROBE_SCRIPT: &str = r#"warden_env=$(command -v env 2>/dev/null) || warden_env=
case "$warden_env" in
  /*) ;;
  *) warden_env=
     for c in /usr/bin/env /bin/env; do
       if [ -x "$c" ]; then warden_env=$c; break; fi
     done ;;
esac
if [ -z "$warden_env" ]; then
  echo "warden-probe: no env program (looked on PATH, /usr/bin/env, /bin/env)" >&2
  exit 3
fi
warden_seen=0
{ while IFS= read -r l || [ -n "$l" ]; do
    case "$l" in *warden-run:probe:*) warden_seen=1 ;; esac
  done < /proc/$$/cmdline; } 2>/dev/null
if [ "$warden_seen" != 1 ] || ! { IFS= read -r l < /proc/$$/stat; } 2>/dev/null; then
  echo "warden-probe: /proc is not mounted or this shell cannot read /proc/PID/cmdline" >&2
  exit 4
fi
printf 'warden-probe-ok %s\n' "$warden_env"
"#;

/// Container names and ids as Docker and Podman accept them. Anything else is refused
/// before it reaches a command line, where a leading `-` would be read as an option.
pub(super) fn check_container_name(name: &str) -> Result<(), Unavailable> {
    if name.is_empty() {
        return Err(Unavailable(
            "no container is configured — set sandbox.container.name to a running container".into(),
        ));
    }
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if valid {
        Ok(())
    } else {
        Err(Unavailable(format!(
            "invalid container name {name:?}: expected a name or id made of letters, digits, \
             '_', '.' and '-', starting with a letter or digit"
        )))
    }
}

impl Target {
    /// The process id of the container's first process, as the host sees it (what the
    /// container's namespaces are entered through), asked now: a container restarted
    /// since Warden connected has a new one.
    pub(super) async fn first_pid(&self) -> Result<u32, String> {
        let spec = self.spec(vec![
            "container".into(),
            "inspect".into(),
            "--format".into(),
            "{{.State.Pid}}".into(),
            self.container.clone().into(),
        ]);
        let out = caps::process::supervise(spec, ENGINE_QUERY_TIMEOUT, Default::default())
            .await
            .map_err(|e| {
                format!(
                    "could not ask the engine about container {}: {e}",
                    self.container
                )
            })?;
        if out.timed_out || !out.status.success() {
            return Err(format!(
                "could not ask the engine about container {} ({}): {}",
                self.container,
                describe_status(&out),
                first_line(&out.stderr)
            ));
        }
        match out.stdout.trim().parse::<u32>() {
            Ok(pid) if pid > 1 => Ok(pid),
            _ => Err(format!("container {} is not running", self.container)),
        }
    }

    /// What the engine says about the container; fails unless it exists and is running.
    pub(super) fn inspect(&self, engine: &str) -> Result<Inspected, Unavailable> {
        let spec = self.spec(vec![
            "container".into(),
            "inspect".into(),
            "--format".into(),
            INSPECT_FORMAT.into(),
            self.container.clone().into(),
        ]);
        let out = run_blocking(spec, ENGINE_QUERY_TIMEOUT).map_err(|e| {
            Unavailable(format!(
                "could not ask {engine} about container {}: {e}",
                self.container
            ))
        })?;
        let c = &self.container;
        if out.timed_out {
            return Err(Unavailable(format!(
                "{engine} did not answer within {}s when asked about container {c} — is the \
                 engine healthy?",
                ENGINE_QUERY_TIMEOUT.as_secs()
            )));
        }
        if !out.status.success() {
            let err = first_line(&out.stderr);
            return Err(Unavailable(
                if err.to_ascii_lowercase().contains("no such") {
                    format!(
                        "container {c} does not exist ({engine}: {err}) — create and start it, e.g. \
                     `{engine} run -d --name {c} IMAGE sleep infinity`, or configure the name \
                     of a running container"
                    )
                } else {
                    format!(
                        "could not inspect container {c} with {engine} ({}): {err}",
                        describe_status(&out)
                    )
                },
            ));
        }
        let inspected = Inspected::parse(&out.stdout).map_err(|e| {
            Unavailable(format!(
                "unexpected answer from {engine} about container {c}: {e}"
            ))
        })?;
        if !inspected.running {
            return Err(Unavailable(format!(
                "container {c} exists but is not running (status: {}) — start it with \
                 `{engine} start {c}`",
                inspected.status
            )));
        }
        Ok(inspected)
    }

    /// Check the container can host the wrapper; returns the `env` program to use and
    /// the probe's whole output (which also says where the read-only view's programs are).
    pub(super) fn probe_container(&self, engine: &str) -> Result<(String, String), Unavailable> {
        let spec = self.spec(vec![
            "exec".into(),
            self.container.clone().into(),
            CONTAINER_SHELL.into(),
            "-c".into(),
            format!("{PROBE_SCRIPT}{FIND_PROGRAMS}").into(),
            format!("{RUN_MARKER_PREFIX}probe:").into(),
        ]);
        let c = &self.container;
        let out = run_blocking(spec, ENGINE_QUERY_TIMEOUT).map_err(|e| {
            Unavailable(format!(
                "could not run a probe in container {c} with {engine}: {e}"
            ))
        })?;
        if let Some(env) = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("warden-probe-ok "))
            .filter(|_| out.status.success())
        {
            return Ok((env.trim().to_owned(), out.stdout.clone()));
        }
        let err = first_line(&out.stderr);
        let why = match out.status {
            _ if out.timed_out => format!(
                "the probe did not finish within {}s",
                ENGINE_QUERY_TIMEOUT.as_secs()
            ),
            ExitStatus::Code(126 | 127) => format!(
                "it has no usable {CONTAINER_SHELL} ({engine}: {err}); the container backend needs \
                 a POSIX shell at {CONTAINER_SHELL} in the image"
            ),
            ExitStatus::Code(3) => {
                format!("it has no env program ({err}); install coreutils or busybox in the image")
            }
            ExitStatus::Code(4) => format!(
                "the process tree of a run could not be tracked ({err}); the container needs \
                 /proc mounted (the engines' default)"
            ),
            _ => format!("the probe failed ({}): {err}", describe_status(&out)),
        };
        Err(Unavailable(format!(
            "container {c} cannot run commands for Warden: {why}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_that_look_like_options_are_refused() {
        for bad in ["", "-it", "--privileged", "a b", "a;b", "a/b", "ä"] {
            assert!(check_container_name(bad).is_err(), "{bad:?}");
        }
        for good in ["warden", "a1", "my_box.v2-x", "0123abcd"] {
            assert!(check_container_name(good).is_ok(), "{good:?}");
        }
    }
}
