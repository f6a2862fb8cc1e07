//! The helper binary's subcommands in one place: the in-sandbox helper, Warden's own
//! namespace builder, the container backend's way into a container's network (proxy
//! mode), the subreaper, the cgroup watchdog and the companion. Both binaries that can serve
//! as the helper (`warden-sandbox-helper`, and `warden` itself where the small one is not
//! installed) dispatch through [`run`] before they do anything else, and so does the
//! companion (`caps::process::companion`) when it starts one of them in a process of its
//! own instead of executing the binary again: the same arguments run the same code
//! whichever way the process was started.

use std::ffi::OsString;

/// Whether `name` (a binary's first argument) is one of the helper's subcommands.
pub fn is_subcommand(name: &std::ffi::OsStr) -> bool {
    [
        crate::helper::SUBCOMMAND,
        crate::builder::SUBCOMMAND,
        crate::egress::join::SUBCOMMAND,
        caps::process::REAPER_SUBCOMMAND,
        caps::process::WATCHDOG_SUBCOMMAND,
        caps::process::COMPANION_SUBCOMMAND,
    ]
    .iter()
    .any(|s| name == *s)
}

/// Run the subcommand `args[0]` with the arguments after it; never returns. An unknown
/// subcommand (which only a caller's mistake can give) exits 125, like every setup
/// failure of the sandbox.
pub fn run(args: &[OsString]) -> ! {
    let Some((name, rest)) = args.split_first() else {
        crate::setup_failure::fail("no helper subcommand")
    };
    crate::builder::standby::refuse_unless_builder(name);
    if name == caps::process::REAPER_SUBCOMMAND {
        caps::process::run_reaper(rest);
    }
    if name == caps::process::WATCHDOG_SUBCOMMAND {
        caps::process::run_watchdog(rest);
    }
    if name == caps::process::COMPANION_SUBCOMMAND {
        caps::process::run_companion(run, crate::builder::standby::prepare);
    }
    // The helper and the builder take text: Warden writes their arguments, and a path
    // that is not UTF-8 was refused before it got here.
    let text: Vec<String> = rest
        .iter()
        .map(|a| {
            a.clone().into_string().unwrap_or_else(|a| {
                crate::setup_failure::fail(format!("helper argument {a:?} is not UTF-8"))
            })
        })
        .collect();
    if name == crate::builder::SUBCOMMAND {
        crate::builder::main(&text);
    }
    if name == crate::helper::SUBCOMMAND {
        crate::helper::main(&text);
    }
    if name == crate::egress::join::SUBCOMMAND {
        crate::egress::join::main(&text);
    }
    crate::setup_failure::fail(format!("unknown helper subcommand {name:?}"))
}
