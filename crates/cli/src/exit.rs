//! Exit codes of the `warden` binary and the one way a subcommand's error becomes one.
//! A run's code comes from `runner::RunReport::exit_code` (the child's own, 124 timed
//! out, 126/127, 77 denied, 75 nobody answered, 130 cancelled); these are the codes of
//! Warden's own situations.

/// Warden itself failed (bad arguments, unreadable configuration, I/O error).
pub const WARDEN_ERROR: i32 = runner::EXIT_WARDEN_ERROR;
/// `policy explain`: the command would need a human's approval.
pub const ASK: i32 = 10;
/// `policy explain`: the command would be denied.
pub const DENIED: i32 = runner::EXIT_DENIED;
/// Interrupted by SIGINT (128 + 2), after the command's process tree was killed.
pub const INTERRUPTED: i32 = runner::EXIT_CANCELLED;
/// Terminated by SIGTERM (128 + 15), after the command's
/// process tree was killed.
pub const TERMINATED: i32 = 143;
/// Hung up by SIGHUP (128 + 1), after the command's process tree was killed.
pub const HUNG_UP: i32 = 129;
/// Standard output's reader went away (128 + SIGPIPE), after the command's process tree
/// was killed.
pub const STDOUT_CLOSED: i32 = 141;

/// The exit code of a subcommand's result: its own code, or — after printing the error
/// as `warden: …` — [`WARDEN_ERROR`].
pub fn or_report(result: anyhow::Result<i32>) -> i32 {
    result.unwrap_or_else(|e| {
        eprintln!("warden: {e:#}");
        WARDEN_ERROR
    })
}

/// How long a server's end waits for blocking tasks still running.
pub const SERVER_SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Run `future` on a fresh tokio runtime — one thread for a single command, two workers
/// for servers — and turn its result into an exit code with [`or_report`]. A single
/// command's runtime is then let go without joining its idle threads: its work is done
/// (the result is in), and the process exits next, which ends them. A server's is shut
/// down waiting up to [`SERVER_SHUTDOWN_WAIT`] for its blocking tasks: one may still be
/// writing its last reply, but one may also be a read of a terminal that never returns
/// (tokio reads a stdin it cannot poll on a blocking thread), which must not keep the
/// process from exiting on SIGTERM.
pub fn block_on(
    server: bool,
    future: impl std::future::Future<Output = anyhow::Result<i32>>,
) -> i32 {
    let mut builder = if server {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    match builder.enable_all().build() {
        Ok(runtime) => {
            let result = runtime.block_on(future);
            if server {
                runtime.shutdown_timeout(SERVER_SHUTDOWN_WAIT);
            } else {
                runtime.shutdown_background();
            }
            or_report(result)
        }
        Err(e) => or_report(Err(anyhow::anyhow!("cannot start the runtime: {e}"))),
    }
}

/// Resolves when a long-running subcommand (a gateway, a node) is asked to stop: SIGINT
/// or SIGTERM — each unless it was ignored when Warden started (`crate::signals`). A
/// signal that cannot be watched is not waited for (the other still works). The signals
/// are watched from the call on, not from the first poll: call it before saying the
/// server is ready, so a signal right after that is a shutdown, not a kill.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use crate::signals::Watched;
    let never = |_| Watched::none();
    let mut interrupt = Watched::interrupt().unwrap_or_else(never);
    let mut terminate = Watched::terminate().unwrap_or_else(never);
    async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }
}
