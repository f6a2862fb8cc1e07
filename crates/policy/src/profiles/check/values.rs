//! What an option's values and a command's operands are, checked by their kind: paths
//! a program writes or works in, configuration keys (`git -c`), ssh options, subcommands
//! and operands taken from both ends of the command line.

use std::borrow::Cow;

use super::{Reader, assign};
use crate::profiles::grammar::{Context, Kind, OptionSpec};
use crate::profiles::writes::{is_git_name, is_remote};

impl<'a> Reader<'a> {
    /// The values of `option` (named `name` at word `i`), the first of them `inline` if
    /// it is stuck to the option; later ones from word `next` on. The next word to read.
    pub(super) fn option_values(
        &mut self,
        option: &'a OptionSpec,
        name: &str,
        i: usize,
        inline: Option<&str>,
        mut next: usize,
    ) -> usize {
        if let Some(reason) = &option.refused {
            let canonical = option.name.clone();
            self.refuse(i, canonical, reason.clone());
            // Skip what it takes, so the next word is read as the program reads it.
            if option.values.first() == Some(&Kind::Command) {
                while next < self.argv.len() && !matches!(self.argv[next].as_str(), ";" | "+") {
                    next += 1;
                }
                return (next + 1).min(self.argv.len());
            }
            if option.optional || option.values.is_empty() {
                return next;
            }
            let taken = option.values.len() - usize::from(inline.is_some());
            return (next + taken).min(self.argv.len());
        }
        self.seen.push(&option.name);
        if option.values.is_empty() {
            if inline.is_some() {
                self.refuse(i, name, format!("{name} takes no value"));
            } else {
                self.accept(i, "option");
            }
            return next;
        }
        self.accept(i, "option");
        // Refusals of its values are named by the option's name, however it was written.
        let canonical = option.name.as_str();
        if option.optional {
            if let Some(value) = inline {
                self.value(&option.values[0], canonical, i, value);
            }
            return next;
        }
        let mut first = inline;
        let argv = self.argv;
        for kind in &option.values {
            let (index, value) = match first.take() {
                Some(v) => (i, v),
                None => match argv.get(next) {
                    Some(v) => {
                        next += 1;
                        (next - 1, v.as_str())
                    }
                    None => {
                        self.refuse(i, name, format!("{name} needs a value"));
                        return next;
                    }
                },
            };
            if index != i {
                self.accept(index, "value");
            }
            self.value(kind, canonical, index, value);
        }
        next
    }

    /// Check one value of option `name`, found at word `index`.
    pub(super) fn value(&mut self, kind: &Kind, name: &str, index: usize, value: &str) {
        match kind {
            Kind::Value | Kind::Target | Kind::File => {}
            Kind::Written(how) => {
                self.writes
                    .push((index, name.to_owned(), value.to_owned(), *how));
            }
            Kind::MaybeWrite => {
                if is_remote(value) {
                    self.refuse(
                        index,
                        format!("{name} host:path"),
                        "a remote file, reached through a remote shell (and a host name can be an ssh option)",
                    );
                } else {
                    self.maybe_writes
                        .push((index, name.to_owned(), value.to_owned()));
                }
            }
            Kind::Config => self.config(name, index, value),
            Kind::SshOption => self.ssh_option(name, index, value),
            Kind::Script => self.scripts.push((index, value.to_owned())),
            Kind::Command => self.refuse(index, name, "runs a command"),
            Kind::Member => {
                if let Some(why) = member_refusal(value) {
                    self.refuse(index, name, why);
                }
            }
            Kind::OneOf(list) => {
                if !list.iter().any(|w| w == value) {
                    self.refuse(
                        index,
                        format!("{name} {value}"),
                        format!("{name} accepts only {}", list.join(", ")),
                    );
                }
            }
        }
    }

    pub(super) fn key_known(&self, key: &str) -> bool {
        let key = key.to_lowercase();
        self.grammar.config_keys.iter().any(|p| p.matches(&key))
    }

    /// git's `section[.subsection].key[=value]`: section and key are case-insensitive.
    pub(super) fn config(&mut self, name: &str, index: usize, value: &str) {
        let key = value.split_once('=').map_or(value, |(k, _)| k);
        let plain = key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
        if !plain || !key.contains('.') || !self.key_known(key) {
            self.refuse(
                index,
                format!("{name} {}", key.to_lowercase()),
                format!(
                    "sets {key:?}, a configuration key the {} grammar does not know to be safe (keys such as alias.*, core.pager and diff.external run programs)",
                    self.label
                ),
            );
        }
    }

