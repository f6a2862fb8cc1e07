//! How each host is served: `gateway` by running the plan on this machine, `sandbox` by
//! the configured OS sandbox (built on first use, or its diagnosis), or — while the
//! operator's direct mode is on — unconfined; `node` by a node connected over the Bridge
//! (`node_route.rs`). Routing fails closed: `sandbox` without a backend and `node`
//! without a node are refusals that say so, never a run elsewhere.

use std::sync::{Mutex, OnceLock};

use runner::Executor;

use crate::direct::DirectSwitch;

/// How `host = sandbox` is served.
pub enum SandboxRoute {
    /// An OS sandbox.
    Available(Executor),
    /// No sandbox backend: every sandboxed exec is refused with this diagnosis.
    Unavailable(String),
    /// Worked out on first use (see [`SandboxRoute::deferred`]).
    Deferred(Box<DeferredRoute>),
}

/// A sandbox route built the first time it is needed: probing a backend starts
/// processes, which a gateway serving only `host = gateway` commands (or a single
/// `warden exec` that is denied) should not pay for.
pub struct DeferredRoute {
    route: OnceLock<SandboxRoute>,
    build: Mutex<Option<RouteBuilder>>,
}

type RouteBuilder = Box<dyn FnOnce() -> SandboxRoute + Send>;

impl SandboxRoute {
    /// A route that `build` works out on first use, once.
    pub fn deferred(build: impl FnOnce() -> SandboxRoute + Send + 'static) -> SandboxRoute {
        SandboxRoute::Deferred(Box::new(DeferredRoute {
            route: OnceLock::new(),
            build: Mutex::new(Some(Box::new(build))),
        }))
    }

    /// The sandbox executor, or why there is none (building a deferred route now).
    pub fn executor(&self) -> Result<&Executor, String> {
        match self.resolved() {
            SandboxRoute::Available(executor) => Ok(executor),
            SandboxRoute::Unavailable(why) => Err(why.clone()),
            SandboxRoute::Deferred(_) => Err("the sandbox route could not be built".into()),
        }
    }

    fn resolved(&self) -> &SandboxRoute {
        let SandboxRoute::Deferred(deferred) = self else {
            return self;
        };
        deferred.route.get_or_init(|| {
            let build = deferred
                .build
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            match build.map(|b| b()) {
                Some(SandboxRoute::Deferred(_)) | None => {
                    SandboxRoute::Unavailable("the sandbox route could not be built".into())
                }
                Some(route) => route,
            }
        })
    }
}

/// Direct execution of `host = sandbox` while the operator's switch is on.
pub struct DirectMode {
    /// Runs commands unconfined on this machine (a sandbox executor that says so).
    pub executor: Executor,
    /// The switch.
    pub switch: DirectSwitch,
}

/// Every route of one gateway.
pub struct Routes {
    /// `host = gateway`.
    pub gateway: Executor,
    /// `host = sandbox`.
    pub sandbox: SandboxRoute,
    /// The operator's direct mode, if this gateway offers it.
    pub direct: Option<DirectMode>,
    /// `host = node`: the nodes connected over the Bridge (`None`: this gateway takes no
    /// node connections, and `host = node` is refused).
    pub node: Option<std::sync::Arc<bridge::Hub>>,
}

impl Routes {
    /// The executor for `host = sandbox` now: direct mode while it is on, else the OS
    /// sandbox, else why there is none.
    pub fn sandbox(&self) -> Result<&Executor, String> {
        match self.direct_now() {
            Some(direct) => Ok(direct),
            None => self.sandbox.executor(),
        }
    }

    /// The direct-mode executor, if the operator's switch is on now.
    pub fn direct_now(&self) -> Option<&Executor> {
        self.direct
            .as_ref()
            .filter(|d| d.switch.active_until().is_some())
            .map(|d| &d.executor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_deferred_route_is_built_once_and_only_when_needed() {
        let built = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&built);
        let route = SandboxRoute::deferred(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            SandboxRoute::Unavailable("no backend here".into())
        });
        assert_eq!(
            built.load(Ordering::SeqCst),
            0,
            "nothing is probed up front"
        );
        for _ in 0..3 {
            assert_eq!(route.executor().unwrap_err(), "no backend here");
        }
        assert_eq!(built.load(Ordering::SeqCst), 1);
    }
}
