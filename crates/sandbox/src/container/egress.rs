//! `sandbox.network = "proxy"` in the container backend. The container must have no
//! network of its own (`--network none`: a namespace with only loopback, checked at
//! connect); each run gets its own broker and a listener inside that namespace, made by
//! the helper binary on the host (`crate::egress::join`), and its command's proxy
//! variables name it. The run's connections are decided by its own rules, as in the
//! bubblewrap sandbox, and reported the same way.
//!
//! What differs from the bubblewrap sandbox, and why: the container's namespace is shared
//! by every run in it, so a command could reach another run's listener while both run —
//! as it could already reach that run's processes and files, which the container shares
//! too. Runs that must not share anything need the bubblewrap backend. Names are the
//! container's own affair (its `/etc/resolv.conf`; with `--network none` nothing answers):
//! a proxied client never resolves names itself.

use std::ffi::OsString;
use std::time::Duration;

use caps::process::{OpenedProgram, supervise};
use caps::{CapsError, ExecOptions, OutputLimits};

use super::command::Target;
use super::engine::host_program_spec;
use crate::egress::{Egress, broker::Broker, forward, join};

/// How long entering the container's network may take.
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);

/// What a container needs to serve `proxy` runs: the rules and resolver, and the helper
/// that makes each run's listener inside the container.
#[derive(Clone, Debug)]
pub struct ContainerEgress {
    /// Decides each run's connections (with the run's own rules, when it carries them).
    pub egress: Egress,
    /// The helper binary (`warden-sandbox-helper`, or `warden`).
    pub helper: OpenedProgram,
}

impl ContainerEgress {
    /// Start `argv`'s broker and its listener inside the container, and point `options`'
    /// environment at it; the broker (finish it when the run ended). Refused, with nothing
    /// run, when the container's network cannot be entered.
    pub(super) async fn start(
        &self,
        target: &Target,
        argv: &[String],
        options: &mut ExecOptions,
    ) -> caps::Result<Broker> {
        let program = argv.first().map(String::as_str).unwrap_or_default();
        let refuse = |why: String| {
            CapsError::denied(
                program,
                format!("proxy mode could not reach into the container: {why}; nothing was run"),
            )
        };
        let pid = target.first_pid().await.map_err(refuse)?;
        let (broker, theirs) = Broker::start(
            self.egress.proxy(
                options.connection_rules.clone(),
                options.ask_connection.clone(),
            ),
            tokio::runtime::Handle::current(),
        )
        .map_err(|e| CapsError::from_io("start", "the run's egress broker", e))?;
        let helper = self.helper.exec_path();
        let mut spec = host_program_spec(
            helper,
            vec![
                OsString::from(helper),
                join::SUBCOMMAND.into(),
                pid.to_string().into(),
                "3".into(),
            ],
            Vec::new(),
        );
        spec.keep_fds = vec![theirs];
        let out = supervise(spec, JOIN_TIMEOUT, OutputLimits::default()).await?;
        let port = out
            .stdout
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|_| out.status.success() && !out.timed_out);
        let Some(port) = port else {
            let said = out.stderr.trim();
            return Err(refuse(if said.is_empty() {
                format!("the helper ended with {}", out.status)
            } else {
                said.trim_start_matches("warden sandbox: ").to_owned()
            }));
        };
        forward::point_at_proxy(&mut options.env, port);
        Ok(broker)
    }
}
