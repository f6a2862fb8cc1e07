//! Slash commands that change a session's exec settings: `/exec key=value ...` and
//! `/elevated on|off|ask|full`. Parsing is all-or-nothing: any invalid key or value is an
//! error and the session is left exactly as it was.

use crate::PolicyError;
use crate::modes::{Ask, Host, PermissionMode, Security};
use crate::resolve::SessionOverrides;

/// The result of applying a slash command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlashOutcome {
    /// The session's overrides after the command.
    pub overrides: SessionOverrides,
    /// A one-line confirmation for the user.
    pub message: String,
}

/// True if `text` is a slash command this module handles.
pub fn is_slash_command(text: &str) -> bool {
    let word = text.split_whitespace().next().unwrap_or("");
    word == "/exec" || word == "/elevated"
}

/// Apply `text` (a `/exec` or `/elevated` command) to `current`.
pub fn apply(current: &SessionOverrides, text: &str) -> Result<SlashOutcome, PolicyError> {
    let mut words = text.split_whitespace();
    match words.next() {
        Some("/exec") => apply_exec(current, words.collect()),
        Some("/elevated") => apply_elevated(current, words.collect()),
        _ => Err(PolicyError::SlashCommand(format!(
            "not a slash command Warden knows: {:?} (use /exec or /elevated)",
            text.trim()
        ))),
    }
}

fn err(msg: impl Into<String>) -> PolicyError {
    PolicyError::SlashCommand(msg.into())
}

fn describe(o: &SessionOverrides) -> String {
    let mut parts = Vec::new();
    if let Some(h) = o.host {
        parts.push(format!("host={h}"));
    }
    if let Some(s) = o.security {
        parts.push(format!("security={s}"));
    }
    if let Some(a) = o.ask {
        parts.push(format!("ask={a}"));
    }
    if let Some(n) = &o.node {
        parts.push(format!("node={n}"));
    }
    if let Some(m) = o.permission_mode {
        parts.push(format!("permission_mode={m}"));
    }
    if let Some(t) = o.timeout {
        parts.push(format!("timeout={}", humantime::format_duration(t)));
    }
    if parts.is_empty() {
        "no session overrides".into()
    } else {
        parts.join(" ")
    }
}

fn apply_exec(current: &SessionOverrides, args: Vec<&str>) -> Result<SlashOutcome, PolicyError> {
    if args.is_empty() {
        return Ok(SlashOutcome {
            overrides: current.clone(),
            message: format!("exec session settings: {}", describe(current)),
        });
    }
    let mut next = current.clone();
    let mut seen = Vec::new();
    for arg in args {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| err(format!("/exec expects key=value, got {arg:?}")))?;
        if seen.contains(&key) {
            return Err(err(format!("/exec: {key} given twice")));
        }
        seen.push(key);
        let bad = |e: crate::InvalidChoice| err(format!("/exec: {e}"));
        match key {
            "host" => next.host = Some(value.parse::<Host>().map_err(bad)?),
            "security" => next.security = Some(value.parse::<Security>().map_err(bad)?),
            "ask" => next.ask = Some(value.parse::<Ask>().map_err(bad)?),
            "node" => {
                if value.is_empty() || value.chars().any(char::is_control) {
                    return Err(err("/exec: node= needs a node id or name"));
                }
                next.node = Some(value.to_owned());
            }
            "permission_mode" => {
                next.permission_mode = Some(value.parse::<PermissionMode>().map_err(bad)?)
            }
            "timeout" => {
                let t = humantime::parse_duration(value)
                    .map_err(|e| err(format!("/exec: invalid timeout {value:?}: {e}")))?;
                if t.is_zero() {
                    return Err(err("/exec: the timeout must be greater than zero"));
                }
                next.timeout = Some(t);
            }
            other => {
                return Err(err(format!(
                    "/exec: unknown key {other:?} (expected host, security, ask, node, permission_mode, timeout)"
                )));
            }
        }
    }
    let message = format!("exec session settings: {}", describe(&next));
    Ok(SlashOutcome {
        overrides: next,
        message,
    })
}

