//! How a sandbox that cannot be set up ends, before its command runs: `warden sandbox: …`
//! on standard error and exit 125. Shared by the helper, the namespace builder and the
//! write watch, which all fail the same way (a leaf: it depends on nothing in the crate).

/// Exit code when the sandbox cannot be established (matches Warden's own errors).
const SETUP_FAILED: i32 = 125;

/// Report a setup failure as `warden sandbox: …` and exit 125 before the command runs
/// (the namespace builder's failures too).
pub(crate) fn fail(message: impl std::fmt::Display) -> ! {
    let _ = nix::unistd::write(
        std::io::stderr(),
        format!("warden sandbox: {message}\n").as_bytes(),
    );
    std::process::exit(SETUP_FAILED)
}
