//! The container backend: commands run inside a long-running container through a
//! Docker-compatible CLI (`podman` or `docker`), selected by config.
//!
//! Every run is one supervised engine client,
//!
//! ```text
//! ENGINE --log-level=error exec [-i] --workdir CWD CONTAINER \
//!     /bin/sh -c WRAPPER warden-run:TOKEN: [VIEW...] ENV -i -- K=V... ARGV...
//! ```
//!
//! going through [`caps::process::supervise`], so Warden's timeout, output cap, tail and
//! concurrent stdout/stderr reading apply exactly as for local runs. The argv is never
//! joined into a string: it travels as separate arguments down to the container's `env`,
//! which executes it.
//!
//! Why the in-container wrapper (a constant POSIX `sh` script, never built from input):
//!
//! - **Exact environment.** `ENGINE exec --env` only adds to the container's configured
//!   environment (and the engine adds `PATH`, `HOME`, `TERM`, `container`...), and a shell
//!   exports variables of its own (`PWD`, `SHLVL`). `env -i -- K=V... ARGV` gives the
//!   command exactly [`ExecOptions::env`](caps::ExecOptions::env). The values reach `env` as arguments of the
//!   wrapper, not through the wrapper's own environment, so nothing the caller sets
//!   (`IFS`, `SHELLOPTS`, `PATH`...) can change how the wrapper itself behaves.
//! - **A tree we can find and kill.** Killing the engine client does not stop the exec'd
//!   process: the engine keeps running it. The runtime starts every exec'd process as a
//!   session leader; the wrapper stays alive as that leader, and its command line carries
//!   a random per-run token. On timeout or cancellation a second exec finds the process
//!   whose command line holds the token, then stops and kills every process in its
//!   session and every descendant (`/proc` walk, repeated until nothing new appears, so a
//!   forking tree cannot outrun it). When the command exits normally, the wrapper does the
//!   same sweep of its own session before exiting, so background leftovers die with the
//!   run, as they do locally.
//!
//! The container must therefore provide `/bin/sh`, an `env` program and `/proc`;
//! [`Container::connect`] checks all three (and that the shell can read the token back
//! from `/proc`) and fails closed with a diagnosis otherwise. Like process-group killing
//! on the host, a descendant that calls `setsid()` and whose parent has exited escapes
//! the sweep.
//!
//! The engine client itself gets an environment of only `PATH` (the trusted engine
//! directories): nothing from Warden's environment, and nothing from the command's
//! environment, which could otherwise steer the engine on the host (`LD_PRELOAD`,
//! `DOCKER_HOST`, `CONTAINERS_CONF`...). That suits rootful Podman, the Docker daemon's
//! default socket, and rootless Podman with its default directories (it finds the home
//! directory and `/run/user/UID` by itself); an engine that needs `HOME`,
//! `XDG_RUNTIME_DIR` or `DOCKER_HOST` set must be configured through its system
//! configuration files. The command's environment values are arguments of the engine
//! client (as they would be with `--env K=V`), so on a shared host other local users can
//! read them in `/proc/PID/cmdline` while the run lasts.
//!
//! The container is the sandbox, so it must keep the sandbox's promises: connecting
//! checks that it sees every authorized path at the same path (commands run at their
//! host working directory), mounts nothing the bubblewrap sandbox hides, nothing
//! writable beyond `sandbox.writable_paths`, the readable extra paths read-only, and has
//! no network unless `sandbox.network = true` (`view.rs`). The writable profile then
//! writes what the container's mounts allow. The read-only profile (`readonly`, approval
//! mode's first run) runs the command in a read-only view of the container that the
//! kernel enforces (`readonly.rs`); a container that cannot give one (no `--read-only`
//! root, no user namespaces) has no read-only profile, and the caller refuses those modes
//! with [`Container::read_only`]'s reason rather than running writable.
//!
//! Known differences from the local shell: [`ExecOptions::arg0`](caps::ExecOptions::arg0) is not supported (the
//! engine cannot set `argv[0]` apart from the program), a program that cannot be found
//! or executed inside the container is reported as exit code 127/126 by `env` rather than
//! as a typed error, and the engine's own failures surface as its exit code (125 for
//! Podman and Docker) with its message on stderr.
//!
//! The parts: `engine.rs` (the engine CLI on the host and running it), `command.rs` (the
//! scripts and command lines run in the container), `check.rs` (whether a container can
//! be used), `view.rs` (what it sees of the host), `readonly.rs` (the read-only view),
//! `kill.rs` (killing a run's tree), `shell.rs` (the connected container and its
//! `caps::Shell`s) and `diagnose.rs` (`warden doctor`).

mod check;
mod command;
mod diagnose;
mod egress;
mod engine;
mod kill;
mod readonly;
mod shell;
mod view;

pub use diagnose::diagnose;
pub use egress::ContainerEgress;
pub use engine::{
    ContainerConfig, SUPPORTED_ENGINES, TRUSTED_ENGINE_DIRS, find_engine, probe_engine,
};
pub use shell::{Container, ContainerShell};
