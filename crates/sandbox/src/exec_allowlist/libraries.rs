//! Where the listed programs' shared libraries are: the directories that stay on mounts
//! allowing code to be mapped when the exec allowlist makes every other mount `noexec`.
//!
//! Found as the dynamic loader finds them — each `DT_NEEDED` name looked up in the
//! object's `DT_RPATH` (when it has no `DT_RUNPATH`) or `DT_RUNPATH`, then in the
//! system's search path (`/etc/ld.so.conf` and the built-in directories) — and followed
//! through the libraries' own needs. Whole directories are kept, not single files:
//! libraries loaded later by name (NSS and `iconv` modules, plugins beside a library)
//! live beside or beneath the ones a program links, and the loader's own search
//! (`glibc-hwcaps` subdirectories) looks there too. A listed *directory* may hold any
//! program, so it keeps the whole search path.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::elf;

/// Objects followed at most (a program's whole dependency tree is a few dozen).
const MAX_OBJECTS: usize = 512;

/// The directories holding the shared libraries `programs` need (real paths, each once,
/// in the order found); with `any_program` (a directory is listed), every directory of
/// the system's search path as well.
pub fn library_dirs(programs: &[PathBuf], any_program: bool) -> Vec<PathBuf> {
    let search = system_dirs();
    let mut out: Vec<PathBuf> = Vec::new();
    let add = |dir: &Path, out: &mut Vec<PathBuf>| {
        if !out.iter().any(|d| d == dir) {
            out.push(dir.to_path_buf());
        }
    };
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut queue: Vec<PathBuf> = programs.to_vec();
    while let Some(object) = queue.pop() {
        if seen.len() >= MAX_OBJECTS || !seen.insert(object.clone()) {
            continue;
        }
        let Some(facts) = elf::dynamic(&object) else {
            continue;
        };
        let origin = object.parent().unwrap_or(Path::new("/"));
        let own: &[String] = if facts.runpath.is_empty() {
            &facts.rpath
        } else {
            &facts.runpath
        };
        let dirs: Vec<PathBuf> = own
            .iter()
            .filter_map(|d| expand(d, origin))
            .chain(search.iter().cloned())
            .collect();
        for name in &facts.needed {
            let found = if name.contains('/') {
                Some(PathBuf::from(name))
            } else {
                dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())
            };
            let Some(real) = found.and_then(|p| std::fs::canonicalize(p).ok()) else {
                continue;
            };
            if let Some(dir) = real.parent() {
                add(dir, &mut out);
            }
            queue.push(real);
        }
    }
    if any_program {
        for dir in &search {
            add(dir, &mut out);
        }
    }
    out
}

/// A search-path entry with `$ORIGIN` (`${ORIGIN}`) replaced by the object's directory;
/// `None` for one naming another token (`$LIB`, `$PLATFORM`: not followed) or relative.
fn expand(entry: &str, origin: &Path) -> Option<PathBuf> {
    let origin = origin.to_string_lossy();
    let expanded = entry
        .replace("${ORIGIN}", &origin)
        .replace("$ORIGIN", &origin);
    (!expanded.contains('$') && expanded.starts_with('/')).then(|| PathBuf::from(expanded))
}

/// The system's library search path: the directories of `/etc/ld.so.conf` (with its
/// `include`s), then the loader's built-in ones (multiarch, `lib64`, `lib`), real and
/// existing, each once.
pub fn system_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    read_conf(Path::new("/etc/ld.so.conf"), 0, &mut dirs);
    for top in ["/lib", "/usr/lib", "/lib64", "/usr/lib64"] {
        if let Ok(entries) = std::fs::read_dir(top) {
            let mut multiarch: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().contains("-linux-"))
                .map(|e| e.path())
                .collect();
            multiarch.sort();
            dirs.extend(multiarch);
        }
        dirs.push(PathBuf::from(top));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        if let Ok(real) = std::fs::canonicalize(&dir)
            && real.is_dir()
            && !out.contains(&real)
        {
            out.push(real);
        }
    }
    out
}

/// The directories named in the `ld.so.conf` file `path` (and the files it includes, at
/// most a few levels deep), in order.
fn read_conf(path: &Path, depth: u32, dirs: &mut Vec<PathBuf>) {
    if depth > 4 {
        return;
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include") {
            let pattern = pattern.trim();
            let pattern = if pattern.starts_with('/') {
                PathBuf::from(pattern)
            } else {
                path.parent().unwrap_or(Path::new("/etc")).join(pattern)
            };
            for file in matching(&pattern) {
                read_conf(&file, depth + 1, dirs);
            }
        } else if line.starts_with('/') {
            // Old forms name a library type after `=`.
            let dir = line.split(['=', ' ', '\t']).next().unwrap_or(line);
            dirs.push(PathBuf::from(dir));
        }
    }
}

/// The files matching `pattern`, a path whose last component may hold glob characters
/// (`/etc/ld.so.conf.d/*.conf`), sorted as `ldconfig` reads them.
fn matching(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let Ok(glob) = globset::Glob::new(&name.to_string_lossy()) else {
        return Vec::new();
    };
    let glob = glob.compile_matcher();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| glob.is_match(e.file_name()))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_is_expanded_and_other_tokens_are_not_followed() {
        let origin = Path::new("/opt/app/bin");
        assert_eq!(
            expand("$ORIGIN/../lib", origin),
            Some(PathBuf::from("/opt/app/bin/../lib"))
        );
        assert_eq!(
            expand("${ORIGIN}/lib", origin),
            Some(PathBuf::from("/opt/app/bin/lib"))
        );
        assert_eq!(expand("/usr/$LIB", origin), None);
        assert_eq!(expand("lib", origin), None);
    }

    #[test]
    fn the_conf_file_and_its_includes_are_read_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("conf.d")).unwrap();
        std::fs::write(
            d.join("ld.so.conf"),
            "# comment\n/opt/first\ninclude conf.d/*.conf\n/opt/last=libc6\n",
        )
        .unwrap();
        std::fs::write(d.join("conf.d/b.conf"), "/opt/b\n").unwrap();
        std::fs::write(d.join("conf.d/a.conf"), "/opt/a # trailing\n").unwrap();
        std::fs::write(d.join("conf.d/skip.txt"), "/opt/skip\n").unwrap();
        let mut dirs = Vec::new();
        read_conf(&d.join("ld.so.conf"), 0, &mut dirs);
        let want: Vec<PathBuf> = ["/opt/first", "/opt/a", "/opt/b", "/opt/last"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(dirs, want);
    }

    #[test]
    fn a_program_s_libraries_are_found_where_the_loader_finds_them() {
        let me = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let dirs = library_dirs(std::slice::from_ref(&me), false);
        // libc, wherever this system keeps it, and nothing the program does not need.
        let libc = dirs.iter().any(|d| {
            std::fs::read_dir(d)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("libc.so"))
        });
        assert!(libc, "{dirs:?}");
        assert!(dirs.len() <= system_dirs().len(), "{dirs:?}");
        // A listed directory may hold any program: the whole search path.
        let all = library_dirs(&[], true);
        assert_eq!(all, system_dirs());
        assert!(library_dirs(&[], false).is_empty());
    }
}
