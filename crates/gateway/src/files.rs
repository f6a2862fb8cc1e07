//! The agent's file tools (`read`, `write`, `edit`, `list`, `grep`), confined by path
//! authorization: `writable_paths` (read and write) and `readable_extra_paths` (read
//! only), each served through its own bounded `Fs` root. Warden's protected directories
//! (its state, the approver socket's directory) are never reachable, whatever the roots
//! are: each root's guard judges where every opened handle really is, so no symlink or
//! race leads into them; and nothing is written inside a repository's `.git`.

use std::path::{Component, Path, PathBuf};

use std::sync::Arc;

use caps::{Access, DEFAULT_MAX_OUTPUT_BYTES, FileKind, Fs, Guard, WriteOptions};
use serde::Serialize;

/// Largest file `read`, `edit` and `grep` will load.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Most entries `list` returns.
pub const MAX_LIST_ENTRIES: usize = 2000;
/// Most matches `grep` returns.
pub const MAX_GREP_MATCHES: usize = 500;
/// Most files `grep` looks at.
pub const MAX_GREP_FILES: usize = 20_000;

/// Which directories an agent may read and write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PathAuthorization {
    /// Read and write (the first one is the workspace: relative paths start there).
    pub writable_paths: Vec<PathBuf>,
    /// Read only.
    pub readable_extra_paths: Vec<PathBuf>,
}

/// Why a file tool refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Outside what the agent may access, or Warden's own state.
    #[error("access denied: {0}")]
    Denied(String),
    /// Bad arguments or an impossible edit.
    #[error("{0}")]
    Invalid(String),
    /// A filesystem error.
    #[error("{0}")]
    Io(String),
}

impl From<caps::CapsError> for FileError {
    fn from(e: caps::CapsError) -> Self {
        if e.is_denied() {
            FileError::Denied(e.to_string())
        } else {
            FileError::Io(e.to_string())
        }
    }
}

/// Opens one authorized root for the file tools: an `Fs` confined beneath the directory
/// (`caps::BoundedFs` in the `warden` binary), every handle it opens judged by the guard.
/// The composition root supplies it: the gateway opens no filesystem itself.
pub type OpenRoot<'a> = &'a dyn Fn(&Path, Guard) -> caps::Result<Arc<dyn Fs>>;

struct Root {
    path: PathBuf,
    fs: Arc<dyn Fs>,
    writable: bool,
}

/// The file tools of one gateway.
pub struct FileTools {
    roots: Vec<Root>,
    protected: Vec<PathBuf>,
}

impl std::fmt::Debug for FileTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileTools")
            .field(
                "roots",
                &self
                    .roots
                    .iter()
                    .map(|r| (&r.path, r.writable))
                    .collect::<Vec<_>>(),
            )
            .field("protected", &self.protected)
            .finish()
    }
}

fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// A line of `grep` output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrepMatch {
    /// The file, as the agent would name it.
    pub path: String,
    /// 1-based line number.
    pub line: usize,
    /// The line's text.
    pub text: String,
}

/// A `list` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListEntry {
    /// File name.
    pub name: String,
    /// Kind.
    pub kind: FileKind,
}

/// A path component that makes a write a change to git's own files.
fn is_git_internal(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == ".git")
}

/// The guard every root gets: nothing inside a protected directory, for any access; no
/// write inside a repository's `.git`. It judges real paths of opened handles.
fn guard(protected: Vec<PathBuf>, read_only: Vec<PathBuf>) -> Guard {
    Arc::new(move |real: &Path, access: Access| {
        if let Some(dir) = protected.iter().find(|p| real.starts_with(p)) {
            return Err(format!(
                "{} is inside {}, which Warden protects (its state or the approver's socket)",
                real.display(),
                dir.display()
            ));
        }
        if access == Access::Write
            && let Some(dir) = read_only.iter().find(|p| real.starts_with(p))
        {
            return Err(format!(
                "{} is inside {}, which holds the programs Warden runs: the file tools do not change it",
                real.display(),
                dir.display()
            ));
        }
        if access == Access::Write && is_git_internal(real) {
            return Err(GIT_REFUSAL.to_owned());
        }
        Ok(())
    })
}

