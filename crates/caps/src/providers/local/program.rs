//! A program Warden executes for itself (the helper binary), opened once and executed
//! through that descriptor ever after: whatever happens to its path on disk later — a
//! rename, a replacement, a planted file of the same name — every start runs the file
//! that was opened (and checked) first. The path handed to `posix_spawn` is this
//! process's `/proc/PID/fd/N`, which names the open file itself (a child resolves it
//! before its own descriptors are closed, and a command in another pid namespace cannot
//! name it at all).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An opened program file: where it was found, its identity, and the path that executes
/// exactly it.
#[derive(Clone, Debug)]
pub struct OpenedProgram {
    real: PathBuf,
    file: Arc<OwnedFd>,
    exec_path: PathBuf,
    id: (u64, u64),
}

impl OpenedProgram {
    /// Open `path` (resolved to its real path first) for execution by descriptor. The
    /// descriptor stays open for as long as a clone of this value lives.
    pub fn open(path: &Path) -> io::Result<OpenedProgram> {
        use rustix::fs::{Mode, OFlags};
        let real = std::fs::canonicalize(path)?;
        let file = rustix::fs::open(
            &real,
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        Self::from_file(real, file)
    }

    /// The program this process runs (`/proc/self/exe`: the file itself, even if its
    /// path has since been replaced).
    pub fn this_program() -> io::Result<OpenedProgram> {
        use rustix::fs::{Mode, OFlags};
        let file = rustix::fs::open(
            "/proc/self/exe",
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let real = std::fs::read_link("/proc/self/exe")?;
        Self::from_file(real, file)
    }

    fn from_file(real: PathBuf, file: OwnedFd) -> io::Result<OpenedProgram> {
        let st = rustix::fs::fstat(&file)?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", real.display()),
            ));
        }
        let id = (st.st_dev, st.st_ino);
        let exec_path = PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            file.as_raw_fd()
        ));
        // The path must name this very file for a child: where `/proc` is not this
        // process's own (a foreign mount), executing by path would run something else.
        let seen = std::fs::metadata(&exec_path)?;
        if (seen.dev(), seen.ino()) != id {
            return Err(io::Error::other(format!(
                "{} does not name the opened {}: /proc is not this process's own",
                exec_path.display(),
                real.display()
            )));
        }
        Ok(OpenedProgram {
            real,
            file: Arc::new(file),
            exec_path,
            id,
        })
    }

    /// Where the file was found (its real path): for messages and cache keys.
    pub fn real_path(&self) -> &Path {
        &self.real
    }

    /// The path that executes the opened file (`/proc/PID/fd/N` of this process).
    pub fn exec_path(&self) -> &Path {
        &self.exec_path
    }

    /// The opened file (an `O_PATH` descriptor), to hand to a child that executes it in
    /// another pid namespace as `/proc/self/fd/K`.
    pub fn file(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Its device and inode.
    pub fn id(&self) -> (u64, u64) {
        self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opened_file_runs_whatever_happens_to_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("prog");
        std::fs::copy("/bin/true", &program).unwrap();
        let opened = OpenedProgram::open(&program).unwrap();
        assert_eq!(opened.real_path(), std::fs::canonicalize(&program).unwrap());
        // Replaced on disk by a program that fails: the opened one still succeeds.
        std::fs::remove_file(&program).unwrap();
        std::fs::copy("/bin/false", &program).unwrap();
        let status = std::process::Command::new(opened.exec_path())
            .status()
            .unwrap();
        assert!(status.success(), "{status}");
        let st = std::fs::metadata(opened.exec_path()).unwrap();
        assert_eq!((st.dev(), st.ino()), opened.id());
    }

    #[test]
    fn this_program_is_the_running_file() {
        let me = OpenedProgram::this_program().unwrap();
        let exe = std::fs::metadata("/proc/self/exe").unwrap();
        assert_eq!(me.id(), (exe.dev(), exe.ino()));
        assert_eq!(me.real_path(), std::env::current_exe().unwrap());
    }

    #[test]
    fn only_regular_files_open() {
        let dir = tempfile::tempdir().unwrap();
        assert!(OpenedProgram::open(dir.path()).is_err());
        assert!(OpenedProgram::open(&dir.path().join("missing")).is_err());
    }
}
