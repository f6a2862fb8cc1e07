//! What the human sees is what runs: text from the agent is shown with every control
//! character, bidirectional override and zero-width character escaped visibly, so a
//! prompt cannot hide or reorder what will execute.

use std::fmt::Write as _;

use policy::{Launch, RunPlan};

use crate::ipc::protocol::{Prompt, PromptKind};

/// True for characters that could hide or reorder text on a terminal: every
/// Default_Ignorable_Code_Point of Unicode (DerivedCoreProperties.txt — zero-width and
/// joiner characters, bidi controls, Hangul fillers, variation selectors, tag
/// characters...), the line and paragraph separators, and the remaining format
/// characters that shape or annotate text. (Also what keeps a run's output, shown to an
/// operator, from doing the same: `gateway::operator::printable`.)
pub fn is_deceptive(c: char) -> bool {
    matches!(c,
        // Default_Ignorable_Code_Point
        '\u{00AD}'                   // soft hyphen
        | '\u{034F}'                 // combining grapheme joiner
        | '\u{061C}'                 // Arabic letter mark
        | '\u{115F}'..='\u{1160}'    // Hangul choseong/jungseong fillers
        | '\u{17B4}'..='\u{17B5}'    // Khmer inherent vowels
        | '\u{180B}'..='\u{180F}'    // Mongolian variation selectors, vowel separator
        | '\u{200B}'..='\u{200F}'    // zero-width space/joiners, LRM, RLM
        | '\u{202A}'..='\u{202E}'    // bidi embeddings and overrides
        | '\u{2060}'..='\u{206F}'    // word joiner, invisible operators, bidi isolates
        | '\u{3164}'                 // Hangul filler
        | '\u{FE00}'..='\u{FE0F}'    // variation selectors
        | '\u{FEFF}'                 // zero-width no-break space / BOM
        | '\u{FFA0}'                 // halfwidth Hangul filler
        | '\u{FFF0}'..='\u{FFF8}'    // unassigned specials
        | '\u{1BCA0}'..='\u{1BCA3}'  // shorthand format controls
        | '\u{1D173}'..='\u{1D17A}'  // musical format controls
        | '\u{E0000}'..='\u{E0FFF}'  // tag characters, variation selectors supplement
        // Line and paragraph separators (Zl, Zp): a line break the terminal may honour.
        | '\u{2028}'..='\u{2029}'
        // Other format characters (Cf) that prefix, annotate or number text.
        | '\u{0600}'..='\u{0605}'
        | '\u{06DD}'
        | '\u{070F}'
        | '\u{0890}'..='\u{0891}'
        | '\u{08E2}'
        | '\u{110BD}'
        | '\u{110CD}'
        | '\u{FFF9}'..='\u{FFFB}'    // interlinear annotation
    )
}

/// Escape `text` for display: `\\` for a backslash, `\n`, `\t`, `\r`, `\xNN` for other
/// control characters, and `\u{XXXX}` for deceptive Unicode. Everything else is shown as
/// is.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) || is_deceptive(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// One escaped word in double quotes, so spaces inside it cannot pass for separators.
fn quoted(word: &str) -> String {
    format!("\"{}\"", escape(word).replace('"', "\\\""))
}

/// An argv as a bracketed list of escaped, quoted words.
pub fn argv_line(argv: &[String]) -> String {
    let words: Vec<String> = argv.iter().map(|a| quoted(a)).collect();
    format!("[{}]", words.join(", "))
}

fn plan_lines(out: &mut String, plan: &RunPlan) {
    match &plan.launch {
        Launch::Exec { program, argv, .. } => {
            if program != argv.first().map(String::as_str).unwrap_or("") {
                let _ = writeln!(out, "program:  {}", escape(program));
            }
            let _ = writeln!(out, "argv:     {}", argv_line(argv));
        }
        Launch::Script { shell, source } => {
            let _ = writeln!(out, "shell:    {} -c", escape(shell));
            let _ = writeln!(out, "script:   {}", quoted(source));
        }
    }
    let _ = writeln!(out, "cwd:      {}", escape(&plan.cwd));
    let env: Vec<String> = plan
        .env
        .iter()
        .map(|(k, v)| format!("{}={}", escape(k), quoted(v)))
        .collect();
    let _ = writeln!(out, "env:      {}", env.join(" "));
    let _ = writeln!(out, "limits:   {}", limits_line(&plan.limits));
}

