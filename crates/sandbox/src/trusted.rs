//! Trusted system binaries: the programs the sandbox backends start on the host
//! (`bwrap`, the container engine) come from system directories only — never a
//! workspace or `PATH` — and must be files only root can replace.

use std::path::{Path, PathBuf};

/// The directories trusted binaries are looked up in.
pub const TRUSTED_SYSTEM_DIRS: &[&str] = &["/usr/bin", "/bin"];

/// The first trustworthy `name` in `dirs`, canonical: a regular, executable file that,
/// after resolving symlinks, is owned by root and not writable by group or others, in a
/// directory with the same properties. On failure, every problem found (empty when the
/// file exists nowhere).
pub fn system_binary(name: &str, dirs: &[PathBuf]) -> Result<PathBuf, Vec<String>> {
    let mut problems = Vec::new();
    for dir in dirs {
        if !dir.is_absolute() {
            problems.push(format!("directory {} is not absolute", dir.display()));
            continue;
        }
        match check_file(&dir.join(name)) {
            Ok(Some(path)) => return Ok(path),
            Ok(None) => {}
            Err(problem) => problems.push(problem),
        }
    }
    Err(problems)
}

/// `Ok(None)`: no such file. `Err`: a file that exists but must not be run.
fn check_file(candidate: &Path) -> Result<Option<PathBuf>, String> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::symlink_metadata(candidate).is_err() {
        return Ok(None);
    }
    let real = std::fs::canonicalize(candidate)
        .map_err(|e| format!("{} cannot be resolved: {e}", candidate.display()))?;
    let shown = if real == candidate {
        candidate.display().to_string()
    } else {
        format!("{} (-> {})", candidate.display(), real.display())
    };
    let meta = std::fs::metadata(&real).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    if meta.uid() != 0 {
        return Err(format!("{shown} is not owned by root"));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("{shown} is writable by group or others"));
    }
    if meta.mode() & 0o111 == 0 {
        return Err(format!("{shown} is not executable"));
    }
    // Whoever can write the directory can replace the file.
    if let Some(parent) = real.parent() {
        let dir = std::fs::metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        if dir.uid() != 0 || dir.mode() & 0o022 != 0 {
            return Err(format!(
                "{shown} is in {}, which is not owned by root or is writable by group or others",
                parent.display()
            ));
        }
    }
    Ok(Some(real))
}
