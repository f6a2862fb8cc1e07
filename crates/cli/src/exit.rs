//! Exit codes of the `warden` binary. A child's own exit code is passed through; these
//! are the codes Warden itself uses, chosen to match shell conventions (`timeout(1)`
//! uses 124; shells use 126/127).

/// The command ran past its timeout and was killed.
pub const TIMED_OUT: i32 = 124;
/// Warden itself failed (bad arguments, unreadable configuration, I/O error).
pub const WARDEN_ERROR: i32 = 125;
/// The program exists but cannot be executed.
pub const NOT_EXECUTABLE: i32 = 126;
/// The program was not found.
pub const NOT_FOUND: i32 = 127;
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

/// The exit code for a failure of the capability layer.
pub fn for_caps_error(err: &caps::CapsError) -> i32 {
    match err {
        caps::CapsError::ProgramNotFound { .. } => NOT_FOUND,
        caps::CapsError::NotExecutable { .. } => NOT_EXECUTABLE,
        _ => WARDEN_ERROR,
    }
}
