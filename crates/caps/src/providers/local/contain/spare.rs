//! A spare spawner: a thread parked inside a fresh run's v1 cgroups, so that starting
//! the next run's process needs neither the cgroups' `mkdir`s nor a migration on the
//! critical path. A thread moving itself is cheap on current kernels (see
//! `cgroup::move_into`), but kernels that take their global cgroup lock for it wait for
//! an RCU grace period — 7–15 ms on a busy host, longer than the rest of a run's start.
//! Only v1 hierarchies let one thread move alone, so spares exist where runs use v1
//! (hybrid hosts); the v2 cgroup, if the run has one, is entered by the child itself at
//! birth (`CLONE_INTO_CGROUP`) or not at all (the v1 `pids` cgroup then holds the run
//! for ending it).
//!
//! The thread joins the cgroups in the background, waits for one spawn request, starts
//! the child (which inherits the thread's cgroups), and — for a child that asks for a
//! parent-death signal (bubblewrap's `--die-with-parent`), which follows the *thread*
//! that started it — stays until the run ends; for any other child it ends at once (a
//! run that goes on for hours holds no thread). Then it exits — leaving the cgroups
//! without a migration either.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::mpsc;

use super::super::spawn::{SpawnRequest, SpawnedChild};

/// The channels of a parked spawner thread.
#[derive(Debug)]
pub(crate) struct Parked {
    requests: mpsc::SyncSender<Request>,
    results: mpsc::Receiver<io::Result<SpawnedChild>>,
}

/// Keeps the thread that started a run's child alive until dropped (the end of the
/// run).
#[derive(Debug)]
pub(crate) struct Keeper {
    _release: mpsc::SyncSender<()>,
}

impl Parked {
    /// Start `request`'s child on the parked thread (in the v2 cgroup `v2`, if given).
    /// The thread lives until the returned [`Keeper`] is dropped.
    pub(crate) fn spawn(
        self,
        request: SpawnRequest,
        v2: Option<std::fs::File>,
    ) -> io::Result<(SpawnedChild, Keeper)> {
        let (release_tx, release_rx) = mpsc::sync_channel(0);
        self.requests
            .send((request, v2, release_rx))
            .map_err(|_| io::Error::other("the spare spawner thread is gone"))?;
        let child = self
            .results
            .recv()
            .map_err(|_| io::Error::other("the spare spawner thread ended without a result"))??;
        Ok((
            child,
            Keeper {
                _release: release_tx,
            },
        ))
    }
}

type Request = (SpawnRequest, Option<std::fs::File>, mpsc::Receiver<()>);

/// Start a thread that runs `join` (making the cgroups and moving itself into them)
/// and then, if that worked, parks; `parked` receives what `join` made with the
/// thread's channels once it has joined, or the join's error.
pub(crate) fn start<T: Send + 'static>(
    join: impl FnOnce() -> io::Result<T> + Send + 'static,
    parked: impl FnOnce(io::Result<(T, Parked)>) + Send + 'static,
) {
    let (request_tx, request_rx) = mpsc::sync_channel::<Request>(1);
    let (result_tx, result_rx) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("warden-spare-spawner".into())
        .spawn(move || {
            let made = match join() {
                Ok(made) => made,
                Err(e) => {
                    parked(Err(e));
                    return;
                }
            };
            parked(Ok((
                made,
                Parked {
                    requests: request_tx,
                    results: result_rx,
                },
            )));
            // Unused (the process ends, or the spare is dropped): the channel closes.
            let Ok((request, v2, release)) = request_rx.recv() else {
                return;
            };
            let started = request.spawn(v2.as_ref().map(|d| d.as_raw_fd()));
            drop(request);
            let ok = started.is_ok();
            let _ = result_tx.send(started);
            if ok {
                // Until the run ends (the keeper is dropped): see the module comment.
                let _ = release.recv();
            }
            // Returning ends the thread, which leaves its cgroups with it.
        });
    if let Err(e) = spawned {
        tracing::debug!("cannot start a spare spawner thread: {e}");
    }
}
