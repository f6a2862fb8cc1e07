//! The exec allowlist of the bubblewrap sandbox: which files a command (and everything it
//! starts) may `execve`. The kernel enforces it with Landlock's `EXECUTE` right, applied
//! by the helper right before it executes the command, so it holds in every descendant
//! and no program can lift it.
//!
//! Two layers, both by construction:
//!
//! 1. **Mounts**: inside the sandbox every mount is `noexec` except the listed files and
//!    directories, their dynamic loaders and the directories of the libraries they need
//!    ([`Resolved`]; applied by whoever builds the mount tree, see
//!    `builder::fs::Tree::exec_only`). The kernel then refuses both `execve` of any
//!    other file and mapping it as code — so the dynamic loader run as a program
//!    (`ld.so FILE`), `LD_PRELOAD`/`LD_AUDIT` of a library the command wrote, and a copy
//!    of a program in a writable path or `/tmp` all fail. A listed file is seen
//!    read-only for the run, so it cannot be changed into something else either.
//! 2. **Landlock** (`EXECUTE`, applied by the helper right before the command starts):
//!    `execve`/`execveat` of a file — and whatever the kernel opens for execution on the
//!    way: a script's `#!` interpreter and an ELF program's loader (`PT_INTERP`) — only
//!    for the listed files and their loaders ([`interpreter`]). Files in memory
//!    (`memfd_create`) lie beneath no path and no mount, so under an allowlist a seccomp
//!    filter refuses to create a memfd that could be made executable ([`memfd_program`]:
//!    only `MFD_NOEXEC_SEAL` ones, Linux 6.3+, may be created).
//!
//! What it cannot cover: code an allowed program runs without loading a file as code. An
//! allowed interpreter runs any script it is handed (`sh FILE`, `python3 FILE`); an
//! allowed program's own plugins load from the library directories it needs; and a
//! program that lies inside one of those library directories can be mapped by the
//! loader — [`diagnose`] and the threat model say so.
//!
//! Entries are resolved to their real paths on the host before each run ([`resolve`]);
//! one that does not exist, or that the sandbox hides, allows nothing.

mod diagnose;
mod elf;
mod libraries;
mod noexec;

pub use diagnose::{diagnose, dynamic_loaders};
pub use elf::{Dynamic, dynamic, interpreter};
pub use libraries::{library_dirs, system_dirs};
pub(crate) use noexec::keep_executable_only;

use std::path::{Path, PathBuf};

use crate::SandboxError;
use landlock::{
    AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus,
};

/// Whether a kernel offering Landlock ABI `abi` can enforce an exec allowlist:
/// `LANDLOCK_ACCESS_FS_EXECUTE` exists from ABI 1 on.
pub fn kernel_support(abi: i64) -> Result<(), SandboxError> {
    if abi >= 1 {
        Ok(())
    } else {
        Err(SandboxError::Landlock(
            "this kernel does not offer Landlock, which enforces the exec allowlist".into(),
        ))
    }
}

/// What the kernel is told to allow for one run's allowlist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// May be executed, and sit on mounts that allow execution: the entries' real paths
    /// and the loaders they need.
    pub executable: Vec<PathBuf>,
    /// May be mapped as code, never executed: the directories of the libraries the
    /// executable files need.
    pub libraries: Vec<PathBuf>,
}

impl Resolved {
    /// Everything that stays on mounts that allow code: executable files first, then the
    /// library directories, each once.
    pub fn exec_mounts(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for p in self.executable.iter().chain(&self.libraries) {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }
}

/// What the kernel is told to allow for `entries` ([`Resolved`]): their real paths on
/// this host, in order and without duplicates, then the dynamic loaders they need — a
/// listed ELF file's own `PT_INTERP`, and for a listed directory every loader of this
/// host (its programs may use any) — and the directories of the libraries they need. An
/// entry that does not resolve is left out: a file that is not there cannot be allowed,
/// and leaving it out only ever allows less.
pub fn resolve(entries: &[PathBuf]) -> Resolved {
    let executable = executable(entries);
    let files: Vec<PathBuf> = executable.iter().filter(|p| p.is_file()).cloned().collect();
    let any_program = executable.iter().any(|p| p.is_dir());
    Resolved {
        libraries: library_dirs(&files, any_program),
        executable,
    }
}

/// The executable part of [`resolve`]: entries and their loaders.
fn executable(entries: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut loaders: Vec<PathBuf> = Vec::new();
    let mut directories = false;
    for entry in entries {
        let real = match std::fs::canonicalize(entry) {
            Ok(real) => real,
            Err(e) => {
                tracing::debug!("exec allowlist entry {} skipped: {e}", entry.display());
                continue;
            }
        };
        if real.is_dir() {
            directories = true;
        } else if let Some(loader) =
            elf::interpreter(&real).and_then(|l| std::fs::canonicalize(l).ok())
        {
            loaders.push(loader);
        }
        out.push(real);
    }
    if directories {
        loaders.extend(dynamic_loaders());
    }
    for path in loaders {
        if !covers(&out, &path) {
            out.push(path);
        }
    }
    let mut unique: Vec<PathBuf> = Vec::new();
    for path in out {
        if !unique.contains(&path) {
            unique.push(path);
        }
    }
    unique
}

/// `memfd_create` without `MFD_NOEXEC_SEAL` fails with EPERM: such a file could be
/// written and executed from memory, where no Landlock rule reaches.
pub fn memfd_program() -> Result<seccompiler::BpfProgram, SandboxError> {
    use crate::seccomp::{compile, cond, rule};
    use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp};
    const MFD_NOEXEC_SEAL: u64 = 0x0008;
    let without_seal = cond(
        1,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(MFD_NOEXEC_SEAL),
        0,
    )
    .and_then(|c| rule(vec![c]))?;
    let rules =
        std::collections::BTreeMap::from([(nix::libc::SYS_memfd_create, vec![without_seal])]);
    Ok(compile(
        rules,
        SeccompAction::Errno(nix::libc::EPERM as u32),
    )?)
}

