//! `decide`: one full policy decision (config resolution, shell analysis, cached
//! executable resolution, matching against 1,000 argument-aware rules and the shipped
//! profiles) per command, over a corpus of 1,000 realistic commands, against a bare
//! spawn of `/bin/true`.

use std::path::Path;
use std::time::{Duration, Instant};

use policy::{
    Allowlist, ArgsMatch, Ask, AskFallback, CaseMode, CommandInput, Config, EvalContext, ExeCache,
    ExecParams, HostCeiling, Profiles, Requester, RuleSpec, Security, SessionOverrides,
    TrustedPath, explain,
};

/// 1,000 commands of the kinds agents run: single commands, pipelines, `&&` chains,
/// quoting, wrappers, `sh -c`, and some that miss (redirections, substitutions).
pub fn corpus() -> Vec<String> {
    let programs = [
        "git", "ls", "cat", "grep", "find", "head", "tail", "wc", "sort", "uniq", "sed", "diff",
        "env", "date", "uname", "echo", "mkdir", "cp", "mv", "stat",
    ];
    let args = [
        "-la",
        "-n 20",
        "--stat",
        "'pattern with spaces'",
        "\"double quoted\"",
        "src/main.rs",
        "-- --flag",
        "status",
        "log --oneline -n 5",
        "-rn TODO .",
    ];
    let mut out = Vec::with_capacity(1000);
    let mut i = 0usize;
    while out.len() < 1000 {
        let p = programs[i % programs.len()];
        let q = programs[(i / 3 + 7) % programs.len()];
        let a = args[i % args.len()];
        let b = args[(i / 7) % args.len()];
        // Commands that use a flag their program's profile lists.
        let flagged = [
            "git -c alias.x='!id' x",
            "git log --output=/tmp/elsewhere",
            "find . -name x -exec rm '{}' +",
            "sed -n '1e id' notes.txt",
            "git rebase --exec 'make test' HEAD~3",
        ];
        let cmd = match i % 10 {
            0 | 1 => format!("{p} {a}"),
            2 => flagged[(i / 10) % flagged.len()].to_owned(),
            3 => format!("{p} {a} | {q} {b}"),
            4 => format!("{p} {a} && {q} {b} && git status"),
            5 => format!("nice -n 5 {p} {a}"),
            6 => format!("sh -c '{p} {a}'"),
            7 => format!("{p} {a} > out.txt"),
            8 => format!("{p} $(cat list) {b}"),
            _ => format!("timeout 30 {p} {a} | sort | uniq -c | head -n 10"),
        };
        out.push(cmd);
        i += 1;
    }
    out
}

/// 1,000 argument-aware rules: for each real program of the corpus, a rule per first
/// argument the corpus uses (so most commands match one), a hundred git subcommands, and
/// project-style globs and bare names with argument patterns.
pub fn rules() -> Vec<RuleSpec> {
    let programs = [
        "git", "ls", "cat", "grep", "find", "head", "tail", "wc", "sort", "uniq", "sed", "diff",
        "date", "uname", "echo", "mkdir", "cp", "mv", "stat", "nice", "timeout", "env",
    ];
    let first_words = [
        "-la",
        "-n",
        "--stat",
        "pattern with spaces",
        "double quoted",
        "src/main.rs",
        "--",
        "status",
        "log",
        "-rn",
        "-c",
        "10",
        "TODO",
        "notes.txt",
    ];
    let rule = |pattern: String, args: &[&str], exact: bool| RuleSpec {
        pattern,
        args: Some(args.iter().map(|a| a.to_string()).collect()),
        args_match: if exact {
            ArgsMatch::Exact
        } else {
            ArgsMatch::Prefix
        },
        ..RuleSpec::default()
    };
    let mut r = Vec::new();
    for p in programs {
        for w in first_words {
            r.push(rule(format!("/usr/bin/{p}"), &[w], false));
        }
    }
    for i in 0..100 {
        r.push(rule(
            "/usr/bin/git".into(),
            &[&format!("sub{i}"), "*"],
            false,
        ));
    }
    let mut i = 0;
    while r.len() < 1000 {
        r.push(match i % 4 {
            0 => rule(format!("/opt/tool{i}/bin/*"), &["run", "--fast"], true),
            1 => rule(
                format!("~/Projects/p{i}/**/bin/run"),
                &["--target=*"],
                false,
            ),
            2 => rule(format!("tool{i}"), &["build", "*"], false),
            _ => rule(format!("/srv/app{i}/bin/[a-c]*"), &["-v"], false),
        });
        i += 1;
    }
    r
}

fn allowlist() -> Allowlist {
    Allowlist::compile_rules(
        &rules(),
        Path::new("/root"),
        CaseMode::Sensitive,
        Profiles::shipped(),
    )
}