fn apply_elevated(
    current: &SessionOverrides,
    args: Vec<&str>,
) -> Result<SlashOutcome, PolicyError> {
    let [mode] = args.as_slice() else {
        return Err(err("/elevated expects exactly one of: on, off, ask, full"));
    };
    // The settings to restore later are those from before the first elevation.
    let base = current
        .before_elevation
        .as_deref()
        .cloned()
        .unwrap_or_else(|| current.clone());
    let elevate = |ask: Option<Ask>| SessionOverrides {
        host: Some(Host::Gateway),
        security: Some(Security::Full),
        ask: ask.or(base.ask),
        node: base.node.clone(),
        permission_mode: base.permission_mode,
        timeout: base.timeout,
        before_elevation: Some(Box::new(base.clone())),
    };
    let (overrides, message) = match *mode {
        "on" => (
            elevate(None),
            "elevated: host=gateway security=full (still capped by the host's approvals file)",
        ),
        "ask" => (
            elevate(Some(Ask::Always)),
            "elevated: host=gateway security=full ask=always",
        ),
        "full" => (
            elevate(Some(Ask::Off)),
            "elevated: host=gateway security=full ask=off (still capped by the host's approvals file)",
        ),
        "off" => {
            if !current.is_elevated() {
                return Ok(SlashOutcome {
                    overrides: current.clone(),
                    message: "not elevated; nothing changed".into(),
                });
            }
            (
                base.clone(),
                "elevation off: previous exec settings restored",
            )
        }
        other => {
            return Err(err(format!(
                "/elevated: unknown mode {other:?} (expected on, off, ask, full)"
            )));
        }
    };
    Ok(SlashOutcome {
        overrides,
        message: message.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_sets_any_subset() {
        let o = apply(
            &SessionOverrides::default(),
            "/exec host=gateway ask=always",
        )
        .unwrap();
        assert_eq!(o.overrides.host, Some(Host::Gateway));
        assert_eq!(o.overrides.ask, Some(Ask::Always));
        assert_eq!(o.overrides.security, None);
        let o = apply(&o.overrides, "/exec security=allowlist node=build-1").unwrap();
        assert_eq!(o.overrides.host, Some(Host::Gateway));
        assert_eq!(o.overrides.node.as_deref(), Some("build-1"));
    }

    #[test]
    fn invalid_input_changes_nothing() {
        let start = apply(&SessionOverrides::default(), "/exec host=gateway")
            .unwrap()
            .overrides;
        for bad in [
            "/exec host=moon",
            "/exec host=sandbox security=maybe",
            "/exec colour=red",
            "/exec host",
            "/exec host=gateway host=node",
            "/elevated sideways",
            "/elevated",
            "/elevated on off",
            "/execute host=gateway",
        ] {
            assert!(apply(&start, bad).is_err(), "{bad}");
        }
        // A failing command is all-or-nothing: the valid first pair was not applied.
        assert!(apply(&start, "/exec ask=off security=nope").is_err());
    }

    #[test]
    fn elevated_modes_and_off_restores() {
        let before = apply(
            &SessionOverrides::default(),
            "/exec host=sandbox ask=on-miss node=n1",
        )
        .unwrap()
        .overrides;
        let on = apply(&before, "/elevated on").unwrap().overrides;
        assert_eq!(
            (on.host, on.security, on.ask),
            (Some(Host::Gateway), Some(Security::Full), Some(Ask::OnMiss))
        );
        let full = apply(&on, "/elevated full").unwrap().overrides;
        assert_eq!(full.ask, Some(Ask::Off));
        let ask = apply(&full, "/elevated ask").unwrap().overrides;
        assert_eq!(ask.ask, Some(Ask::Always));
        let off = apply(&ask, "/elevated off").unwrap().overrides;
        assert_eq!(
            off, before,
            "/elevated off restores the settings from before the first elevation"
        );
        let again = apply(&off, "/elevated off").unwrap();
        assert_eq!(again.overrides, before);
        assert!(again.message.contains("nothing changed"));
    }

    #[test]
    fn recognises_slash_commands() {
        assert!(is_slash_command("  /exec host=gateway"));
        assert!(is_slash_command("/elevated on"));
        assert!(!is_slash_command("/execute"));
        assert!(!is_slash_command("ls /exec"));
    }
}