/// Why writes inside `.git` are refused.
const GIT_REFUSAL: &str = "inside a repository's .git: the file tools do not change git's own files (hooks and configuration there run outside the sandbox)";

impl FileTools {
    /// Open every authorized root (canonical absolute directories) and remember the
    /// protected directories (canonical: Warden's state, the approver socket's
    /// directory, wherever they show), which no operation may reach, and the read-only
    /// ones (the directories of Warden's programs), which no write may reach. Each root
    /// is opened by `open_root` with the guard that enforces both.
    pub fn open(
        auth: &PathAuthorization,
        protected: Vec<PathBuf>,
        read_only: Vec<PathBuf>,
        open_root: OpenRoot<'_>,
    ) -> Result<FileTools, FileError> {
        let protected: Vec<PathBuf> = protected.iter().map(|d| lexical(d)).collect();
        let read_only: Vec<PathBuf> = read_only.iter().map(|d| lexical(d)).collect();
        let mut roots = Vec::new();
        for (paths, writable) in [
            (&auth.writable_paths, true),
            (&auth.readable_extra_paths, false),
        ] {
            for p in paths {
                if !p.is_absolute() {
                    return Err(FileError::Invalid(format!(
                        "authorized path {} is not absolute",
                        p.display()
                    )));
                }
                let fs = open_root(p, guard(protected.clone(), read_only.clone()))
                    .map_err(|e| FileError::Io(format!("cannot open {}: {e}", p.display())))?;
                roots.push(Root {
                    path: lexical(p),
                    fs,
                    writable,
                });
            }
        }
        Ok(FileTools { roots, protected })
    }

    /// The workspace (first writable root).
    pub fn workspace(&self) -> Option<&Path> {
        self.roots
            .iter()
            .find(|r| r.writable)
            .map(|r| r.path.as_path())
    }

    /// Find the root for `path` and the path relative to it.
    fn locate(&self, path: &str, write: bool) -> Result<(&Root, PathBuf), FileError> {
        if path.contains('\0') {
            return Err(FileError::Denied("path contains a NUL byte".into()));
        }
        let workspace = self
            .roots
            .iter()
            .find(|r| r.writable)
            .or(self.roots.first())
            .ok_or_else(|| FileError::Denied("no paths are authorized".into()))?;
        let requested = if path.is_empty() {
            Path::new(".")
        } else {
            Path::new(path)
        };
        let absolute = if requested.is_absolute() {
            lexical(requested)
        } else {
            lexical(&workspace.path.join(requested))
        };
        // Said early and plainly; the roots' guards enforce it on every handle.
        if self.protected.iter().any(|p| absolute.starts_with(p)) {
            return Err(FileError::Denied(format!(
                "{path} is inside a directory Warden protects (its state or the approver's socket)"
            )));
        }
        // The most specific root containing the path.
        let root = self
            .roots
            .iter()
            .filter(|r| absolute.starts_with(&r.path))
            .max_by_key(|r| r.path.components().count())
            .ok_or_else(|| FileError::Denied(format!("{path} is outside the authorized paths")))?;
        if write && !root.writable {
            return Err(FileError::Denied(format!(
                "{path} is in a read-only path ({})",
                root.path.display()
            )));
        }
        let rel = absolute
            .strip_prefix(&root.path)
            .unwrap_or(Path::new(""))
            .to_path_buf();
        if write {
            refuse_git_internals(root, &rel, path)?;
        }
        Ok((root, rel))
    }

    /// Would a write to `path` be refused? Checked before anyone is asked to approve it.
    pub fn check_writable(&self, path: &str) -> Result<(), FileError> {
        self.locate(path, true).map(|_| ())
    }

