//! Killing a run's tree inside the container: the engine does not stop an exec'd process
//! with its client, so a run that did not end cleanly (timeout, cancellation, the client
//! killed) is killed by a second exec — awaited, or from a thread when the guard is dropped.
//! A signal for a run (`process` `signal`) reaches its processes the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use caps::process::supervise;
use caps::{ExecOutput, OutputLimits};

use super::command::Target;
use super::engine::{describe_status, first_line, run_blocking};

/// How long one in-container kill may take.
const KILL_TIMEOUT: Duration = Duration::from_secs(15);

/// A run cancelled this soon after it started may still be on its way into the container
/// (the engine starts the exec after its client is gone), so the kill is repeated once
/// after [`KILL_RETRY_DELAY`].
const STARTUP_WINDOW: Duration = Duration::from_secs(2);

/// Pause before the second kill of a young run.
const KILL_RETRY_DELAY: Duration = Duration::from_millis(500);

/// Kills the run's tree inside the container unless disarmed. Dropping it armed (the
/// supervising future was dropped) kills on a helper thread, since `Drop` cannot await.
pub(super) struct KillGuard {
    pub(super) target: Arc<Target>,
    pub(super) token: String,
    pub(super) started: Instant,
    pub(super) armed: bool,
}

impl KillGuard {
    /// Kill now and wait for it, so the caller returns only once the tree is gone.
    pub(super) async fn kill_now(&mut self) {
        self.armed = false;
        kill_in_container(&self.target, &self.token).await;
        if self.started.elapsed() < STARTUP_WINDOW {
            tokio::time::sleep(KILL_RETRY_DELAY).await;
            kill_in_container(&self.target, &self.token).await;
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let target = Arc::clone(&self.target);
        let token = std::mem::take(&mut self.token);
        let young = self.started.elapsed() < STARTUP_WINDOW;
        let spawned = std::thread::Builder::new()
            .name("warden-container-kill".into())
            .spawn(move || {
                kill_blocking(&target, &token);
                if young {
                    std::thread::sleep(KILL_RETRY_DELAY);
                    kill_blocking(&target, &token);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the thread that kills a cancelled container run");
        }
    }
}

/// Where a run's signals go: an exec into the container that signals the command and
/// everything below it (its wrapper excepted), started at once and not waited for.
pub(super) fn signal_route(target: Arc<Target>, token: String) -> caps::process::SignalRoute {
    caps::process::SignalRoute(Arc::new(move |number| {
        let Some(name) = caps::signal_name(number) else {
            return;
        };
        let spec = target.signal_spec(&token, name);
        let target = Arc::clone(&target);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let result = supervise(spec, KILL_TIMEOUT, OutputLimits::default()).await;
            if let Err(e) = &result {
                tracing::warn!(container = %target.container, error = %e, "signalling a run in the container failed");
            }
        });
    }))
}

async fn kill_in_container(target: &Target, token: &str) {
    let result = supervise(
        target.kill_spec(token),
        KILL_TIMEOUT,
        OutputLimits::default(),
    )
    .await;
    report_kill(target, &result);
}

fn kill_blocking(target: &Target, token: &str) {
    let result = run_blocking(target.kill_spec(token), KILL_TIMEOUT);
    report_kill(target, &result);
}

fn report_kill(target: &Target, result: &caps::Result<ExecOutput>) {
    match result {
        Ok(out) if out.status.success() => {
            tracing::debug!(container = %target.container, killed = %out.stdout.trim(), "container run killed");
        }
        Ok(out) => tracing::warn!(
            container = %target.container,
            status = %describe_status(out),
            stderr = %first_line(&out.stderr),
            "could not kill a container run's processes"
        ),
        Err(e) => tracing::warn!(
            container = %target.container,
            error = %e,
            "could not kill a container run's processes"
        ),
    }
}