/// Median time of one decision, after one warm-up pass over the corpus (which fills the
/// resolution cache, as a long-running gateway would).
pub fn median_decision(rounds: usize) -> Duration {
    let fs = caps::LocalFs::new("/").unwrap_or_else(|_| unreachable!());
    let allowlist = allowlist();
    let trusted = TrustedPath::parse("/usr/local/bin:/usr/bin:/bin");
    let cache = ExeCache::new();
    let ctx = EvalContext {
        fs: &fs,
        cwd: Path::new("/tmp"),
        trusted_path: &trusted,
        allowlist: &allowlist,
        cache: Some(&cache),
        protected: &[],
        writable: &[],
    };
    let config = Config::parse(
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\n[[agents.list]]\nid = \"coder\"\ntools.exec.ask = \"on-miss\"\n",
        Path::new("config.toml"),
    )
    .unwrap_or_default();
    let ceiling = HostCeiling {
        security: Security::Allowlist,
        ask: Ask::OnMiss,
        ask_fallback: AskFallback::Deny,
    };
    let session = SessionOverrides::default();
    let params = ExecParams::default();
    let env = std::collections::BTreeMap::new();
    let host_env = std::collections::BTreeMap::from([
        ("HOME".to_string(), "/home/bench".to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ]);
    let who = Requester {
        agent: "coder",
        session_id: "bench",
        session: &session,
        params: &params,
        env: &env,
    };
    let corpus = corpus();
    let mut samples = Vec::with_capacity(corpus.len() * rounds);
    for round in 0..=rounds {
        for cmd in &corpus {
            let started = Instant::now();
            let e = explain(
                CommandInput::Shell(cmd),
                &who,
                &config,
                &ceiling,
                &ctx,
                &host_env,
                policy::Confinement::Sandbox,
            );
            let took = started.elapsed();
            std::hint::black_box(&e);
            if round > 0 {
                samples.push(took);
            }
        }
    }
    crate::harness::median(&samples)
}

/// Where the time of one decision goes (for `warden-bench --child decide-profile`).
pub fn profile() {
    let corpus = corpus();
    let fs = caps::LocalFs::new("/").unwrap_or_else(|_| unreachable!());
    let allowlist = allowlist();
    let trusted = TrustedPath::parse("/usr/local/bin:/usr/bin:/bin");
    let cache = ExeCache::new();
    let ctx = EvalContext {
        fs: &fs,
        cwd: Path::new("/tmp"),
        trusted_path: &trusted,
        allowlist: &allowlist,
        cache: Some(&cache),
        protected: &[],
        writable: &[],
    };
    for c in &corpus {
        std::hint::black_box(policy::evaluate(CommandInput::Shell(c), &ctx));
    }
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..5 {
            for c in &corpus {
                std::hint::black_box(policy::analyze(CommandInput::Shell(c)).is_ok());
            }
        }
        let a = t.elapsed() / 5000;
        let t = Instant::now();
        for _ in 0..5 {
            for c in &corpus {
                std::hint::black_box(policy::evaluate(CommandInput::Shell(c), &ctx));
            }
        }
        println!(
            "analyze {:?}  evaluate (incl. analyze) {:?}",
            a,
            t.elapsed() / 5000
        );
    }
    let t = Instant::now();
    for _ in 0..5 {
        for c in &corpus {
            std::hint::black_box(policy::analyze(CommandInput::Shell(c)).is_ok());
        }
    }
    println!("analyze: {:?}/cmd", t.elapsed() / 5000);
    let t = Instant::now();
    for _ in 0..5 {
        for c in &corpus {
            let mut p =
                brush_parser::Parser::new(c.as_bytes(), &brush_parser::ParserOptions::default());
            std::hint::black_box(p.parse_program().is_ok());
        }
    }
    println!("brush parse_program: {:?}/cmd", t.elapsed() / 5000);
    let t = Instant::now();
    for _ in 0..5 {
        for c in &corpus {
            std::hint::black_box(brush_parser::tokenize_str(c).is_ok());
        }
    }
    println!("brush tokenize: {:?}/cmd", t.elapsed() / 5000);
    let t = Instant::now();
    let opts = brush_parser::ParserOptions::default();
    for _ in 0..5 {
        for c in &corpus {
            let toks = brush_parser::uncached_tokenize_str(c, &opts.tokenizer_options())
                .unwrap_or_default();
            std::hint::black_box(brush_parser::parse_tokens(&toks, &opts).is_ok());
        }
    }
    println!(
        "brush uncached tokenize + parse_tokens: {:?}/cmd",
        t.elapsed() / 5000
    );
}

/// Run decisions in a loop for a profiler (`--child decide-loop`).
pub fn decide_loop() {
    for _ in 0..3 {
        std::hint::black_box(median_decision(3));
    }
}
