//! Exit codes of the `warden` binary. A child's own exit code is passed through; these
//! are the codes Warden itself uses, chosen to match shell conventions (`timeout(1)`
//! uses 124; shells use 126/127), and the one way a subcommand's error becomes one.

/// The command ran past its timeout and was killed.
pub const TIMED_OUT: i32 = 124;
/// Warden itself failed (bad arguments, unreadable configuration, I/O error).
pub const WARDEN_ERROR: i32 = 125;
// 126 (not executable) and 127 (not found) come from `caps::CapsError::exit_code`.
/// `policy explain`: the command would need a human's approval.
pub const ASK: i32 = 10;
/// The command was denied by policy (sysexits' EX_NOPERM).
pub const DENIED: i32 = 77;
/// A human had to be asked, nobody answered, and the fallback denied (sysexits'
/// EX_TEMPFAIL: start an approver and try again).
pub const NO_APPROVER: i32 = 75;
/// Interrupted by SIGINT (128 + 2), after the command's process tree was killed.
pub const INTERRUPTED: i32 = 130;
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

/// Run `future` on a fresh tokio runtime — one thread for a single command, two workers
/// for servers — and turn its result into an exit code with [`or_report`].
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
        Ok(runtime) => or_report(runtime.block_on(future)),
        Err(e) => or_report(Err(anyhow::anyhow!("cannot start the runtime: {e}"))),
    }
}