/// Restrict the calling process (and its future children) to executing only files that
/// are, or lie beneath, `paths`, and to memfds that cannot be executed. Inside the
/// sandbox, by the (single-threaded) helper. All or nothing: a kernel that cannot enforce
/// it is an error, never a silent pass.
pub fn restrict(paths: &[PathBuf]) -> Result<(), SandboxError> {
    let memfd = memfd_program()?;
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::Execute)
        .map_err(SandboxError::landlock)?;
    let mut created = ruleset.create().map_err(SandboxError::landlock)?;
    for path in paths {
        // Hidden inside (a home, Warden's state) or gone since it was resolved: nothing
        // there can be executed anyway.
        let Ok(fd) = PathFd::new(path) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::Execute))
            .map_err(SandboxError::landlock)?;
    }
    let status = created.restrict_self().map_err(SandboxError::landlock)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(SandboxError::Landlock(format!(
            "the kernel enforces it only {:?}",
            status.ruleset
        )));
    }
    // no_new_privs is set (by bubblewrap, and by restrict_self), so an unprivileged
    // process may install it.
    seccompiler::apply_filter(&memfd)
        .map_err(|e| SandboxError::Landlock(format!("memfd filter: {e}")))
}

/// True when `path` is one of `entries` or lies beneath one (both real paths): what the
/// kernel will allow.
pub fn covers(entries: &[PathBuf], path: &Path) -> bool {
    entries.iter().any(|e| path.starts_with(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_kernel_with_landlock_can_enforce_it() {
        assert!(
            kernel_support(0)
                .unwrap_err()
                .to_string()
                .contains("Landlock")
        );
        assert!(kernel_support(-1).is_err());
        assert!(kernel_support(1).is_ok());
        assert!(kernel_support(7).is_ok());
    }

    #[test]
    fn entries_resolve_to_real_paths_and_missing_ones_allow_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let real_dir = std::fs::canonicalize(dir.path()).unwrap();
        let tool = real_dir.join("tool");
        std::fs::write(&tool, "").unwrap();
        let link = real_dir.join("link");
        std::os::unix::fs::symlink(&tool, &link).unwrap();
        let resolved = resolve(&[link.clone(), tool.clone(), real_dir.join("missing")]).executable;
        assert_eq!(
            resolved,
            vec![tool.clone()],
            "an empty file needs no loader"
        );
        assert!(covers(&resolved, &tool));
        assert!(
            !covers(&resolved, &link),
            "the link itself is not what runs"
        );
        assert!(covers(std::slice::from_ref(&real_dir), &tool));
        assert!(!covers(std::slice::from_ref(&tool), &real_dir));
    }

    #[test]
    fn a_listed_program_brings_its_dynamic_loader_and_a_directory_all_of_them() {
        let me = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let Some(loader) = interpreter(&me) else {
            eprintln!("SKIPPED: this test binary is statically linked");
            return;
        };
        let loader = std::fs::canonicalize(loader).unwrap();
        let resolved = resolve(std::slice::from_ref(&me)).executable;
        assert_eq!(resolved, vec![me.clone(), loader.clone()]);
        let dir = me.parent().unwrap().to_path_buf();
        let resolved = resolve(std::slice::from_ref(&dir)).executable;
        assert_eq!(resolved[0], dir);
        assert!(resolved.contains(&loader), "{resolved:?}");
        // Listed twice, or covered by a listed directory: once.
        let loader_dir = loader.parent().unwrap().to_path_buf();
        let resolved = resolve(&[loader_dir.clone(), me.clone(), loader_dir.clone()]).executable;
        // Then exactly the host's other dynamic loaders (a listed directory brings every
        // one: musl's too, where it is installed), each once, none the listed entries
        // cover.
        let mut expected = vec![loader_dir, me];
        for other in dynamic_loaders() {
            if !covers(&expected, &other) {
                expected.push(other);
            }
        }
        assert_eq!(resolved, expected);
    }
}