/// What the run is held to, in one line.
pub fn limits_line(limits: &policy::PlannedLimits) -> String {
    let ms = limits.timeout_ms;
    let timeout = if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    };
    let memory = match limits.max_memory {
        m if m.is_multiple_of(1 << 30) => format!("{} GiB", m >> 30),
        m if m.is_multiple_of(1 << 20) => format!("{} MiB", m >> 20),
        m => format!("{m} bytes"),
    };
    let mut line = format!(
        "timeout {timeout} · {} processes · {memory} memory",
        limits.max_processes
    );
    if limits.unconfined {
        line.push_str(" · NO OS sandbox (the operator's direct mode)");
    }
    match &limits.network {
        Some(policy::PlannedNetwork::Plain(true)) => line.push_str(" · network on"),
        Some(policy::PlannedNetwork::Plain(false)) => line.push_str(" · network off"),
        // Every host the run may reach is shown: the human approves those too.
        Some(network @ policy::PlannedNetwork::Proxy { .. }) => {
            let _ = write!(line, " · network {}", escape(&network.to_string()));
        }
        None => {}
    }
    if let Some(list) = &limits.exec_allowlist {
        let paths: Vec<String> = list
            .paths
            .iter()
            .map(|p| escape(&p.display().to_string()))
            .collect();
        let _ = write!(
            line,
            " · executes only {} ({})",
            paths.join(", "),
            if list.required {
                "required"
            } else {
                "best-effort"
            }
        );
    }
    line
}

