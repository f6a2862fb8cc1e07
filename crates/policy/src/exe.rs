//! Executable resolution: which file will actually run for a program name, found through
//! the host's trusted PATH (never the request's) and canonicalised, all through `caps::Fs`.

use std::path::{Path, PathBuf};

use caps::{FileId, Fs};
use serde::Serialize;

/// How the program was named in the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invocation {
    /// A bare name (`rg`), looked up in the trusted PATH.
    Bare,
    /// A relative path (`./build.sh`, `bin/tool`), taken from the working directory.
    Relative,
    /// An absolute path.
    Absolute,
}

/// A program name resolved to the file that will run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResolvedExe {
    /// The name as written in the command.
    pub invoked: String,
    /// How it was written.
    pub how: Invocation,
    /// Canonical absolute path of the file (every symlink resolved).
    pub path: PathBuf,
    /// Which file that was when it was resolved: a plan that runs it insists on it.
    pub id: FileId,
}

/// Why a program name did not resolve (an allowlist miss, never an error that runs
/// something else).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ResolveFailure {
    /// No such file on the trusted PATH / at that path.
    NotFound,
    /// Found, but not an executable regular file.
    NotExecutable {
        /// The file found.
        path: PathBuf,
    },
    /// The name is unusable (empty, NUL byte).
    Invalid,
}

/// The host facts resolution needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedPath {
    dirs: Vec<PathBuf>,
}

impl TrustedPath {
    /// Parse a `PATH`-style string; relative and empty entries are dropped, because
    /// they would make the lookup depend on the working directory.
    pub fn parse(path: &str) -> Self {
        TrustedPath {
            dirs: path
                .split(':')
                .filter(|d| d.starts_with('/'))
                .map(PathBuf::from)
                .collect(),
        }
    }

    /// The directories, in search order.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// As a `PATH` value.
    pub fn to_path_var(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(":")
    }
}

fn executable(fs: &dyn Fs, path: &Path) -> Result<(PathBuf, FileId), ResolveFailure> {
    let canonical = fs
        .canonicalize(path)
        .map_err(|_| ResolveFailure::NotFound)?;
    match fs.metadata(&canonical) {
        Ok(m) if m.is_executable_file() => Ok((canonical, m.id)),
        Ok(_) => Err(ResolveFailure::NotExecutable { path: canonical }),
        Err(_) => Err(ResolveFailure::NotFound),
    }
}

/// Resolve `name` as it would be executed from `cwd` with `trusted` as the search path.
pub fn resolve_executable(
    fs: &dyn Fs,
    name: &str,
    cwd: &Path,
    trusted: &TrustedPath,
) -> Result<ResolvedExe, ResolveFailure> {
    if name.is_empty() || name.contains('\0') {
        return Err(ResolveFailure::Invalid);
    }
    let resolved = |how, (path, id)| ResolvedExe {
        invoked: name.to_owned(),
        how,
        path,
        id,
    };
    if name.starts_with('/') {
        return executable(fs, Path::new(name)).map(|p| resolved(Invocation::Absolute, p));
    }
    if name.contains('/') {
        return executable(fs, &cwd.join(name)).map(|p| resolved(Invocation::Relative, p));
    }
    let mut first_failure = ResolveFailure::NotFound;
    for dir in trusted.dirs() {
        match executable(fs, &dir.join(name)) {
            Ok(found) => return Ok(resolved(Invocation::Bare, found)),
            Err(f @ ResolveFailure::NotExecutable { .. })
                if first_failure == ResolveFailure::NotFound =>
            {
                first_failure = f;
            }
            Err(_) => {}
        }
    }
    Err(first_failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::{MemoryFs, WriteOptions};

    fn world() -> MemoryFs {
        let fs = MemoryFs::new();
        for d in ["/usr/bin", "/usr/local/bin", "/opt/tools", "/work/bin"] {
            fs.create_dir_all(Path::new(d), 0o755).unwrap();
        }
        let exe = WriteOptions {
            mode: 0o755,
            ..Default::default()
        };
        fs.write(Path::new("/usr/bin/rg"), b"", exe).unwrap();
        fs.write(Path::new("/opt/tools/python3.11"), b"", exe)
            .unwrap();
        fs.symlink("/opt/tools/python3.11", "/usr/bin/python3")
            .unwrap();
        fs.write(
            Path::new("/usr/local/bin/notes"),
            b"",
            WriteOptions::default(),
        )
        .unwrap();
        fs.write(Path::new("/work/bin/build"), b"", exe).unwrap();
        fs
    }

    #[test]
    fn bare_names_use_only_absolute_trusted_entries() {
        let fs = world();
        let trusted = TrustedPath::parse("bin::/usr/local/bin:/usr/bin:.");
        assert_eq!(trusted.dirs().len(), 2);
        let r = resolve_executable(&fs, "rg", Path::new("/work"), &trusted).unwrap();
        assert_eq!(
            (r.how, r.path.as_path()),
            (Invocation::Bare, Path::new("/usr/bin/rg"))
        );
        // `bin` (relative) would have found /work/bin/build: it is ignored.
        assert_eq!(
            resolve_executable(&fs, "build", Path::new("/work"), &trusted),
            Err(ResolveFailure::NotFound)
        );
    }

    #[test]
    fn symlinks_resolve_to_the_file_that_runs() {
        let fs = world();
        let trusted = TrustedPath::parse("/usr/bin");
        let r = resolve_executable(&fs, "python3", Path::new("/"), &trusted).unwrap();
        assert_eq!(r.path, Path::new("/opt/tools/python3.11"));
    }

    #[test]
    fn relative_and_absolute_names() {
        let fs = world();
        let trusted = TrustedPath::parse("/usr/bin");
        let r = resolve_executable(&fs, "bin/build", Path::new("/work"), &trusted).unwrap();
        assert_eq!(
            (r.how, r.path.as_path()),
            (Invocation::Relative, Path::new("/work/bin/build"))
        );
        let r =
            resolve_executable(&fs, "./bin/../bin/build", Path::new("/work"), &trusted).unwrap();
        assert_eq!(r.path, Path::new("/work/bin/build"));
        let r = resolve_executable(&fs, "/usr/bin/rg", Path::new("/"), &trusted).unwrap();
        assert_eq!(r.how, Invocation::Absolute);
    }

    #[test]
    fn non_executables_and_garbage_do_not_resolve() {
        let fs = world();
        let trusted = TrustedPath::parse("/usr/local/bin:/usr/bin");
        assert!(matches!(
            resolve_executable(&fs, "notes", Path::new("/"), &trusted),
            Err(ResolveFailure::NotExecutable { .. })
        ));
        assert_eq!(
            resolve_executable(&fs, "", Path::new("/"), &trusted),
            Err(ResolveFailure::Invalid)
        );
        assert_eq!(
            resolve_executable(&fs, "a\0b", Path::new("/"), &trusted),
            Err(ResolveFailure::Invalid)
        );
        assert!(matches!(
            resolve_executable(&fs, "/usr/bin", Path::new("/"), &trusted),
            Err(ResolveFailure::NotExecutable { .. })
        ));
    }
}
