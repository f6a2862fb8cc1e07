//! Reading a sed script the way GNU sed does, far enough to find the commands that run
//! programs (`e`, `s///e`) or write files (`w`, `W`, `s///w`). Anything this reader does
//! not understand is itself a hit ("a script Warden cannot read"), so an unusual
//! spelling can never hide a command.

const RUNS: &str = "runs a shell command";
const WRITES: &str = "writes to an arbitrary path";

/// (hit name, reason) for each kind of hit in `script`.
pub(super) fn hits(script: &str) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    let mut add = |h: (&'static str, &'static str)| {
        if !out.contains(&h) {
            out.push(h);
        }
    };
    let c: Vec<char> = script.chars().collect();
    let mut i = 0;
    let unreadable = (
        "script",
        "a script Warden cannot read (it may run commands)",
    );
    while i < c.len() {
        // Separators, blocks and negation between commands.
        if c[i].is_whitespace() || matches!(c[i], ';' | '{' | '}' | '!') {
            i += 1;
            continue;
        }
        if c[i] == '#' {
            skip_line(&c, &mut i);
            continue;
        }
        if !skip_address(&c, &mut i) {
            add(unreadable);
            break;
        }
        while i < c.len() && (c[i] == ' ' || c[i] == '\t' || c[i] == '!') {
            i += 1;
        }
        let Some(&cmd) = c.get(i) else { break };
        i += 1;
        match cmd {
            '{' | '}' | ';' | '\n' => {}
            '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z' | 'F' => {}
            'q' | 'Q' | 'l' | 'L' => {
                while i < c.len() && (c[i].is_ascii_digit() || c[i] == ' ') {
                    i += 1;
                }
            }
            // Labels and branches end at a newline or `;`.
            ':' | 'b' | 't' | 'T' | 'v' => {
                while i < c.len() && c[i] != '\n' && c[i] != ';' {
                    i += 1;
                }
            }
            // Text to the end of the line, continued by a trailing backslash.
            'a' | 'i' | 'c' => skip_text(&c, &mut i),
            // A file name to the end of the line.
            'r' | 'R' => skip_line(&c, &mut i),
            'w' | 'W' => {
                if !to_std_stream(&c, i) {
                    add(("w", WRITES));
                }
                skip_line(&c, &mut i);
            }
            'e' => {
                add(("e", RUNS));
                skip_line(&c, &mut i);
            }
            's' => {
                if !skip_delimited(&c, &mut i, 2) {
                    add(unreadable);
                    break;
                }
                // Flags: g, p, i/I, m/M, a number, e (run), w FILE (write).
                while i < c.len() {
                    match c[i] {
                        'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
                        'e' => {
                            add(("s///e", RUNS));
                            i += 1;
                        }
                        'w' => {
                            if !to_std_stream(&c, i + 1) {
                                add(("s///w", WRITES));
                            }
                            skip_line(&c, &mut i);
                        }
                        _ => break,
                    }
                }
            }
            'y' => {
                if !skip_delimited(&c, &mut i, 2) {
                    add(unreadable);
                    break;
                }
            }
            _ => {
                add(unreadable);
                break;
            }
        }
    }
    out
}

/// GNU sed writes `/dev/stdout` and `/dev/stderr` itself, without opening a file.
fn to_std_stream(c: &[char], from: usize) -> bool {
    let rest: String = c[from.min(c.len())..]
        .iter()
        .take_while(|&&ch| ch != '\n')
        .collect();
    matches!(rest.trim(), "/dev/stdout" | "/dev/stderr")
}

fn skip_line(c: &[char], i: &mut usize) {
    while *i < c.len() && c[*i] != '\n' {
        *i += 1;
    }
}

fn skip_text(c: &[char], i: &mut usize) {
    while *i < c.len() {
        if c[*i] == '\\' {
            *i += 2;
            continue;
        }
        if c[*i] == '\n' {
            break;
        }
        *i += 1;
    }
}

/// Skip `parts` delimited parts: the delimiter is the next character; a backslash
/// escapes the following one. False when the script ends first.
fn skip_delimited(c: &[char], i: &mut usize, parts: usize) -> bool {
    let Some(&delim) = c.get(*i) else {
        return false;
    };
    if delim == '\n' || delim == '\\' {
        return false;
    }
    *i += 1;
    for _ in 0..parts {
        loop {
            match c.get(*i) {
                None => return false,
                Some('\\') => *i += 2,
                Some(&ch) if ch == delim => {
                    *i += 1;
                    break;
                }
                Some(_) => *i += 1,
            }
        }
    }
    true
}

/// Skip an address or a range (`3`, `$`, `/re/I`, `\,re,`, `1~2`, `a,+3`). False on
/// something that is no address and no command either.
fn skip_address(c: &[char], i: &mut usize) -> bool {
    for part in 0..2 {
        if part == 1 {
            if c.get(*i) != Some(&',') {
                return true;
            }
            *i += 1;
            while c.get(*i) == Some(&' ') {
                *i += 1;
            }
        }
        match c.get(*i) {
            Some(d) if d.is_ascii_digit() || *d == '+' || *d == '~' => {
                *i += 1;
                while c.get(*i).is_some_and(|d| d.is_ascii_digit() || *d == '~') {
                    *i += 1;
                }
            }
            Some('$') => *i += 1,
            Some('/') => {
                if !skip_delimited(c, i, 1) {
                    return false;
                }
                while c.get(*i).is_some_and(|f| *f == 'I' || *f == 'M') {
                    *i += 1;
                }
            }
            Some('\\') => {
                *i += 1;
                if !skip_delimited(c, i, 1) {
                    return false;
                }
                while c.get(*i).is_some_and(|f| *f == 'I' || *f == 'M') {
                    *i += 1;
                }
            }
            _ if part == 1 => return false,
            _ => return true,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::hits;

    fn names(s: &str) -> Vec<&'static str> {
        hits(s).into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn commands_that_run_or_write_are_found() {
        assert_eq!(names("s/a/b/g"), Vec::<&str>::new());
        assert_eq!(names("1e id"), vec!["e"]);
        assert_eq!(names("e"), vec!["e"]);
        assert_eq!(names("s/x/id/e"), vec!["s///e"]);
        assert_eq!(names("s|x|y|gew /tmp/f"), vec!["s///e", "s///w"]);
        assert_eq!(names("w /tmp/out"), vec!["w"]);
        assert_eq!(names("/re/W /tmp/out"), vec!["w"]);
        assert_eq!(names("$!{s/a/b/;p};1,/x/e date"), vec!["e"]);
        assert_eq!(names("w /dev/stdout"), Vec::<&str>::new());
        // Text of a, i, c and labels never count, even when they spell a command.
        assert_eq!(names("a e id"), Vec::<&str>::new());
        assert_eq!(names(":e\nb e"), Vec::<&str>::new());
        // A delimiter inside an escaped part does not end it.
        assert_eq!(names("s/\\/e/x/"), Vec::<&str>::new());
        assert_eq!(names("y/abc/xyz/;1e id"), vec!["e"]);
        // What the reader does not know is a hit of its own.
        assert_eq!(names("s/unterminated"), vec!["script"]);
        assert_eq!(names("1K"), vec!["script"]);
    }
}
