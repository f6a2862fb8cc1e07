//! Transparent wrappers (`env`, `nice`, `nohup`, `stdbuf`, `timeout`) are looked through
//! to the program they run; privilege wrappers and `env` with modifiers are refused.

/// Wrappers that run the rest of their argv unchanged and are looked through.
pub const TRANSPARENT_WRAPPERS: &[&str] = &["env", "nice", "nohup", "stdbuf", "timeout"];

/// Programs that run something as another user or in another context: always a miss.
pub const PRIVILEGE_WRAPPERS: &[&str] = &[
    "sudo",
    "doas",
    "su",
    "pkexec",
    "runuser",
    "setpriv",
    "chroot",
    "nsenter",
    "unshare",
    "capsh",
    "setuidgid",
];

/// Shells whose `-c PAYLOAD` is analysed like the top-level command.
pub const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh"];

/// Interpreters and program runners besides [`SHELLS`], [`TRANSPARENT_WRAPPERS`] and
/// [`PRIVILEGE_WRAPPERS`]. None of these is ever stored by "allow always" (see
/// [`is_never_stored`]): allowing them allows everything they can start.
pub const CODE_RUNNERS: &[&str] = &[
    // more shells
    "ksh",
    "mksh",
    "ash",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    // interpreters
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "node",
    "nodejs",
    "deno",
    "bun",
    "perl",
    "ruby",
    "irb",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "Rscript",
    "R",
    "osascript",
    "pwsh",
    "powershell",
    "java",
    "jshell",
    "scala",
    "groovy",
    "julia",
    "guile",
    "racket",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "sed",
    "expect",
    // wrappers and program runners
    "xargs",
    "ionice",
    "chrt",
    "taskset",
    "flock",
    "watch",
    "strace",
    "ltrace",
    "gdb",
    "time",
    "setsid",
    "script",
    "parallel",
    "make",
    "npx",
    "uvx",
    "pipx",
];

/// Shell builtins that change the shell itself or run arbitrary code: a miss even if a
/// same-named file exists on PATH.
pub const UNSAFE_BUILTINS: &[&str] = &[
    "eval",
    "exec",
    "source",
    ".",
    "command",
    "builtin",
    "alias",
    "unalias",
    "trap",
    "enable",
    "set",
    "shopt",
    "export",
    "declare",
    "typeset",
    "local",
    "readonly",
    "unset",
    "hash",
    "fc",
    "coproc",
    "let",
    "read",
    "mapfile",
    "readarray",
    "cd",
    "pushd",
    "popd",
    "ulimit",
    "umask",
];

/// The base name of a program word (`/usr/bin/env` → `env`).
pub fn base_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Whether "allow always" must never store a program of this name: a shell, a wrapper
/// or another code runner. Python-style versioned names (`python3.11`, `ruby3.2`) count
/// as their base.
pub fn is_never_stored(name: &str) -> bool {
    let listed = |n: &str| {
        [
            SHELLS,
            TRANSPARENT_WRAPPERS,
            PRIVILEGE_WRAPPERS,
            CODE_RUNNERS,
        ]
        .iter()
        .any(|list| list.contains(&n))
    };
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    listed(name) || (!trimmed.is_empty() && listed(trimmed))
}

/// Where a wrapper's wrapped program starts, or why the wrapper is refused.
pub enum Through {
    /// The program is at this argv index.
    Program(usize),
    /// The wrapper runs nothing further; it is the program itself.
    Itself,
    /// Refused.
    Miss(String),
}

fn takes_value(arg: &str, short: &[&str], long: &[&str]) -> Option<bool> {
    // Some(true): option with a separate value; Some(false): option complete; None: not one.
    if long.iter().any(|l| arg.starts_with(&format!("{l}="))) {
        return Some(false);
    }
    for s in short {
        if arg == *s {
            return Some(true);
        }
        if arg.starts_with(s) && arg.len() > s.len() {
            return Some(false);
        }
    }
    None
}

/// Look through the wrapper at `argv[i]`.
pub fn look_through(argv: &[String], i: usize) -> Through {
    let name = base_name(&argv[i]);
    let mut j = i + 1;
    // The error is a `Through::Miss` detail, made into one just below: text is all it
    // ever is, so a type would add nothing.
    let skip_options =
        |j: &mut usize, short: &[&str], long: &[&str], flags: &[&str]| -> Result<(), String> {
            while let Some(arg) = argv.get(*j) {
                if arg == "--" {
                    *j += 1;
                    return Ok(());
                }
                if !arg.starts_with('-') || arg == "-" {
                    return Ok(());
                }
                if flags.contains(&arg.as_str()) {
                    *j += 1;
                    continue;
                }
                match takes_value(arg, short, long) {
                    Some(true) => *j += 2,
                    Some(false) => *j += 1,
                    None => return Err(format!("{name} option {arg:?} is not looked through")),
                }
            }
            Ok(())
        };
    let result = match name {
        "env" => match argv.get(j) {
            Some(a) if a == "--" => {
                j += 1;
                Ok(())
            }
            Some(a) if a.starts_with('-') => {
                Err(format!("env with option {a:?} modifies the environment"))
            }
            Some(a) if a.contains('=') => Err(format!(
                "env with assignment {a:?} modifies the environment"
            )),
            _ => Ok(()),
        },
        "nice" => {
            // `nice -10 cmd` (old style), `-n N`, `-nN`, `--adjustment=N`.
            while let Some(arg) = argv.get(j) {
                if arg.len() > 1
                    && arg.starts_with('-')
                    && arg[1..].chars().all(|c| c.is_ascii_digit())
                {
                    j += 1;
                } else {
                    break;
                }
            }
            skip_options(&mut j, &["-n"], &["--adjustment"], &[])
        }
        "nohup" => skip_options(&mut j, &[], &[], &[]),
        "stdbuf" => skip_options(
            &mut j,
            &["-i", "-o", "-e"],
            &["--input", "--output", "--error"],
            &[],
        ),
        "timeout" => skip_options(
            &mut j,
            &["-k", "-s"],
            &["--kill-after", "--signal"],
            &[
                "--preserve-status",
                "--foreground",
                "-v",
                "--verbose",
                "-f",
                "-p",
            ],
        )
        .and_then(|()| match argv.get(j) {
            Some(_) => {
                j += 1; // the DURATION operand
                Ok(())
            }
            None => Err("timeout without a duration".into()),
        }),
        _ => return Through::Itself,
    };
    match result {
        Err(why) => Through::Miss(why),
        Ok(()) if j < argv.len() => Through::Program(j),
        Ok(()) if name == "env" || name == "nice" => Through::Itself,
        Ok(()) => Through::Miss(format!("{name} without a program to run")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_wrapper_and_runner_is_never_stored() {
        for list in [
            SHELLS,
            TRANSPARENT_WRAPPERS,
            PRIVILEGE_WRAPPERS,
            CODE_RUNNERS,
        ] {
            for name in list {
                assert!(is_never_stored(name), "{name}");
            }
        }
        for versioned in ["python3.11", "ruby3.2", "bash5", "node18"] {
            assert!(is_never_stored(versioned), "{versioned}");
        }
        for plain in ["ls", "git", "rg", "cargo", "3"] {
            assert!(!is_never_stored(plain), "{plain}");
        }
    }
}
