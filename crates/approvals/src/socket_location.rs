//! Where the approver's socket may live. Requests carry the command, its environment and
//! the plan; they must reach the user's own approver and no one else's. A socket in a
//! directory another user can write could be theirs: so the approver binds only in a
//! private directory (a real directory owned by the user, mode 0700), the runner sends
//! nothing to a socket outside one, and `approvals set` refuses a `socket.path` whose
//! directory is (or could be made by) another user's.

use std::path::Path;

use caps::{FileKind, Fs};

/// Why `dir` is not private to `owner_uid` (a real directory it owns, mode 0700), if it
/// is not. A missing directory is not private.
pub fn private_dir_problem(fs: &dyn Fs, dir: &Path, owner_uid: u32) -> Option<String> {
    let meta = match fs.symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) => return Some(format!("the socket directory {}: {e}", dir.display())),
    };
    (meta.kind != FileKind::Dir || meta.uid != owner_uid || meta.mode & 0o077 != 0).then(|| {
        format!(
            "the socket directory {} must be a real directory owned by uid {owner_uid} with mode 0700 (it is {}, uid {}, mode {:04o})",
            dir.display(),
            meta.kind,
            meta.uid,
            meta.mode & 0o7777
        )
    })
}

/// Why a socket at `socket` could be another user's, if it could: its directory exists
/// and is not private to `owner_uid`, or it does not exist yet and its nearest existing
/// ancestor can be written by someone other than `owner_uid` and root (who could create
/// the directory first).
pub fn location_problem(fs: &dyn Fs, socket: &Path, owner_uid: u32) -> Option<String> {
    if !socket.is_absolute() {
        return Some(format!("socket.path {} must be absolute", socket.display()));
    }
    let Some(dir) = socket.parent() else {
        return Some(format!("socket.path {} has no directory", socket.display()));
    };
    match fs.symlink_metadata(dir) {
        Ok(_) => private_dir_problem(fs, dir, owner_uid).map(|why| {
            format!(
                "socket.path {}: {why}; another user who can write there could listen in the approver's place. Use a private directory (chmod 700), such as the default next to the approvals file",
                socket.display()
            )
        }),
        Err(e) if e.is_not_found() => {
            let mut ancestor = dir;
            loop {
                // Past `/` (which always exists) there is nothing left to check.
                ancestor = ancestor.parent()?;
                match fs.symlink_metadata(ancestor) {
                    Ok(meta) => {
                        let trusted_owner = meta.uid == owner_uid || meta.uid == 0;
                        let others_write = meta.mode & 0o022 != 0;
                        return (meta.kind != FileKind::Dir || !trusted_owner || others_write)
                            .then(|| {
                                format!(
                                    "socket.path {}: its directory {} does not exist yet, and {} (uid {}, mode {:04o}) lets another user create it first and listen in the approver's place. Use a private directory (chmod 700), such as the default next to the approvals file",
                                    socket.display(),
                                    dir.display(),
                                    ancestor.display(),
                                    meta.uid,
                                    meta.mode & 0o7777
                                )
                            });
                    }
                    Err(e) if e.is_not_found() => continue,
                    Err(e) => return Some(format!("{}: {e}", ancestor.display())),
                }
            }
        }
        Err(e) => Some(format!("the socket directory {}: {e}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::MemoryFs;

    #[test]
    fn only_private_directories_or_ones_only_the_user_can_create_pass() {
        let uid = 1000;
        let fs = MemoryFs::with_uid(uid);
        fs.create_dir_all(Path::new("/home/u/.warden"), 0o700)
            .unwrap();
        fs.create_dir_all(Path::new("/home/u/open"), 0o755).unwrap();
        fs.set_permissions(Path::new("/home/u"), 0o755).unwrap();
        fs.create_dir_all(Path::new("/tmp"), 0o777).unwrap();
        fs.set_owner(Path::new("/tmp"), 0).unwrap();
        fs.create_dir_all(Path::new("/srv/theirs"), 0o700).unwrap();
        fs.set_owner(Path::new("/srv/theirs"), 1001).unwrap();
        let check = |s: &str| location_problem(&fs, Path::new(s), uid);
        assert_eq!(check("/home/u/.warden/a.sock"), None);
        // Not there yet, under a directory only the user (or root) can write.
        assert_eq!(check("/home/u/new/deeper/a.sock"), None);
        for bad in [
            "/home/u/open/a.sock",
            "/tmp/a.sock",
            "/tmp/new/a.sock",
            "/srv/theirs/a.sock",
            "/srv/theirs/new/a.sock",
            "relative.sock",
        ] {
            assert!(check(bad).is_some(), "{bad} passed");
        }
        assert!(private_dir_problem(&fs, Path::new("/home/u/open"), uid).is_some());
        assert!(private_dir_problem(&fs, Path::new("/missing"), uid).is_some());
        assert_eq!(
            private_dir_problem(&fs, Path::new("/home/u/.warden"), uid),
            None
        );
    }
}
