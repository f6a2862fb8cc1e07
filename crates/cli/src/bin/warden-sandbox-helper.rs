//! `warden-sandbox-helper`: the in-sandbox helper as a small binary of its own. It does
//! exactly what `warden __sandbox-helper` does (close inherited descriptors, apply
//! Landlock, execute the command) but starts in a fraction of the time, because it does
//! not carry the whole `warden` binary. The composition root uses it when it sits next
//! to `warden`, and falls back to the subcommand otherwise. It is also the per-run child
//! subreaper on hosts where no cgroup can be made (`caps::process::run_reaper`).

fn main() {
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw
        .get(1)
        .is_some_and(|a| a == caps::process::REAPER_SUBCOMMAND)
    {
        caps::process::run_reaper(&raw[2..]);
    }
    if raw
        .get(1)
        .is_some_and(|a| a == caps::process::WATCHDOG_SUBCOMMAND)
    {
        caps::process::run_watchdog(&raw[2..]);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Accept the same argument list as the subcommand form.
    let args = match args.first().map(String::as_str) {
        Some(sandbox::helper::SUBCOMMAND) => &args[1..],
        _ => &args[..],
    };
    sandbox::helper::main(args);
}
