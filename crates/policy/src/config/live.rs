//! The configuration a running server decides with: `config.toml` as it is now, read
//! again whenever its text changes. Each request takes one snapshot ([`LiveConfig::current`])
//! and is decided, approved and run under it: an edit made while a run waits for its
//! approver changes the next request, never that run's plan. An edit that does not parse
//! keeps the last good configuration in force and is a standing [`LiveConfig::problem`]
//! until the file is fixed; whoever owns the process says so (its log, `doctor`, the
//! console, every result).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use caps::Fs;

use super::Config;

/// What the host adds to a freshly parsed file before it is used (the machine's default
/// run limits, which the file does not hold).
pub type Finish = Box<dyn Fn(&mut Config) + Send + Sync>;

/// Told of every change a reload makes or refuses (the owner records it).
pub type OnReload = Box<dyn Fn(&Reload) + Send + Sync>;

/// A reload that did something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reload {
    /// The new text parsed: it is in force for every request from now on.
    Applied {
        /// What changed, section by section, in words (`[sandbox]`, `[[agents.list]]` …).
        changed: Vec<String>,
        /// Sections that changed but are read only when the process starts.
        at_restart: Vec<String>,
    },
    /// The new text does not parse (or cannot be read): the last good configuration stays
    /// in force.
    Refused {
        /// Why, as the parser says it (file, line, key).
        problem: String,
    },
}

/// `config.toml` as a running server uses it (see the module header).
pub struct LiveConfig {
    source: Option<Source>,
    state: Mutex<State>,
}

struct Source {
    fs: Arc<dyn Fs>,
    path: PathBuf,
    finish: Finish,
    on_reload: Option<OnReload>,
}

struct State {
    /// The configuration in force.
    current: Arc<Config>,
    /// The bytes last seen (`None`: no file), so that an unchanged file is not parsed.
    seen: Option<Vec<u8>>,
    /// Why the file as it is now is not in force.
    problem: Option<String>,
}

impl std::fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveConfig")
            .field("path", &self.source.as_ref().map(|s| &s.path))
            .field("problem", &self.problem())
            .finish()
    }
}

impl From<Config> for LiveConfig {
    fn from(config: Config) -> Self {
        LiveConfig::fixed(config)
    }
}

impl LiveConfig {
    /// A configuration that never changes (a one-shot command, a test, a library user
    /// that manages its own).
    pub fn fixed(config: Config) -> LiveConfig {
        LiveConfig {
            source: None,
            state: Mutex::new(State {
                current: Arc::new(config),
                seen: None,
                problem: None,
            }),
        }
    }

    /// `path` on `fs`, starting from `initial` (the file as the process read it at start,
    /// `finish` already applied): every later text of the file is parsed, given `finish`,
    /// and put in force if it is valid.
    pub fn watching(fs: Arc<dyn Fs>, path: PathBuf, initial: Config, finish: Finish) -> LiveConfig {
        let seen = read(fs.as_ref(), &path).ok().flatten();
        LiveConfig {
            source: Some(Source {
                fs,
                path,
                finish,
                on_reload: None,
            }),
            state: Mutex::new(State {
                current: Arc::new(initial),
                seen,
                problem: None,
            }),
        }
    }

    /// Call `on_reload` for every reload that changes or refuses something.
    pub fn on_reload(mut self, on_reload: OnReload) -> LiveConfig {
        if let Some(source) = &mut self.source {
            source.on_reload = Some(on_reload);
        }
        self
    }

    /// The file this follows, if it follows one.
    pub fn path(&self) -> Option<&Path> {
        self.source.as_ref().map(|s| s.path.as_path())
    }

    /// The configuration in force now, after reading the file once more: a request takes
    /// this once and uses it throughout.
    pub fn current(&self) -> Arc<Config> {
        self.refresh();
        Arc::clone(&self.lock().current)
    }

    /// The configuration in force, without looking at the file.
    pub fn in_force(&self) -> Arc<Config> {
        Arc::clone(&self.lock().current)
    }

    /// Why the file as it is now is not in force (the last good configuration is), if it
    /// is not.
    pub fn problem(&self) -> Option<String> {
        self.lock().problem.clone()
    }