/// The full, escaped text of a prompt as shown to the human: what runs (or is written),
/// where, with which environment, and exactly what "allow always" would store.
pub fn render_prompt(prompt: &Prompt) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "── approval request {} ──", escape(&prompt.id));
    let _ = writeln!(
        out,
        "agent:    {}   session: {}",
        escape(&prompt.agent),
        escape(&prompt.session)
    );
    match &prompt.kind {
        PromptKind::Command {
            plan,
            command,
            security,
            ask,
            reason,
            allow_always,
            allow_always_default,
            not_stored,
            why,
        } => {
            let _ = writeln!(
                out,
                "host:     {}   security: {security}   ask: {ask}   ({reason})",
                escape(&prompt.host),
            );
            if let Some(why) = why {
                let _ = writeln!(out, "why:      {}", escape(why));
            }
            let _ = writeln!(out, "command:  {}", escape(command));
            plan_lines(&mut out, plan);
            let rules = |o: &policy::AlwaysOption| -> String {
                let shown: Vec<String> = o.rules.iter().map(|r| escape(&r.describe())).collect();
                shown.join(", ")
            };
            match allow_always.get(*allow_always_default) {
                None => {
                    let _ = writeln!(out, "always:   stores nothing");
                }
                Some(default) => {
                    let _ = writeln!(out, "always:   would store {}", rules(default));
                }
            }
            if allow_always.len() > 1 {
                for (i, option) in allow_always.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "          [{}] {:<10} {}{}",
                        i + 1,
                        option.scope.as_str(),
                        rules(option),
                        if i == *allow_always_default {
                            "   (preselected)"
                        } else {
                            ""
                        }
                    );
                }
            }
            for skipped in not_stored {
                let _ = writeln!(out, "          not stored: {}", escape(skipped));
            }
        }
        PromptKind::Write {
            paths,
            detail,
            retry,
        } => {
            let _ = writeln!(
                out,
                "host:     {}   (a write permission)",
                escape(&prompt.host)
            );
            let shown: Vec<String> = paths.iter().map(|p| quoted(p)).collect();
            let _ = writeln!(out, "writes:   {}", shown.join(", "));
            let _ = writeln!(out, "what:     {}", escape(detail));
            if let Some(plan) = retry {
                let _ = writeln!(out, "re-runs writable:");
                plan_lines(&mut out, plan);
            }
            let _ = writeln!(
                out,
                "always:   stores nothing (a write permission is for this one request)"
            );
        }
        PromptKind::Connection {
            command,
            destination,
            port,
            why,
            special,
            store,
        } => {
            let _ = writeln!(
                out,
                "host:     {}   (a network connection)",
                escape(&prompt.host)
            );
            let _ = writeln!(out, "command:  {}", escape(command));
            let _ = writeln!(
                out,
                "connects: {}",
                caps::host_port(&escape(destination), *port)
            );
            let _ = writeln!(out, "why:      {}", escape(why));
            if let Some(special) = special {
                let _ = writeln!(
                    out,
                    "warning:  {} is {}: allowing it reaches that",
                    escape(destination),
                    escape(special)
                );
            }
            match store {
                Some(rule) => {
                    let _ = writeln!(
                        out,
                        "always:   stores {} for {} (egressAllow): its runs reach it without asking",
                        escape(rule),
                        escape(&prompt.agent)
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "always:   stores nothing (allowed, it is reached for the rest of this run)"
                    );
                }
            }
        }
    }
    let _ = writeln!(out, "digest:   {}", escape(&prompt.digest));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_become_visible() {
        assert_eq!(escape("rm -rf /\n"), "rm -rf /\\n");
        assert_eq!(escape("a\u{1b}[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape("ls \u{202e}txt.exe"), "ls \\u{202e}txt.exe");
        assert_eq!(escape("l\u{200b}s"), "l\\u{200b}s");
        assert_eq!(escape("x\u{7f}\u{85}"), "x\\x7f\\u{0085}");
        assert_eq!(escape("back\\slash"), "back\\\\slash");
        assert_eq!(escape("héllo 日本"), "héllo 日本");
        // Fillers, tags, variation selectors and separators that render as nothing.
        for hidden in [
            '\u{2028}',
            '\u{2029}',
            '\u{115F}',
            '\u{3164}',
            '\u{FFA0}',
            '\u{E0041}',
            '\u{FE0F}',
            '\u{034F}',
            '\u{180B}',
            '\u{FFF9}',
        ] {
            let shown = escape(&format!("rm{hidden}x"));
            assert!(!shown.contains(hidden), "{hidden:?} shown raw: {shown}");
            assert!(shown.contains("\\u{"), "{shown}");
        }
    }

    fn plan(env: &[(&str, &str)], launch: Launch) -> RunPlan {
        RunPlan {
            launch,
            cwd: "/w".into(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            agent: "a".into(),
            session: "s".into(),
            host: "gateway".into(),
            limits: policy::PlannedLimits {
                timeout_ms: 30_000,
                max_processes: 4096,
                max_memory: 1 << 30,
                exec_allowlist: None,
                network: None,
                unconfined: false,
            },
        }
    }

    fn command_prompt(plan: RunPlan, allow_always: Vec<String>) -> Prompt {
        let allow_always = if allow_always.is_empty() {
            vec![]
        } else {
            vec![policy::AlwaysOption {
                scope: policy::Scope::Program,
                rules: allow_always.iter().map(policy::RuleSpec::program).collect(),
            }]
        };
        Prompt::new(
            "p",
            "a",
            "s",
            "gateway",
            PromptKind::Command {
                plan,
                command: "ls".into(),
                security: policy::Security::Allowlist,
                ask: policy::Ask::OnMiss,
                reason: policy::AskReason::AllowlistMiss,
                allow_always,
                allow_always_default: 0,
                not_stored: vec!["sh: shells, interpreters and wrappers are never stored".into()],
                why: None,
            },
        )
    }

    #[test]
    fn an_environment_value_cannot_pass_for_two_variables() {
        let exec = Launch::Exec {
            program: "/usr/bin/ls".into(),
            program_id: None,
            argv: vec!["ls".into()],
        };
        let text = render_prompt(&command_prompt(plan(&[("A", "1 B=2")], exec), vec![]));
        assert!(text.contains("A=\"1 B=2\""), "{text}");
        assert!(text.contains("program:  /usr/bin/ls"), "{text}");
        assert!(
            text.contains("limits:   timeout 30s · 4096 processes · 1 GiB memory\n"),
            "{text}"
        );
        assert!(text.contains("stores nothing"), "{text}");
    }

    #[test]
    fn the_prompt_shows_what_runs_and_what_is_stored() {
        let script = Launch::Script {
            shell: "/bin/sh".into(),
            source: "ls\u{202e} | wc -l".into(),
        };
        let text = render_prompt(&command_prompt(
            plan(&[], script),
            vec!["/usr/bin/ls".into()],
        ));
        assert!(text.contains("shell:    /bin/sh -c"), "{text}");
        assert!(text.contains("\\u{202e}"), "{text}");
        assert!(text.contains("would store /usr/bin/ls"), "{text}");
        assert!(text.contains("not stored: sh"), "{text}");
        let write = Prompt::new(
            "w",
            "a",
            "s",
            "sandbox",
            PromptKind::Write {
                paths: vec!["/w/out.txt".into()],
                detail: "the read-only run was refused a write".into(),
                retry: None,
            },
        );
        let text = render_prompt(&write);
        assert!(text.contains("writes:   \"/w/out.txt\""), "{text}");
        assert!(
            text.contains("stores nothing (a write permission"),
            "{text}"
        );
    }

    #[test]
    fn a_connection_shows_the_command_the_host_and_port_and_a_special_address_warning() {
        let prompt = Prompt::new(
            "r",
            "a",
            "s",
            "sandbox",
            PromptKind::Connection {
                command: "curl http://169.254.169.254/\x1b[2J".into(),
                destination: "169.254.169.254".into(),
                port: 80,
                why: "no [sandbox.egress] allow rule names it".into(),
                special: Some("link-local (cloud metadata)".into()),
                store: Some("169.254.169.254:80".into()),
            },
        );
        let text = render_prompt(&prompt);
        assert!(text.contains("(a network connection)"), "{text}");
        assert!(text.contains("connects: 169.254.169.254:80"), "{text}");
        assert!(
            text.contains("169.254.169.254 is link-local (cloud metadata)"),
            "{text}"
        );
        assert!(
            text.contains("always:   stores 169.254.169.254:80 for a (egressAllow)"),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "{text}");
        let v6 = Prompt::new(
            "r",
            "a",
            "s",
            "sandbox",
            PromptKind::Connection {
                command: "x".into(),
                destination: "2001:db8::1".into(),
                port: 443,
                why: "w".into(),
                special: None,
                store: None,
            },
        );
        let text = render_prompt(&v6);
        assert!(text.contains("connects: [2001:db8::1]:443"), "{text}");
        assert!(!text.contains("warning:"), "{text}");
        assert!(text.contains("always:   stores nothing"), "{text}");
    }

    #[test]
    fn escaping_is_unambiguous() {
        // A literal backslash-n and a newline must not look the same.
        assert_ne!(escape("\\n"), escape("\n"));
        assert_eq!(
            argv_line(&["a\"b".into(), "c d".into()]),
            "[\"a\\\"b\", \"c d\"]"
        );
    }
}
