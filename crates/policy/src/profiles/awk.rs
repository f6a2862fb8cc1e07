//! Reading an awk program far enough to find what runs programs or writes files:
//! `system(…)`, pipes (`print | "cmd"`, `"cmd" | getline`, gawk's `|&`), output
//! redirection in `print`/`printf` statements, and `@` (gawk's `@load` of native
//! extensions, `@include`, and indirect calls such as `@f()` with `f = "system"`).
//!
//! Strings and regular expressions are *not* skipped: telling a regex from a division
//! needs a full parser, and a quote inside a regex would otherwise hide the code after it.
//! Reading text inside strings as code can only add hits.

const RUNS: &str = "runs a shell command";

/// (hit name, reason) for each kind of hit in `program`.
pub(super) fn hits(program: &str) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    let mut add = |h: (&'static str, &'static str)| {
        if !out.contains(&h) {
            out.push(h);
        }
    };
    let c: Vec<char> = program.chars().collect();
    let ident = |ch: char| ch.is_ascii_alphanumeric() || ch == '_';
    let mut statement_prints = false;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ident(ch) && (i == 0 || !ident(c[i - 1])) {
            let start = i;
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            match word.as_str() {
                "system" => add(("system()", RUNS)),
                "print" | "printf" => statement_prints = true,
                _ => {}
            }
            continue;
        }
        match ch {
            '|' if c.get(i + 1) == Some(&'|') => i += 1,
            '|' => add(("|", RUNS)),
            '@' => add(("@", "loads native extensions or calls a function by name")),
            '>' if statement_prints => add((">", "writes to an arbitrary path")),
            ';' | '{' | '}' | '\n' => statement_prints = false,
            _ => {}
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::hits;

    fn names(s: &str) -> Vec<&'static str> {
        hits(s).into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn what_runs_or_writes_is_found() {
        assert_eq!(names("{ print $1 }"), Vec::<&str>::new());
        assert_eq!(names("$3 > 10 { n++ } END { print n }"), Vec::<&str>::new());
        assert_eq!(names("$1 == 1 || $2 == 2"), Vec::<&str>::new());
        assert_eq!(names("BEGIN{system(\"id\")}"), vec!["system()"]);
        assert_eq!(names("BEGIN { system (\"id\") }"), vec!["system()"]);
        assert_eq!(names("{ print | \"sh\" }"), vec!["|"]);
        assert_eq!(names("BEGIN { \"id\" | getline x }"), vec!["|"]);
        assert_eq!(names("{ print > \"/tmp/x\" }"), vec![">"]);
        assert_eq!(names("{ printf \"%s\", $1 >> \"/tmp/x\" }"), vec![">"]);
        assert_eq!(names("@load \"filefuncs\""), vec!["@"]);
        assert_eq!(
            names("BEGIN { f = \"system\"; @f(\"id\") }"),
            vec!["system()", "@"]
        );
        // A quote inside a regex cannot hide what follows it.
        assert_eq!(names("/\"/ { system(\"id\") } \""), vec!["system()"]);
        assert_eq!(names("{ mysystem(1) }"), Vec::<&str>::new());
    }
}
