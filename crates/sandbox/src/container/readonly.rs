//! The read-only view of a running container: how `readonly` and approval mode's first
//! run get the same guarantee as with bubblewrap — the kernel refuses every write — and
//! the checks that decide whether a container can give it.
//!
//! `ENGINE exec` has no option that makes one command's mounts read-only, so the view is
//! made inside the container, by the container's own `unshare` and `mount`, before the
//! command starts:
//!
//! 1. `unshare -U -r -m`: a user namespace (the command's user mapped to root in it) and
//!    a mount namespace of its own, so the remounts below change nothing the container
//!    or other runs see. No privilege of the container is needed: user namespaces are
//!    open to any user (where the engine's seccomp profile allows them — Podman's does,
//!    Docker's default does not).
//! 2. Every mount but procfs at `/proc` is remounted read-only, keeping the flags the
//!    kernel locks (`nosuid`, `nodev`, `noexec`, atime). (`/proc` stays: step 3 writes
//!    the new namespace's uid map there, and what it leads to is guarded by the kernel's
//!    ptrace checks, see below.) A fresh tmpfs becomes a private `/tmp`
//!    and `/dev/shm` (as bubblewrap's private `/tmp`), unless a mount lies beneath them.
//!    Then the mount table is read back: any mount commands could still write through
//!    fails the run before the command starts.
//! 3. `unshare -U -r -m -p -i -f` again: mounts copied into a namespace owned by a newer
//!    user namespace are *locked* — the command, root in its namespace, cannot remount
//!    them writable or unmount them. New pid and IPC namespaces keep it from signalling
//!    or sharing memory with the container's other processes, and a small `sh` as pid 1
//!    runs it (a command as pid 1 would ignore its own signals).
//!
//! Other processes of the container stay out of reach: a process in a child user
//! namespace may not ptrace them or open `/proc/PID/root` (the kernel requires
//! `CAP_SYS_PTRACE` in *their* namespace), which would otherwise lead back to the
//! writable mounts.
//!
//! The view is only as trustworthy as the programs that build it. A command run writable
//! in the same container (an unrestricted agent, an approved retry) could replace
//! `/bin/sh`, `unshare` or `mount` with programs that skip step 2, so the view is offered
//! only when the container's system directories cannot be written: it was started with
//! `--read-only`, no writable mount lies in `/usr`, `/bin`, `/sbin`, `/lib*` or `/etc`,
//! and the three programs resolve into them. Otherwise `readonly` and `approval` are
//! refused with the reason (see [`super::Container::read_only`]).

use std::ffi::OsString;
use std::path::Path;

use caps::ExitStatus;

use super::command::{CONTAINER_SHELL, Target};
use super::engine::{ENGINE_QUERY_TIMEOUT, describe_status, first_line, run_blocking};
use super::view::{Inspected, run_command};
use crate::{SandboxError, SandboxPolicy};

/// Directories whose programs and libraries the view relies on; none may be writable.
const SYSTEM_TREES: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"];

