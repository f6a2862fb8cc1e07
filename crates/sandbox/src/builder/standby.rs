//! A standby pid 1's head start (`caps::process::PrepareStandby`). Warden's companion
//! keeps a process ready, born as pid 1 of a sandbox's namespaces, while Warden decides
//! (see `caps`' companion). While it waits, it checks those namespaces and makes the
//! mounts every plan of Warden's builder starts with: the private tmpfs root with the
//! host's tree at `/oldroot`, the host's tree read-only at `/newroot`, a minimal `/dev`,
//! a fresh `/proc` — the plan's first three operations, which
//! `NamespaceSandbox::command_line` writes first for every policy (`--ro-bind / /
//! --dev /dev --proc /proc`). In a new network namespace it also brings the loopback
//! interface up, as every sandbox with one does. Handed its run, the builder carries on
//! from there if the plan starts with exactly those; a plan that does not is refused,
//! and nothing runs.
//!
//! It also empties its capability bounding set, which every run's pid 1 does before its
//! command, and which leaves the capabilities it still needs for the run's mounts.
//!
//! Nothing here depends on the run: no path of its plan, no descriptor of its request.
//! The host's tree is cloned a few milliseconds earlier than it would be, a moment that
//! was never fixed (the plan was written earlier still, and bubblewrap clones it later).
//!
//! Once prepared, the process's root is that tmpfs, and the process is not dumpable (so
//! its half-built tree is not reachable through `/proc/PID/root`): between here and the
//! builder nothing may look a path up (the companion's child setup uses its descriptor 0 for
//! `/dev/null`, and `/` for the working directory), and no subcommand but the builder
//! may run in it ([`refuse_unless_builder`]).

use std::sync::Mutex;

use caps::process::NewNamespaces;

use super::fs::Tree;
use super::spec::{Op, Spec};
use crate::SandboxError;

/// What this process did before its run: nothing (`None`), the prelude made
/// (`Some(Ok(net))`, `net`: a new network namespace was checked too, and its loopback
/// interface brought up), or a failure part of the way through, after which its mounts
/// are in no known state (`Some(Err)`: its run is refused with the reason).
static PREPARED: Mutex<Option<Result<bool, String>>> = Mutex::new(None);

/// A standby's head start, handed to its run's pid 1.
pub struct Resumed {
    /// The tree, its first operations made.
    pub tree: Tree,
    /// The new network namespace's loopback interface is up already.
    pub loopback_up: bool,
}

/// How many of a plan's operations [`prelude`] holds.
pub const PRELUDE_LEN: usize = 3;

/// The prelude as the command line says it: `NamespaceSandbox::command_line` writes
/// exactly these before any other mount, for every policy.
pub const PRELUDE_ARGS: [&str; 7] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"];

/// The plan's first operations, made ahead of the run.
pub fn prelude() -> [Op; PRELUDE_LEN] {
    [
        Op::RootReadOnly,
        Op::Dev("/dev".into()),
        Op::Proc("/proc".into()),
    ]
}

/// [`caps::process::PrepareStandby`] for the helper binary's companion: in a standby
/// born as pid 1 of new user, mount and pid namespaces, check them and make the prelude.
/// Anywhere else it does nothing: never a mount in namespaces that are not the
/// sandbox's own.
pub fn prepare(born_in: NewNamespaces) {
    if !(born_in.user && born_in.mount && born_in.pid) || nix::unistd::getpid().as_raw() != 1 {
        return;
    }
    // Checked before the first mount; a failure leaves the process as it was, and the
    // builder checks again (and says why) when its run comes.
    if super::check_namespaces(born_in.net).is_err() {
        return;
    }
    // The half-built tree has writable tmpfs mounts (its root, /dev) until its run comes:
    // not reachable through /proc/PID/root by the user's other processes (pid 1 makes
    // itself so after building in any case). A process that cannot be made so is not
    // prepared.
    if rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .is_err()
    {
        return;
    }
    // `Tree::start` is the root's operation; applying it again does nothing.
    let made = Tree::start()
        .and_then(|tree| prelude().iter().try_for_each(|op| tree.apply(op, &[])))
        // A new network namespace's `lo` is up in every sandbox that has one (the
        // kernel's part of that is a quarter of a millisecond here).
        .and_then(|()| {
            if born_in.net {
                super::loopback_up()
            } else {
                Ok(())
            }
        });
    // The bounding set emptied now rather than after the run's mounts: it takes nothing
    // this process still needs (its capabilities stay until pid 1 drops them all), and
    // pid 1 then only checks it. Best effort: pid 1 empties it (or refuses to run) all
    // the same.
    if made.is_ok() {
        let _ = crate::confine::empty_bounding_set();
    }
    *lock() = Some(made.map(|()| born_in.net).map_err(|e| e.to_string()));
}

