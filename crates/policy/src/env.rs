//! The child environment: an allowlist of variable names, never a denylist.
//!
//! A request may set only names on [`REQUEST_ALLOWED`] (plus `LC_*`) or the agent's
//! configured extras; anything else — `LD_PRELOAD`, `BASH_ENV`, `NODE_OPTIONS`, `PATH`,
//! `GIT_SSH_COMMAND`... — rejects the whole request, naming the offenders, before anything
//! runs. `PATH` always comes from the host's trusted PATH.

use std::collections::BTreeMap;

use crate::PolicyError;

/// Names a request may set (besides `LC_*` and per-agent extras). Chosen because they
/// change presentation, locale or identity strings, not what code gets loaded.
pub const REQUEST_ALLOWED: &[&str] = &[
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "CLICOLOR",
    "FORCE_COLOR",
];

/// Names forwarded from the host's own environment into every child.
pub const HOST_FORWARDED: &[&str] = &["HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ"];

/// Prefixes and names that change how programs load or behave. They can never be allowed,
/// not even as a configured per-agent extra.
const NEVER_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "NPM_CONFIG_",
    "GIT_",
    "BASH_FUNC_",
    "JAVA_",
    "_JAVA_",
    "GCONV",
    "GLIBC_",
    "MALLOC_",
    "LUA_",
    "GEM_",
    "BUNDLE_",
    "CARGO_HOME",
    "RUSTC",
    "RUSTFLAGS",
    "RUSTDOC",
];
const NEVER_NAMES: &[&str] = &[
    // Where programs find their configuration (a gitconfig with `core.fsmonitor`, a
    // cargo or npm config) and the command strings they run (`git commit` runs $EDITOR).
    "HOME",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
    "LESSKEY",
    "PATH",
    "IFS",
    "PS1",
    "PS2",
    "PS4",
    "ENV",
    "BASH_ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "CDPATH",
    "PROMPT_COMMAND",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "RES_OPTIONS",
    "TMPDIR",
    "SSH_AUTH_SOCK",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "EDITOR_OPTIONS",
    "ZDOTDIR",
    "INPUTRC",
    "NLSPATH",
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "SSLKEYLOGFILE",
    "HISTFILE",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "PERL5LIB",
    "PERL5OPT",
    "RUBYOPT",
    "RUBYLIB",
];

fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn is_never_allowed(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    NEVER_NAMES.contains(&upper.as_str()) || NEVER_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Why a configured extra name (`tools.exec.env`) cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvNameError {
    /// Not a variable name at all.
    #[error("expected a variable name (letters, digits, underscore)")]
    NotAName,
    /// A name that changes how programs load or behave.
    #[error("{name} changes how programs load or behave and can never be allowed")]
    NeverAllowed {
        /// The name.
        name: String,
    },
}

/// Check a configured per-agent extra name (`tools.exec.env`).
pub fn check_extra_env_name(name: &str) -> Result<(), EnvNameError> {
    if !is_valid_name(name) {
        return Err(EnvNameError::NotAName);
    }
    if is_never_allowed(name) {
        return Err(EnvNameError::NeverAllowed {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// True if a request may set `name`, given the agent's configured extras.
pub fn request_may_set(name: &str, extras: &[String]) -> bool {
    is_valid_name(name)
        && !is_never_allowed(name)
        && (REQUEST_ALLOWED.contains(&name)
            || name.starts_with("LC_")
            || extras.iter().any(|e| e == name))
}

/// Build a child's environment: the host's forwarded values, `PATH` set to the trusted
/// PATH, then the request's variables — all of which must be allowed. On any disallowed
/// name, nothing is built and every offender is named.
pub fn build_child_env(
    host: &BTreeMap<String, String>,
    trusted_path: &str,
    request: &BTreeMap<String, String>,
    extras: &[String],
) -> Result<BTreeMap<String, String>, PolicyError> {
    let mut rejected: Vec<String> = request
        .keys()
        .filter(|k| !request_may_set(k, extras))
        .cloned()
        .collect();
    if !rejected.is_empty() {
        rejected.sort();
        return Err(PolicyError::EnvRejected { names: rejected });
    }
    let mut env: BTreeMap<String, String> = host
        .iter()
        .filter(|(k, _)| HOST_FORWARDED.contains(&k.as_str()) || k.starts_with("LC_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.insert("PATH".into(), trusted_path.to_owned());
    for (k, v) in request {
        env.insert(k.clone(), v.clone());
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn dangerous_names_are_rejected_and_all_offenders_named() {
        let host = map(&[("HOME", "/home/u"), ("SECRET", "x")]);
        let bad = map(&[
            ("LD_PRELOAD", "/tmp/x.so"),
            ("BASH_ENV", "/tmp/x"),
            ("NODE_OPTIONS", "--require x"),
            ("PATH", "/tmp"),
            ("GIT_SSH_COMMAND", "sh"),
            ("PYTHONPATH", "/tmp"),
            ("IFS", " "),
            ("PS4", "$(id)"),
            ("GLIBC_TUNABLES", "x"),
            ("GCONV_PATH", "/tmp"),
            ("ld_preload", "/tmp/x.so"),
            ("BASH_FUNC_ls%%", "() { id; }"),
            ("TERM", "xterm"),
        ]);
        let err = build_child_env(&host, "/usr/bin", &bad, &[]).unwrap_err();
        let PolicyError::EnvRejected { names } = err else {
            panic!()
        };
        assert_eq!(names.len(), 12, "{names:?}");
        assert!(!names.contains(&"TERM".to_string()));
    }

    #[test]
    fn allowed_names_and_extras_build_the_environment() {
        let host = map(&[
            ("HOME", "/home/u"),
            ("LC_ALL", "C"),
            ("SECRET", "x"),
            ("PATH", "/evil"),
        ]);
        let req = map(&[
            ("TERM", "dumb"),
            ("RUST_LOG", "debug"),
            ("LC_CTYPE", "C.UTF-8"),
        ]);
        assert!(build_child_env(&host, "/usr/bin:/bin", &req, &[]).is_err());
        let env = build_child_env(&host, "/usr/bin:/bin", &req, &["RUST_LOG".into()]).unwrap();
        assert_eq!(env.get("PATH").unwrap(), "/usr/bin:/bin");
        assert_eq!(env.get("RUST_LOG").unwrap(), "debug");
        assert_eq!(env.get("LC_ALL").unwrap(), "C");
        assert!(!env.contains_key("SECRET"));
    }

    #[test]
    fn nothing_on_the_request_list_is_also_never_allowed() {
        for name in REQUEST_ALLOWED {
            assert!(!is_never_allowed(name), "{name}");
        }
        // Command strings and configuration homes: an allowlisted `git` would run them.
        for name in ["HOME", "EDITOR", "VISUAL", "PAGER", "GIT_PAGER", "LESSOPEN"] {
            assert!(!request_may_set(name, &[]), "{name}");
            assert!(check_extra_env_name(name).is_err(), "{name}");
        }
    }

    #[test]
    fn extras_cannot_smuggle_dangerous_names() {
        assert!(check_extra_env_name("LD_PRELOAD").is_err());
        assert!(check_extra_env_name("PATH").is_err());
        assert!(check_extra_env_name("bad name").is_err());
        assert!(check_extra_env_name("RUST_LOG").is_ok());
        assert!(!request_may_set("LD_PRELOAD", &["LD_PRELOAD".into()]));
    }
}
