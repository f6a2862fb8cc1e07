//! The running kernel's Landlock ABI: one probe, asked by the bubblewrap backend (is
//! Landlock there at all?), the in-sandbox helper (which rights to ask for) and
//! `warden doctor`.

/// The Landlock ABI version the running kernel supports (0: none).
pub fn abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag, this system call
    // only returns the ABI version (or an error); it creates nothing and reads no memory.
    let v = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 { 0 } else { v }
}
