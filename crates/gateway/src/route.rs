//! How each host is served: `gateway` by running the plan on this machine, `sandbox` by
//! the configured OS sandbox (built on first use from the `[sandbox]` table of the config
//! in force, and built again when that table changes), or — while the operator's direct
//! mode is on — unconfined; `node` by a node connected over the Bridge
//! (`node_route.rs`). Routing fails closed: `sandbox` without a backend and `node`
//! without a node are refusals that say so, never a run elsewhere.

use std::sync::Mutex;

use policy::{Config, SandboxSettings};
use runner::Executor;

use crate::direct::DirectSwitch;

/// How `host = sandbox` is served.
pub enum SandboxRoute {
    /// An OS sandbox.
    Available(Executor),
    /// No sandbox backend: every sandboxed exec is refused with this diagnosis.
    Unavailable(String),
    /// Built from the config a request is decided under (see [`SandboxRoute::following`]).
    Following(Box<FollowingRoute>),
}

/// A sandbox route built the first time it is needed, from the `[sandbox]` table of the
/// config in force, and again whenever a request arrives under a different table (a live
/// edit of `config.toml`): probing a backend starts processes, which a gateway serving
/// only `host = gateway` commands (or a single `warden exec` that is denied) should not
/// pay for. A run keeps the executor it was decided with.
pub struct FollowingRoute {
    build: RouteBuilder,
    built: Mutex<Option<(SandboxSettings, Result<Executor, String>)>>,
}

type RouteBuilder = Box<dyn Fn(&Config) -> SandboxRoute + Send + Sync>;

impl SandboxRoute {
    /// A route that `build` works out from a config's `[sandbox]` table on first use, and
    /// again when the table changes.
    pub fn following(build: impl Fn(&Config) -> SandboxRoute + Send + Sync + 'static) -> Self {
        SandboxRoute::Following(Box::new(FollowingRoute {
            build: Box::new(build),
            built: Mutex::new(None),
        }))
    }

    /// The sandbox executor under `config`, or why there is none (building it now if it
    /// was not built for this `[sandbox]` table).
    pub fn executor(&self, config: &Config) -> Result<Executor, String> {
        match self {
            SandboxRoute::Available(executor) => Ok(executor.clone()),
            SandboxRoute::Unavailable(why) => Err(why.clone()),
            SandboxRoute::Following(following) => {
                let mut built = following.built.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((settings, route)) = &*built
                    && *settings == config.sandbox
                {
                    return route.clone();
                }
                let route = match (following.build)(config) {
                    SandboxRoute::Available(executor) => Ok(executor),
                    SandboxRoute::Unavailable(why) => Err(why),
                    SandboxRoute::Following(_) => {
                        Err("the sandbox route could not be built".into())
                    }
                };
                *built = Some((config.sandbox.clone(), route.clone()));
                route
            }
        }
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
    /// The executor for `host = sandbox` now, under `config`: direct mode while it is on,
    /// else the OS sandbox, else why there is none.
    pub fn sandbox(&self, config: &Config) -> Result<Executor, String> {
        match self.direct_now() {
            Some(direct) => Ok(direct.clone()),
            None => self.sandbox.executor(config),
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
    fn a_following_route_is_built_when_needed_and_again_only_when_the_sandbox_table_changes() {
        let built = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&built);
        let route = SandboxRoute::following(move |config: &Config| {
            counter.fetch_add(1, Ordering::SeqCst);
            SandboxRoute::Unavailable(format!("network = {}", config.sandbox.network))
        });
        assert_eq!(
            built.load(Ordering::SeqCst),
            0,
            "nothing is probed up front"
        );
        let mut config = Config::default();
        for _ in 0..3 {
            assert_eq!(route.executor(&config).unwrap_err(), "network = false");
        }
        assert_eq!(built.load(Ordering::SeqCst), 1);
        // Another section changed: the same route.
        config.exec.security = Some(policy::Security::Full);
        assert_eq!(route.executor(&config).unwrap_err(), "network = false");
        assert_eq!(built.load(Ordering::SeqCst), 1);
        // The sandbox table changed: built again, for it.
        config.sandbox.network = policy::SandboxNetwork::On;
        assert_eq!(route.executor(&config).unwrap_err(), "network = true");
        assert_eq!(built.load(Ordering::SeqCst), 2);
        // So did its egress rules alone: built again (a run must be decided by the rules
        // its sandbox's proxy holds).
        config.sandbox.egress.allow = vec![policy::egress::DomainRule::parse("pypi.org").unwrap()];
        assert_eq!(route.executor(&config).unwrap_err(), "network = true");
        assert_eq!(built.load(Ordering::SeqCst), 3);
    }
}
