//! Lexical path checks shared by every provider's `resolve_path` (no I/O here).

use std::path::{Component, Path, PathBuf};

use crate::{CapsError, Result};

/// Refuse a path containing a NUL byte (it would be silently cut by the C API).
pub(crate) fn reject_nul(path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(CapsError::denied(path, "path contains a NUL byte"));
    }
    Ok(())
}

/// Lexically normalise an absolute path: drop `.`, apply `..` (never above `/`).
pub(crate) fn normalize_absolute(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
        }
    }
    out
}

/// Lexically normalise a path relative to a confinement root: drop `.`, apply `..`, and
/// refuse absolute paths and any `..` that would climb above the root.
pub(crate) fn normalize_beneath(path: &Path) -> Result<PathBuf> {
    reject_nul(path)?;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => {
                return Err(CapsError::denied(
                    path,
                    "absolute paths are outside the bounded root",
                ));
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(CapsError::denied(path, "`..` leaves the bounded root"));
                }
            }
            Component::Normal(name) => out.push(name),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_normalisation_never_climbs_above_root() {
        assert_eq!(
            normalize_absolute(Path::new("/a/../../b/./c")),
            Path::new("/b/c")
        );
    }

    #[test]
    fn beneath_rejects_escapes_and_absolute_paths() {
        assert!(
            normalize_beneath(Path::new("../x"))
                .unwrap_err()
                .is_denied()
        );
        assert!(
            normalize_beneath(Path::new("a/../../x"))
                .unwrap_err()
                .is_denied()
        );
        assert!(
            normalize_beneath(Path::new("/etc/passwd"))
                .unwrap_err()
                .is_denied()
        );
        assert!(
            normalize_beneath(Path::new("a\0b"))
                .unwrap_err()
                .is_denied()
        );
        assert_eq!(
            normalize_beneath(Path::new("a/./b/../c")).unwrap(),
            Path::new("a/c")
        );
        assert_eq!(normalize_beneath(Path::new("")).unwrap(), Path::new(""));
    }
}