    /// Read a text file, optionally a window of lines (1-based `offset`, `limit` lines).
    pub fn read(
        &self,
        path: &str,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> Result<String, FileError> {
        let (root, rel) = self.locate(path, false)?;
        let meta = root.fs.metadata(&rel)?;
        if !meta.is_file() {
            return Err(FileError::Invalid(format!("{path} is not a file")));
        }
        if meta.len > MAX_FILE_BYTES {
            return Err(FileError::Invalid(format!(
                "{path} is larger than {MAX_FILE_BYTES} bytes"
            )));
        }
        let bytes = root.fs.read(&rel)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| FileError::Invalid(format!("{path} is not UTF-8 text")))?;
        let text = match (offset, limit) {
            (None, None) => text,
            (o, l) => {
                let start = o.unwrap_or(1).max(1) - 1;
                text.split_inclusive('\n')
                    .skip(start)
                    .take(l.unwrap_or(usize::MAX))
                    .collect()
            }
        };
        Ok(cap(text))
    }

    /// Create or replace a file (parents created), atomically.
    pub fn write(&self, path: &str, content: &str) -> Result<usize, FileError> {
        let (root, rel) = self.locate(path, true)?;
        if rel.as_os_str().is_empty() {
            return Err(FileError::Invalid("cannot write to a directory".into()));
        }
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            root.fs.create_dir_all(parent, 0o755)?;
        }
        let mode = match root.fs.metadata(&rel) {
            Ok(m) if m.is_file() => m.mode,
            Ok(_) => return Err(FileError::Invalid(format!("{path} is not a file"))),
            Err(_) => 0o644,
        };
        root.fs.write_atomic(
            &rel,
            content.as_bytes(),
            WriteOptions {
                mode,
                create_new: false,
            },
        )?;
        Ok(content.len())
    }

    /// Replace `old` by `new` exactly once (or everywhere with `all`).
    pub fn edit(&self, path: &str, old: &str, new: &str, all: bool) -> Result<usize, FileError> {
        if old.is_empty() {
            return Err(FileError::Invalid("old_string must not be empty".into()));
        }
        let (root, rel) = self.locate(path, true)?;
        let meta = root.fs.metadata(&rel)?;
        if !meta.is_file() || meta.len > MAX_FILE_BYTES {
            return Err(FileError::Invalid(format!(
                "{path} is not an editable file"
            )));
        }
        let text = String::from_utf8(root.fs.read(&rel)?)
            .map_err(|_| FileError::Invalid(format!("{path} is not UTF-8 text")))?;
        let count = text.matches(old).count();
        match (count, all) {
            (0, _) => {
                return Err(FileError::Invalid(format!(
                    "old_string was not found in {path}"
                )));
            }
            (n, false) if n > 1 => {
                return Err(FileError::Invalid(format!(
                    "old_string appears {n} times in {path}; give more context or set replace_all"
                )));
            }
            _ => {}
        }
        let updated = if all {
            text.replace(old, new)
        } else {
            text.replacen(old, new, 1)
        };
        root.fs.write_atomic(
            &rel,
            updated.as_bytes(),
            WriteOptions {
                mode: meta.mode,
                create_new: false,
            },
        )?;
        Ok(count)
    }

    /// List a directory.
    pub fn list(&self, path: &str) -> Result<(Vec<ListEntry>, bool), FileError> {
        let (root, rel) = self.locate(path, false)?;
        let entries = root.fs.list(&rel)?;
        let truncated = entries.len() > MAX_LIST_ENTRIES;
        Ok((
            entries
                .into_iter()
                .take(MAX_LIST_ENTRIES)
                .map(|e| ListEntry {
                    name: e.name.to_string_lossy().into_owned(),
                    kind: e.kind,
                })
                .collect(),
            truncated,
        ))
    }

    /// Search files under `path` for `pattern` (a regular expression); `glob` filters
    /// file names.
    pub fn grep(
        &self,
        pattern: &str,
        path: &str,
        glob: Option<&str>,
    ) -> Result<(Vec<GrepMatch>, bool), FileError> {
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| FileError::Invalid(format!("invalid pattern: {e}")))?;
        let name_filter = glob
            .map(|g| globset::Glob::new(g).map(|g| g.compile_matcher()))
            .transpose()
            .map_err(|e| FileError::Invalid(format!("invalid glob: {e}")))?;
        let (root, rel) = self.locate(path, false)?;
        let shown_base = if path.is_empty() {
            String::new()
        } else {
            path.trim_end_matches('/').to_owned()
        };
        let mut matches = Vec::new();
        let mut files = 0usize;
        let mut stack = vec![(rel.clone(), shown_base)];
        let mut truncated = false;
        if root.fs.metadata(&rel)?.is_file() {
            stack.clear();
            self.grep_file(root, &rel, path, &regex, &mut matches, &mut truncated);
        }
        while let Some((dir, shown)) = stack.pop() {
            let Ok(entries) = root.fs.list(&dir) else {
                continue;
            };
            for e in entries {
                let name = e.name.to_string_lossy().into_owned();
                let child = dir.join(&name);
                let shown_child = if shown.is_empty() {
                    name.clone()
                } else {
                    format!("{shown}/{name}")
                };
                let absolute = lexical(&root.path.join(&child));
                if self.protected.iter().any(|p| absolute.starts_with(p)) {
                    continue;
                }
                match e.kind {
                    FileKind::Dir if name != ".git" => stack.push((child, shown_child)),
                    FileKind::File => {
                        if name_filter.as_ref().is_some_and(|m| !m.is_match(&name)) {
                            continue;
                        }
                        files += 1;
                        if files > MAX_GREP_FILES {
                            return Ok((matches, true));
                        }
                        self.grep_file(
                            root,
                            &child,
                            &shown_child,
                            &regex,
                            &mut matches,
                            &mut truncated,
                        );
                    }
                    _ => {}
                }
                if truncated {
                    return Ok((matches, true));
                }
            }
        }
        Ok((matches, truncated))
    }

    fn grep_file(
        &self,
        root: &Root,
        rel: &Path,
        shown: &str,
        regex: &regex::Regex,
        out: &mut Vec<GrepMatch>,
        truncated: &mut bool,
    ) {
        let Ok(meta) = root.fs.metadata(rel) else {
            return;
        };
        if meta.len > MAX_FILE_BYTES {
            return;
        }
        let Ok(bytes) = root.fs.read(rel) else { return };
        if bytes.contains(&0) {
            return; // binary
        }
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                if out.len() >= MAX_GREP_MATCHES {
                    *truncated = true;
                    return;
                }
                out.push(GrepMatch {
                    path: shown.to_owned(),
                    line: i + 1,
                    text: line.chars().take(500).collect(),
                });
            }
        }
    }
}