    /// The standing notice for results while [`LiveConfig::problem`] lasts, in words.
    pub fn notice(&self) -> Option<String> {
        let path = self.path()?.display().to_string();
        self.problem().map(|problem| {
            format!(
                "{path} was edited and the edit is not in force ({problem}); the last good configuration is used until the file is fixed"
            )
        })
    }

    /// Read the file; if its text changed, parse it and put it in force, or keep the last
    /// good configuration and remember why. Returns what happened, if anything did.
    pub fn refresh(&self) -> Option<Reload> {
        let source = self.source.as_ref()?;
        // Read under the lock: two requests racing an edit never put an older text back
        // in force after a newer one (a read is a few microseconds).
        let mut state = self.lock();
        let bytes = read(source.fs.as_ref(), &source.path);
        let reload = match bytes {
            // While a problem stands the text is looked at again (a file unreadable a
            // moment ago may be readable, with the text last seen).
            Ok(bytes) if bytes == state.seen && state.problem.is_none() => return None,
            Ok(bytes) => {
                let parsed = match &bytes {
                    None => Ok(Config::default()),
                    Some(b) => match std::str::from_utf8(b) {
                        Ok(text) => Config::parse(text, &source.path).map_err(|e| e.to_string()),
                        Err(_) => Err(format!("{} is not UTF-8 text", source.path.display())),
                    },
                };
                state.seen = bytes;
                match parsed {
                    Ok(mut config) => {
                        (source.finish)(&mut config);
                        let (changed, at_restart) = differences(&state.current, &config);
                        let was_refused = state.problem.take().is_some();
                        if changed.is_empty() && !was_refused {
                            return None;
                        }
                        state.current = Arc::new(config);
                        Reload::Applied {
                            changed,
                            at_restart,
                        }
                    }
                    Err(problem) => {
                        if state.problem.as_ref() == Some(&problem) {
                            return None;
                        }
                        state.problem = Some(problem.clone());
                        Reload::Refused { problem }
                    }
                }
            }
            Err(problem) => {
                // Unreadable now (permissions, I/O): not a reason to drop a good policy,
                // nor to forget the text last seen.
                if state.problem.as_ref() == Some(&problem) {
                    return None;
                }
                state.problem = Some(problem.clone());
                Reload::Refused { problem }
            }
        };
        drop(state);
        if let Some(on_reload) = &source.on_reload {
            on_reload(&reload);
        }
        Some(reload)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The file's bytes, `None` when there is no file, or why it cannot be read.
fn read(fs: &dyn Fs, path: &Path) -> Result<Option<Vec<u8>>, String> {
    match fs.read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(format!("{} cannot be read: {e}", path.display())),
    }
}

/// The sections that differ between `old` and `new`, and those of them read only at start.
fn differences(old: &Config, new: &Config) -> (Vec<String>, Vec<String>) {
    let mut changed = Vec::new();
    let mut at_restart = Vec::new();
    let mut section = |name: &str, differs: bool, restart: bool| {
        if differs {
            changed.push(name.to_owned());
            if restart {
                at_restart.push(name.to_owned());
            }
        }
    };
    section(
        "[tools.exec]",
        old.exec != new.exec || old.max_timeout != new.max_timeout,
        false,
    );
    section("[[agents.list]]", old.agents != new.agents, false);
    section("[sandbox]", old.sandbox != new.sandbox, false);
    section("[gateway]", old.gateway != new.gateway, true);
    section("[audit]", old.audit != new.audit, true);
    (changed, at_restart)
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::{MemoryFs, WriteOptions};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const PATH: &str = "/h/config.toml";

    fn put(fs: &MemoryFs, text: &[u8]) {
        fs.write(Path::new(PATH), text, WriteOptions::default())
            .unwrap();
    }

    fn live(fs: &Arc<MemoryFs>, text: Option<&str>) -> LiveConfig {
        if let Some(text) = text {
            put(fs, text.as_bytes());
        }
        let initial = Config::load(fs.as_ref(), Path::new(PATH)).unwrap();
        LiveConfig::watching(
            Arc::clone(fs) as Arc<dyn Fs>,
            PathBuf::from(PATH),
            initial,
            Box::new(|_| {}),
        )
    }

    fn fs() -> Arc<MemoryFs> {
        let fs = Arc::new(MemoryFs::new());
        fs.create_dir_all(Path::new("/h"), 0o700).unwrap();
        fs
    }

    #[test]
    fn an_edit_is_in_force_for_the_next_snapshot_and_an_old_snapshot_keeps_its_values() {
        let fs = fs();
        let live = live(&fs, Some("[tools.exec]\nsecurity = \"deny\"\n"));
        let before = live.current();
        put(&fs, b"[tools.exec]\nsecurity = \"full\"\n");
        let after = live.current();
        assert_eq!(before.exec.security, Some(crate::Security::Deny));
        assert_eq!(after.exec.security, Some(crate::Security::Full));
        assert_eq!(live.problem(), None);
    }

    #[test]
    fn a_broken_edit_keeps_the_last_good_configuration_and_says_why_until_fixed() {
        let fs = fs();
        let live = live(&fs, Some("[tools.exec]\nsecurity = \"deny\"\n"));
        put(&fs, b"[tools.exec]\nsecurity = \"ful\"\n");
        let refused = live.refresh();
        assert!(
            matches!(&refused, Some(Reload::Refused { problem }) if problem.contains("security")),
            "{refused:?}"
        );
        assert_eq!(live.current().exec.security, Some(crate::Security::Deny));
        let notice = live.notice().expect("a standing notice");
        assert!(notice.contains("last good"), "{notice}");
        // Said once per distinct problem, standing until fixed.
        assert_eq!(live.refresh(), None);
        assert!(live.problem().is_some());
        put(&fs, b"[tools.exec]\nsecurity = \"full\"\n");
        assert!(matches!(live.refresh(), Some(Reload::Applied { .. })));
        assert_eq!(live.problem(), None);
        assert_eq!(live.current().exec.security, Some(crate::Security::Full));
    }

    #[test]
    fn fixing_a_broken_edit_back_to_the_text_in_force_clears_the_problem() {
        let fs = fs();
        let good = "[tools.exec]\nsecurity = \"deny\"\n";
        let live = live(&fs, Some(good));
        put(&fs, b"not toml [");
        assert!(matches!(live.refresh(), Some(Reload::Refused { .. })));
        put(&fs, good.as_bytes());
        assert_eq!(
            live.refresh(),
            Some(Reload::Applied {
                changed: vec![],
                at_restart: vec![]
            })
        );
        assert_eq!(live.problem(), None);
    }

    #[test]
    fn a_removed_file_means_the_defaults_and_sections_read_at_start_are_named() {
        let fs = fs();
        let live = live(
            &fs,
            Some("[gateway]\nmax_runs_per_agent = 2\n[tools.exec]\nsecurity = \"full\"\n"),
        );
        fs.remove(Path::new(PATH)).unwrap();
        let reload = live.refresh();
        assert_eq!(
            reload,
            Some(Reload::Applied {
                changed: vec!["[tools.exec]".into(), "[gateway]".into()],
                at_restart: vec!["[gateway]".into()],
            })
        );
        assert_eq!(*live.current(), Config::default());
    }

    #[test]
    fn an_unchanged_file_is_not_parsed_again_and_nothing_is_reported() {
        let fs = fs();
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let live =
            live(&fs, Some("[tools.exec]\nsecurity = \"deny\"\n")).on_reload(Box::new(move |_| {
                seen.fetch_add(1, Ordering::SeqCst);
            }));
        for _ in 0..5 {
            assert_eq!(live.refresh(), None);
        }
        // The same text written again is not a change either.
        put(&fs, b"[tools.exec]\nsecurity = \"deny\"\n");
        assert_eq!(live.refresh(), None);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_fixed_configuration_never_reads_a_file() {
        let live = LiveConfig::fixed(Config::default());
        assert_eq!(live.refresh(), None);
        assert_eq!(live.notice(), None);
        assert_eq!(live.path(), None);
    }
}