/// The tree this process prepared, for a run with `spec` — `None` when it prepared
/// nothing (the builder then makes everything). A plan that does not start with the
/// prelude, or asks for a network namespace that was not checked, is refused.
pub fn resume(spec: &Spec) -> Option<Result<Resumed, SandboxError>> {
    let prepared = lock().take()?;
    Some(prepared.map_err(prepared_failed).and_then(|net| {
        fits(spec, net)?;
        Ok(Resumed {
            tree: Tree::resume()?,
            loopback_up: net,
        })
    }))
}

/// Whether a plan can be carried on from the prelude, in namespaces whose network one was
/// checked (`net`) or not.
fn fits(spec: &Spec, net: bool) -> Result<(), SandboxError> {
    if !spec.ops.starts_with(&prelude()) {
        return Err(SandboxError::Spec(
            "the plan does not start with the mounts this sandbox's pid 1 made ahead of it (--ro-bind / / --dev /dev --proc /proc)".into(),
        ));
    }
    if spec.unshare_net && !net {
        return Err(SandboxError::Confine(
            "started as pid 1 without a network namespace of its own".into(),
        ));
    }
    Ok(())
}

/// In a prepared process, only the builder may run: any other subcommand exits 125
/// (its paths would lead into the half-built sandbox).
pub fn refuse_unless_builder(name: &std::ffi::OsStr) {
    if name != super::SUBCOMMAND && lock().is_some() {
        crate::setup_failure::fail(format!(
            "{name:?} cannot run in a sandbox's pid 1 made ready for the namespace builder"
        ));
    }
}

fn prepared_failed(why: String) -> SandboxError {
    SandboxError::Tree(format!("the mounts made ahead of the run failed: {why}"))
}

fn lock() -> std::sync::MutexGuard<'static, Option<Result<bool, String>>> {
    PREPARED.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ops: Vec<Op>, unshare_net: bool) -> Spec {
        Spec {
            ops,
            unshare_net,
            ..Spec::default()
        }
    }

    #[test]
    fn the_command_line_prelude_is_the_prelude() {
        let args: Vec<String> = [
            "--die-with-parent",
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--cap-drop",
            "ALL",
        ]
        .into_iter()
        .chain(PRELUDE_ARGS)
        .chain(["--tmpfs", "/tmp", "--", "/h", "__sandbox-helper", "x"])
        .map(str::to_owned)
        .collect();
        let spec = super::super::parse(&args).unwrap();
        assert_eq!(spec.ops[..PRELUDE_LEN], prelude());
        assert!(fits(&spec, false).is_ok());
    }

    #[test]
    fn a_plan_that_starts_with_the_prelude_fits() {
        let mut ops = prelude().to_vec();
        ops.push(Op::Tmpfs("/tmp".into()));
        assert!(fits(&spec(ops.clone(), true), true).is_ok());
        assert!(fits(&spec(ops, false), true).is_ok());
    }

    #[test]
    fn a_plan_that_does_not_start_with_the_prelude_is_refused() {
        // Another /dev, the prelude's operations in another order, or fewer of them.
        let other_dev = vec![
            Op::RootReadOnly,
            Op::Dev("/elsewhere".into()),
            Op::Proc("/proc".into()),
        ];
        let reordered = vec![
            Op::RootReadOnly,
            Op::Proc("/proc".into()),
            Op::Dev("/dev".into()),
        ];
        let short = vec![Op::RootReadOnly, Op::Dev("/dev".into())];
        for ops in [other_dev, reordered, short] {
            let e = fits(&spec(ops.clone(), false), false).unwrap_err();
            assert!(
                e.to_string().contains("does not start with"),
                "{ops:?}: {e}"
            );
        }
    }

    #[test]
    fn a_network_namespace_that_was_not_checked_is_refused() {
        let e = fits(&spec(prelude().to_vec(), true), false).unwrap_err();
        assert!(e.to_string().contains("network namespace"), "{e}");
    }

    #[test]
    fn outside_a_new_pid_namespace_nothing_is_prepared() {
        // The test process is not pid 1 of anything: no mount may be made, and no other
        // subcommand is refused afterwards.
        prepare(crate::namespace::DEFAULT_BORN_IN);
        assert!(lock().is_none());
        refuse_unless_builder(std::ffi::OsStr::new("__sandbox-helper"));
    }
}
