//! Just enough Markdown for the doc checks: a section by its heading, the list item or
//! sentence a phrase starts, the `code spans` in a piece of text, brace groups.

/// The body of the section whose heading line is exactly `heading` (`## Title`), up to
/// the next heading of the same or a higher level.
pub fn section<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text
        .lines()
        .scan(0usize, |at, line| {
            let here = *at;
            *at += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| line.trim_end() == heading)
        .map(|(at, line)| at + line.len() + 1)?;
    let body = text.get(start..).unwrap_or("");
    let mut end = body.len();
    let mut at = 0;
    let mut in_fence = false;
    for line in body.lines() {
        // A `#` inside a fenced block is a comment, not a heading.
        if line.starts_with("```") {
            in_fence = !in_fence;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !in_fence && hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
            end = at;
            break;
        }
        at += line.len() + 1;
    }
    Some(&body[..end.min(body.len())])
}

/// The list item that starts with `- {start}`, its continuation lines joined by spaces.
pub fn list_item(text: &str, start: &str) -> Option<String> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with(&format!("- {start}")));
    let first = lines.next()?;
    let mut item = first.to_owned();
    for line in lines {
        if line.trim().is_empty() || line.starts_with('-') || line.starts_with('#') {
            break;
        }
        item.push(' ');
        item.push_str(line.trim());
    }
    Some(item)
}

/// Every `code span` in `text`, in order.
pub fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one brace group; none: the path itself).
pub fn expand_braces(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else {
        return vec![path.to_owned()];
    };
    if close < open {
        return vec![path.to_owned()];
    }
    path[open + 1..close]
        .split(',')
        .map(|alt| format!("{}{}{}", &path[..open], alt.trim(), &path[close + 1..]))
        .collect()
}

/// `text` with every run of whitespace (line breaks included) as one space.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_items_spans_and_braces() {
        let doc = "# T\n\n## A\n\ntext\n```\n# comment\n```\n### A.1\n\n- `x` lives\n  in `y`\n- other\n## B\nb\n";
        let a = section(doc, "## A").unwrap();
        assert!(a.contains("A.1") && a.contains("# comment") && !a.contains("## B"));
        assert_eq!(section(doc, "## B").unwrap(), "b\n");
        assert!(section(doc, "## C").is_none());
        let item = list_item(a, "`x` lives").unwrap();
        assert_eq!(item, "- `x` lives in `y`");
        assert_eq!(code_spans(&item), vec!["x", "y"]);
        assert_eq!(expand_braces("a/{b, c}.rs"), vec!["a/b.rs", "a/c.rs"]);
        assert_eq!(expand_braces("a/"), vec!["a/"]);
        assert_eq!(one_line("a\n  b c"), "a b c");
    }
}