/// Step 2 (see the module header), run by `/bin/sh` inside the first namespaces:
/// `$1` is `unshare`, `$2` `mount`, the rest the command (`ENV -i -- K=V... ARGV...`).
/// Only shell builtins besides `mount` and `unshare` (no temporary files, no `cat`):
/// nothing here may need a writable directory. Exit 125 with a `warden:` message when
/// the view cannot be made; the command then never starts. [`SETUP_FUNCTIONS`] then
/// [`SETUP_MAIN`].
const SETUP_FUNCTIONS: &str = r#"wr_fail() { echo "warden: the read-only view could not be made: $*" >&2; exit 125; }
wr_nl='
'
wr_table() {
  wr_t=
  while IFS= read -r wr_l || [ -n "$wr_l" ]; do wr_t="$wr_t$wr_l$wr_nl"; done < /proc/self/mountinfo
}
wr_unescape() {
  wr_mp=$1
  case "$wr_mp" in *\\*) wr_mp=$(printf '%b' "$wr_mp") ;; esac
}
wr_remount() {
  wr_unescape "$5"
  case "$wr_mp" in
    /proc) return 0 ;;
    /tmp/*) wr_tmp_busy=1 ;;
    /dev/shm/*) wr_shm_busy=1 ;;
  esac
  wr_o=remount,bind,ro
  wr_ifs=$IFS
  IFS=,
  for wr_x in $6; do
    case "$wr_x" in rw|ro) ;; *) wr_o=$wr_o,$wr_x ;; esac
  done
  IFS=$wr_ifs
  "$wr_mount" -o "$wr_o" "$wr_mp" || wr_fail "$wr_mount -o $wr_o $wr_mp failed"
}
wr_private() {
  [ -d "$1" ] || return 0
  "$wr_mount" -t tmpfs -o nosuid,nodev,mode=1777 warden-tmp "$1" || wr_fail "no private $1"
  wr_mine="$wr_mine$1$wr_nl"
}
wr_note() {
  wr_unescape "$5"
  [ "$wr_mp" = /proc ] && return 0
  # A later line at the same mount point is mounted over the earlier ones.
  wr_x="$wr_nl$wr_rw"
  case "$wr_x" in
    *"$wr_nl$wr_mp$wr_nl"*)
      wr_rw=${wr_x%%"$wr_nl$wr_mp$wr_nl"*}$wr_nl${wr_x#*"$wr_nl$wr_mp$wr_nl"}
      wr_rw=${wr_rw#"$wr_nl"} ;;
  esac
  case ",$6," in *,ro,*) return 0 ;; esac
  case "$wr_nl$wr_mine" in *"$wr_nl$wr_mp$wr_nl"*) return 0 ;; esac
  wr_rw="$wr_rw$wr_mp$wr_nl"
}
"#;

/// The steps, with the functions of [`SETUP_FUNCTIONS`]: remount everything read-only
/// (noting whether anything lies beneath `/tmp` or `/dev/shm`), mount the private
/// tmpfs, read the mount table back and fail on anything still writable, then lock the
/// view (step 3).
const SETUP_MAIN: &str = r#"wr_unshare=$1 wr_mount=$2
shift 2
set -f
wr_table
wr_tmp_busy= wr_shm_busy= wr_mine= wr_rw=
IFS=$wr_nl
for wr_line in $wr_t; do IFS=' '; wr_remount $wr_line; IFS=$wr_nl; done
IFS=' '
[ -n "$wr_tmp_busy" ] || wr_private /tmp
[ -n "$wr_shm_busy" ] || wr_private /dev/shm
wr_table
IFS=$wr_nl
for wr_line in $wr_t; do IFS=' '; wr_note $wr_line; IFS=$wr_nl; done
IFS=' '
[ -z "$wr_rw" ] || wr_fail "still writable: $wr_rw"
set +f
exec "$wr_unshare" -U -r -m -p -i -f -- /bin/sh -c '"$@"; exit $?' warden-ro "$@"
"#;

/// Finds `unshare`, `mount` and `readlink` in the system directories (never `PATH`) and
/// resolves them and `/bin/sh`: `warden-found NAME PATH REAL` or `warden-missing NAME`.
pub(super) const FIND_PROGRAMS: &str = r#"for wf_name in unshare mount readlink; do
  wf_path=
  for wf_dir in /usr/bin /bin /usr/sbin /sbin; do
    if [ -x "$wf_dir/$wf_name" ]; then wf_path=$wf_dir/$wf_name; break; fi
  done
  if [ -z "$wf_path" ]; then echo "warden-missing $wf_name"; continue; fi
  echo "warden-found $wf_name $wf_path $(readlink -f "$wf_path" 2>/dev/null)"
done
echo "warden-found sh /bin/sh $(readlink -f /bin/sh 2>/dev/null)"
"#;

/// The in-container programs that build the view (absolute paths inside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ReadOnlyTools {
    pub(super) unshare: String,
    pub(super) mount: String,
}

impl ReadOnlyTools {
    /// What goes between the wrapper and `ENV -i -- ...`: the first namespaces, then the
    /// setup with its two programs.
    pub(super) fn launcher(&self) -> Vec<OsString> {
        [
            self.unshare.as_str(),
            "-U",
            "-r",
            "-m",
            "--",
            CONTAINER_SHELL,
            "-c",
            &format!("{SETUP_FUNCTIONS}{SETUP_MAIN}"),
            "warden-ro",
            self.unshare.as_str(),
            self.mount.as_str(),
        ]
        .into_iter()
        .map(OsString::from)
        .collect()
    }
}

/// Decide from the probe's `warden-found` lines whether the view's programs are usable
/// and cannot be replaced by a command.
pub(super) fn tools_from_probe(
    probe_output: &str,
    inspected: &Inspected,
    container: &str,
) -> Result<ReadOnlyTools, SandboxError> {
    if !inspected.read_only_root {
        return Err(SandboxError::Container(format!(
            "container {container} was not started with --read-only, so a command run \
             writable could replace the programs that make the read-only view"
        )));
    }
    let system_writable: Vec<String> = inspected
        .mounts
        .iter()
        .filter(|m| m.writable)
        .filter(|m| {
            SYSTEM_TREES
                .iter()
                .any(|t| Path::new(t).starts_with(&m.destination) || m.destination.starts_with(t))
        })
        .map(|m| m.destination.display().to_string())
        .collect();
    if !system_writable.is_empty() {
        return Err(SandboxError::Container(format!(
            "container {container} has writable mounts in its system directories ({}), where \
             a command could replace the programs that make the read-only view",
            system_writable.join(", ")
        )));
    }
    let found = |name: &str| -> Result<String, SandboxError> {
        let line = probe_output.lines().find_map(|l| {
            l.strip_prefix("warden-found ")
                .and_then(|rest| rest.strip_prefix(name))
                .and_then(|rest| rest.strip_prefix(' '))
        });
        let Some(line) = line else {
            return Err(SandboxError::Container(format!(
                "the image has no {name} in /usr/bin, /bin, /usr/sbin or /sbin (install \
                 util-linux or busybox in the image)"
            )));
        };
        let (path, real) = line.split_once(' ').unwrap_or((line, ""));
        if real.is_empty() {
            return Err(SandboxError::Container(format!(
                "where {path} really lies cannot be resolved (the image needs readlink)"
            )));
        }
        for p in [path, real] {
            let p = Path::new(p);
            let in_system = SYSTEM_TREES.iter().any(|t| p.starts_with(t));
            if !in_system || !inspected.on_read_only_root(p) {
                return Err(SandboxError::Container(format!(
                    "{name} resolves to {}, outside the container's read-only system \
                     directories",
                    p.display()
                )));
            }
        }
        Ok(path.to_owned())
    };
    found("readlink")?;
    found("sh")?;
    Ok(ReadOnlyTools {
        unshare: found("unshare")?,
        mount: found("mount")?,
    })
}

/// Whether this container can make the read-only view (its programs, where they lie,
/// and a trial of the view itself), with the tools to make it; `Err` says why not and
/// how a container that can would be started.
pub(super) fn read_only_view(
    target: &Target,
    probe_output: &str,
    inspected: &Inspected,
    engine: &str,
    policy: &SandboxPolicy,
) -> Result<ReadOnlyTools, SandboxError> {
    tools_from_probe(probe_output, inspected, &target.container)
        .and_then(|tools| target.trial_read_only(&tools).map(|()| tools))
        .map_err(|why| {
            SandboxError::Container(format!(
                "{why} (to run commands read-only, start the container like `{}`)",
                run_command(engine, &target.container, policy)
            ))
        })
}

/// The command the trial runs inside the view: remounting `/` writable must fail.
const TRIAL: &str = r#"if "$1" -o remount,bind,rw / 2>/dev/null; then
  echo warden-readonly-unlocked; exit 1
fi
echo warden-readonly-ok
"#;

impl Target {
    /// Build the view once, for real, and check it is locked. `Err` says why this
    /// container cannot run commands read-only.
    pub(super) fn trial_read_only(&self, tools: &ReadOnlyTools) -> Result<(), SandboxError> {
        let argv = [
            CONTAINER_SHELL.to_owned(),
            "-c".to_owned(),
            TRIAL.to_owned(),
            "warden-trial".to_owned(),
            tools.mount.clone(),
        ];
        let options = caps::ExecOptions::new("/", ENGINE_QUERY_TIMEOUT);
        let spec = self.exec_spec(&argv, &options, "trial", Some(tools));
        let out = run_blocking(spec, ENGINE_QUERY_TIMEOUT).map_err(|e| {
            SandboxError::Container(format!("the read-only trial could not run: {e}"))
        })?;
        if out.status == ExitStatus::Code(0) && out.stdout.contains("warden-readonly-ok") {
            return Ok(());
        }
        let said = if out.stdout.contains("warden-readonly-unlocked") {
            "the command could remount it writable".to_owned()
        } else {
            first_line(&out.stderr).to_owned()
        };
        Err(SandboxError::Container(format!(
            "the read-only view could not be made in container {} ({}): {said} — user \
             namespaces must be allowed inside the container (Podman's default; Docker's \
             default seccomp profile refuses them)",
            self.container,
            describe_status(&out)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inspected(read_only_root: bool, mounts: &str) -> Inspected {
        Inspected::parse(&format!(
            "true\nrunning\n{read_only_root}\nnone\n{mounts}\nnull\n"
        ))
        .unwrap()
    }

    const FOUND: &str = "warden-found unshare /bin/unshare /bin/busybox\n\
                         warden-found mount /bin/mount /bin/busybox\n\
                         warden-found readlink /bin/readlink /bin/busybox\n\
                         warden-found sh /bin/sh /bin/busybox\n";

    #[test]
    fn the_view_needs_a_read_only_root_and_programs_on_it() {
        let ok = inspected(true, "[]");
        assert_eq!(
            tools_from_probe(FOUND, &ok, "box").unwrap(),
            ReadOnlyTools {
                unshare: "/bin/unshare".into(),
                mount: "/bin/mount".into()
            }
        );
        let why = tools_from_probe(FOUND, &inspected(false, "[]"), "box")
            .unwrap_err()
            .to_string();
        assert!(why.contains("--read-only"), "{why}");
        let lib = inspected(
            true,
            r#"[{"Type":"volume","Source":"/v","Destination":"/usr/local","RW":true}]"#,
        );
        let why = tools_from_probe(FOUND, &lib, "box")
            .unwrap_err()
            .to_string();
        assert!(why.contains("/usr/local"), "{why}");
        let missing = FOUND.replace(
            "warden-found unshare /bin/unshare /bin/busybox",
            "warden-missing unshare",
        );
        let why = tools_from_probe(&missing, &ok, "box")
            .unwrap_err()
            .to_string();
        assert!(why.contains("no unshare"), "{why}");
        let elsewhere = FOUND.replace("/bin/mount /bin/busybox", "/bin/mount /opt/bb/busybox");
        let why = tools_from_probe(&elsewhere, &ok, "box")
            .unwrap_err()
            .to_string();
        assert!(why.contains("/opt/bb/busybox"), "{why}");
        let unresolved = FOUND.replace("/bin/sh /bin/busybox", "/bin/sh ");
        let why = tools_from_probe(&unresolved, &ok, "box")
            .unwrap_err()
            .to_string();
        assert!(why.contains("readlink"), "{why}");
    }

    /// Run the setup's functions under the host's `/bin/sh` with `driver`.
    fn setup_functions(driver: &str) -> String {
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("{SETUP_FUNCTIONS}{driver}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    const TABLE: &str = "1 0 0:1 / / ro,relatime - overlay overlay rw
2 1 0:2 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
3 1 0:3 / /dev/shm rw,nosuid - tmpfs shm rw
4 1 0:4 / /data rw,relatime - ext4 /dev/x rw
5 1 0:5 / /with\\040space rw,nosuid - ext4 /dev/x rw
6 3 0:6 / /dev/shm ro,nosuid - tmpfs t rw
7 1 0:7 / /tmp rw,nosuid,nodev - tmpfs warden-tmp rw
8 1 0:8 / /ro ro - ext4 /dev/x rw
9 1 0:9 / /data2 ro - ext4 x rw
10 9 0:10 / /data2 rw,noexec - ext4 x rw
11 1 0:11 / /tmp/ws rw - ext4 x rw
";

    #[test]
    fn the_mount_table_check_finds_every_mount_still_writable_on_top() {
        // /proc is procfs, /tmp the private tmpfs, the first /dev/shm is covered by a
        // read-only one: only the rest counts, unescaped, in order.
        let got = setup_functions(&format!(
            "wr_mine='/tmp\n' wr_rw=\nset -f\nwr_t='{TABLE}'\nIFS=$wr_nl\n\
             for wr_line in $wr_t; do IFS=' '; wr_note $wr_line; IFS=$wr_nl; done\n\
             printf '%s' \"$wr_rw\""
        ));
        assert_eq!(got, "/data\n/with space\n/data2\n/tmp/ws\n");
    }

    #[test]
    fn every_mount_is_remounted_read_only_with_its_locked_flags() {
        let got = setup_functions(&format!(
            "wr_mount=echo wr_tmp_busy= wr_shm_busy=\nset -f\nwr_t='{TABLE}'\nIFS=$wr_nl\n\
             for wr_line in $wr_t; do IFS=' '; wr_remount $wr_line; IFS=$wr_nl; done\n\
             echo \"busy: tmp=$wr_tmp_busy shm=$wr_shm_busy\""
        ));
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(
            lines,
            [
                "-o remount,bind,ro,relatime /",
                "-o remount,bind,ro,nosuid /dev/shm",
                "-o remount,bind,ro,relatime /data",
                "-o remount,bind,ro,nosuid /with space",
                "-o remount,bind,ro,nosuid /dev/shm",
                "-o remount,bind,ro,nosuid,nodev /tmp",
                "-o remount,bind,ro /ro",
                "-o remount,bind,ro /data2",
                "-o remount,bind,ro,noexec /data2",
                "-o remount,bind,ro /tmp/ws",
                "busy: tmp=1 shm=",
            ]
        );
        // A failed remount stops everything before the command could start.
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "{SETUP_FUNCTIONS}wr_mount=false\nwr_remount 1 0 0:1 / /x rw\necho unreachable"
            ))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125));
        assert!(String::from_utf8_lossy(&out.stderr).contains("read-only view could not be made"));
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn the_launcher_passes_the_programs_to_the_setup() {
        let tools = ReadOnlyTools {
            unshare: "/usr/bin/unshare".into(),
            mount: "/usr/bin/mount".into(),
        };
        let args = tools.launcher();
        assert_eq!(args[0], "/usr/bin/unshare");
        assert_eq!(args[6], "-c");
        assert_eq!(
            &args[args.len() - 2..],
            ["/usr/bin/unshare", "/usr/bin/mount"]
        );
    }
}