/// Cap text at the output limit, on a character boundary, with the truncation marker.
fn cap(text: String) -> String {
    if text.len() <= DEFAULT_MAX_OUTPUT_BYTES {
        return text;
    }
    caps::truncate_utf8_head(&text.as_bytes()[..DEFAULT_MAX_OUTPUT_BYTES], true)
}

/// The file tools never write inside a repository's `.git` (directory or pointer file),
/// also not through a symlink: git runs hooks and takes commands from its configuration
/// there, outside any sandbox. Commands change repositories through git itself.
fn refuse_git_internals(root: &Root, rel: &Path, shown: &str) -> Result<(), FileError> {
    let is_git = is_git_internal;
    let refusal = || FileError::Denied(format!("{shown} is {GIT_REFUSAL}"));
    if is_git(rel) {
        return Err(refusal());
    }
    // Where it really lands: the deepest existing ancestor, symlinks resolved.
    let mut probe = rel.to_path_buf();
    loop {
        match root.fs.canonicalize(&probe) {
            Ok(real) => {
                return if is_git(&real) {
                    Err(refusal())
                } else {
                    Ok(())
                };
            }
            Err(e) if e.is_denied() => return Err(e.into()),
            Err(_) => {
                if !probe.pop() {
                    return Ok(());
                }
            }
        }
    }
}