    /// ssh's `Key=Value`, `Key Value`, `Key = Value` (the key case-insensitive, leading
    /// blanks skipped, as OpenSSH reads them).
    pub(super) fn ssh_option(&mut self, name: &str, index: usize, value: &str) {
        let trimmed = value.trim_start_matches([' ', '\t']);
        let key_len = trimmed
            .bytes()
            .take_while(u8::is_ascii_alphanumeric)
            .count();
        let (key, rest) = trimmed.split_at(key_len);
        let separated = rest.starts_with([' ', '\t', '=']);
        if key.is_empty() || !separated || !self.key_known(key) {
            self.refuse(
                index,
                format!("{name} {}", key.to_lowercase()),
                format!(
                    "an option the {} grammar does not know to be safe (ProxyCommand, LocalCommand and others run programs)",
                    self.label
                ),
            );
        }
    }

    /// Give the operands of `context` their kinds and check them.
    pub(super) fn operands(&mut self, context: &'a Context, operands: &[usize]) {
        if operands.is_empty() {
            return;
        }
        let mut kinds: Cow<'a, [Kind]> = Cow::Borrowed(&context.operands);
        let mut repeat = context.repeat;
        // A script given by option makes no operand the script.
        if !self.scripts.is_empty()
            && let Some(p) = kinds.iter().position(|k| *k == Kind::Script)
        {
            kinds.to_mut().remove(p);
            repeat = repeat.and_then(|r| match r.cmp(&p) {
                std::cmp::Ordering::Less => Some(r),
                std::cmp::Ordering::Equal => None,
                std::cmp::Ordering::Greater => Some(r - 1),
            });
        }
        let assigned = assign(&kinds, repeat, operands.len());
        for (k, &index) in operands.iter().enumerate() {
            let word = self.argv[index].clone();
            match assigned.get(k).copied().flatten().map(|a| &kinds[a]) {
                None => {
                    let reason = context
                        .operands_refused
                        .clone()
                        .unwrap_or_else(|| format!("{} takes no operand here", self.here(context)));
                    let name = if context.path.is_empty() {
                        "operand".to_owned()
                    } else {
                        format!("{} operand", context.path)
                    };
                    self.refuse(index, name, reason);
                    // One refusal for the extra operands, not one per word.
                    return;
                }
                Some(Kind::File) if word.starts_with('!') => self.refuse(
                    index,
                    "!cmd",
                    "a file name that starts with ! is a command the program runs",
                ),
                Some(Kind::Target) if word.contains('=') => self.refuse(
                    index,
                    "VAR=value",
                    "sets a variable that recipes may run (CC=, SHELL=)",
                ),
                Some(Kind::Written(how)) => {
                    self.accept(index, "operand (written)");
                    self.writes.push((index, "operand".into(), word, *how));
                }
                Some(Kind::MaybeWrite) => {
                    self.accept(index, "operand (written in write mode)");
                    if !is_remote(&word) {
                        self.maybe_writes.push((index, "operand".into(), word));
                    }
                }
                Some(Kind::Script) => {
                    self.accept(index, "operand (script)");
                    self.scripts.push((index, word));
                }
                Some(kind) => {
                    let what = match kind {
                        Kind::Config => "configuration",
                        _ => "operand",
                    };
                    self.accept(index, what);
                    if matches!(
                        kind,
                        Kind::OneOf(_) | Kind::Config | Kind::SshOption | Kind::Member
                    ) {
                        self.value(kind, "operand", index, &word);
                    }
                }
            }
        }
    }
}

/// Why an archive member name (`NAME` or `NAME:CONTENT`) may not be written: one that,
/// extracted, would not stay where it is extracted, or would land in a Git directory.
fn member_refusal(value: &str) -> Option<String> {
    let name = value.split_once(':').map_or(value, |(name, _)| name);
    let path = std::path::Path::new(name);
    if path.is_absolute() {
        return Some(format!(
            "names the archive member {name:?} by an absolute path"
        ));
    }
    path.components().find_map(|c| match c {
        std::path::Component::ParentDir => {
            Some(format!("names the archive member {name:?} with `..`"))
        }
        std::path::Component::Normal(part) if is_git_name(part) => Some(format!(
            "names the archive member {name:?} inside .git: extracted, it would become Git's settings or hooks"
        )),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::member_refusal;

    #[test]
    fn an_archive_member_stays_where_it_is_extracted_and_out_of_git() {
        for ok in ["src/", "docs/a.txt:hello", "a.git/x", "x:..:y"] {
            assert_eq!(member_refusal(ok), None, "{ok}");
        }
        for bad in [
            "/etc/x",
            "../x/",
            "a/../../x",
            ".git/hooks/",
            "sub/.git/config:x",
            ".GIT/hooks/pre-commit",
        ] {
            assert!(member_refusal(bad).is_some(), "{bad}");
        }
    }
}
