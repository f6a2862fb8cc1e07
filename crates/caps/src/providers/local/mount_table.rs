//! The mount table as the kernel reports it (`/proc/self/mountinfo`): which filesystem,
//! and which directory of it, shows at each mount point. The one parser of that format:
//! cgroup discovery reads its cgroup mounts from it, and the sandbox finds every place a
//! protected directory shows through (a bind mount of it, of a directory above it or of
//! one inside it) by device and mount root instead of by path.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's id.
    pub id: u64,
    /// Its parent's id.
    pub parent: u64,
    /// The filesystem's device (`major`, `minor`): equal for every mount of one
    /// filesystem, whichever directory of it each shows.
    pub device: (u32, u32),
    /// The directory of the filesystem shown at the mount point (`/` for a whole
    /// filesystem, the bound directory for a bind mount).
    pub root: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
    /// Per-mount options (`ro`, `nosuid`, ...).
    pub options: Vec<String>,
    /// The filesystem type (`ext4`, `tmpfs`, `cgroup2`, ...).
    pub fstype: String,
    /// Per-filesystem options (for a cgroup v1 hierarchy, its controllers).
    pub super_options: Vec<String>,
}

impl MountEntry {
    /// Where the filesystem's directory `fs_path` (a path from the filesystem's root)
    /// shows through this mount, if it lies at or beneath the mount's root.
    pub fn shows(&self, fs_path: &Path) -> Option<PathBuf> {
        let below = fs_path.strip_prefix(&self.root).ok()?;
        Some(if below.as_os_str().is_empty() {
            self.point.clone()
        } else {
            self.point.join(below)
        })
    }
}

/// The mount table of this process's mount namespace.
pub fn read_mount_table() -> std::io::Result<Vec<MountEntry>> {
    Ok(parse_mount_table(&std::fs::read("/proc/self/mountinfo")?))
}

/// Parse a `/proc/*/mountinfo` text; lines that do not have the format are skipped.
pub fn parse_mount_table(text: &[u8]) -> Vec<MountEntry> {
    text.split(|b| *b == b'\n').filter_map(parse_line).collect()
}

/// `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`
fn parse_line(line: &[u8]) -> Option<MountEntry> {
    let split = line.windows(3).position(|w| w == b" - ")?;
    let (left, right) = (&line[..split], &line[split + 3..]);
    let left: Vec<&[u8]> = left.split(|b| *b == b' ').collect();
    let right: Vec<&[u8]> = right.split(|b| *b == b' ').collect();
    let number = |field: &[u8]| std::str::from_utf8(field).ok()?.parse::<u64>().ok();
    let words = |field: Option<&&[u8]>| -> Vec<String> {
        field
            .map(|f| {
                String::from_utf8_lossy(f)
                    .split(',')
                    .filter(|o| !o.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let (major, minor) = std::str::from_utf8(left.get(2)?).ok()?.split_once(':')?;
    Some(MountEntry {
        id: number(left.first()?)?,
        parent: number(left.get(1)?)?,
        device: (major.parse().ok()?, minor.parse().ok()?),
        root: unescape(left.get(3)?),
        point: unescape(left.get(4)?),
        options: words(left.get(5)),
        fstype: String::from_utf8_lossy(right.first()?).into_owned(),
        super_options: words(right.get(2)),
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` (octal).
fn unescape(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && let Some(digits) = field.get(i + 1..i + 4)
            && let Some(value) = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        {
            out.push(value);
            i += 4;
            continue;
        }
        out.push(field[i]);
        i += 1;
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
30 22 8:1 /home/u/.warden /srv/a\\040b rw,nosuid - ext4 /dev/sda1 rw
31 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:9 - cgroup2 cgroup2 rw,nsdelegate
32 22 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct
not a mount line
";

    #[test]
    fn fields_are_read_and_unescaped() {
        let table = parse_mount_table(TABLE.as_bytes());
        assert_eq!(table.len(), 4);
        assert_eq!(table[1].id, 30);
        assert_eq!(table[1].parent, 22);
        assert_eq!(table[1].device, (8, 1));
        assert_eq!(table[1].root, Path::new("/home/u/.warden"));
        assert_eq!(table[1].point, Path::new("/srv/a b"));
        assert_eq!(table[1].options, ["rw", "nosuid"]);
        assert_eq!(table[2].fstype, "cgroup2");
        assert_eq!(table[3].super_options, ["rw", "cpu", "cpuacct"]);
    }

    #[test]
    fn a_bind_mount_shows_the_directories_beneath_its_root() {
        let table = parse_mount_table(TABLE.as_bytes());
        let bind = &table[1];
        assert_eq!(
            bind.shows(Path::new("/home/u/.warden/config.toml")),
            Some(PathBuf::from("/srv/a b/config.toml"))
        );
        assert_eq!(
            bind.shows(Path::new("/home/u/.warden")),
            Some(PathBuf::from("/srv/a b"))
        );
        assert_eq!(bind.shows(Path::new("/home/u")), None);
        assert_eq!(bind.shows(Path::new("/home/u/.wardenx")), None);
        assert_eq!(
            table[0].shows(Path::new("/etc")),
            Some(PathBuf::from("/etc"))
        );
    }

    #[test]
    fn the_running_kernel_s_table_has_a_root() {
        let table = read_mount_table().unwrap();
        assert!(table.iter().any(|m| m.point == Path::new("/")), "{table:?}");
    }
}
