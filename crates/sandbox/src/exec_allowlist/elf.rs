//! The one fact the exec allowlist needs from an ELF file: its program interpreter
//! (`PT_INTERP`, the dynamic loader such as `/lib64/ld-linux-x86-64.so.2`). The kernel
//! opens that loader for execution when the program starts, so Landlock's `EXECUTE` right
//! must cover it too, or no dynamically linked program could run.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// `PT_INTERP` in a program header's `p_type`.
const PT_INTERP: u32 = 3;
/// More program headers than any real binary has; a file claiming more is not trusted.
const MAX_HEADERS: u16 = 512;
/// Longer than any loader path; a longer one is not trusted.
const MAX_INTERP: u64 = 4096;

/// Read `len` bytes at `offset`, or `None`.
fn read_at(file: &File, offset: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset).ok()?;
    Some(buf)
}

/// Little- or big-endian integers of an ELF file.
#[derive(Clone, Copy)]
struct Endian(bool);

impl Endian {
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.0 {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.0 {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }
    fn u64(self, b: &[u8]) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        if self.0 {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }
}

/// The program interpreter `path` asks for, if it is an ELF file that has one (a static
/// binary, a script or anything else: `None`).
pub fn interpreter(path: &Path) -> Option<PathBuf> {
    let file = File::open(path).ok()?;
    let ident = read_at(&file, 0, 64)?;
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    let wide = match ident[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let e = match ident[5] {
        1 => Endian(true),
        2 => Endian(false),
        _ => return None,
    };
    // (e_phoff, e_phentsize, e_phnum), and where p_offset / p_filesz sit in a header.
    let (phoff, phentsize, phnum) = if wide {
        (
            e.u64(&ident[0x20..]),
            e.u16(&ident[0x36..]),
            e.u16(&ident[0x38..]),
        )
    } else {
        (
            u64::from(e.u32(&ident[0x1C..])),
            e.u16(&ident[0x2A..]),
            e.u16(&ident[0x2C..]),
        )
    };
    let needed = if wide { 40 } else { 20 };
    if usize::from(phentsize) < needed || phnum > MAX_HEADERS {
        return None;
    }
    let table = read_at(&file, phoff, usize::from(phentsize) * usize::from(phnum))?;
    for header in table.chunks_exact(usize::from(phentsize)) {
        if e.u32(header) != PT_INTERP {
            continue;
        }
        let (offset, size) = if wide {
            (e.u64(&header[8..]), e.u64(&header[32..]))
        } else {
            (
                u64::from(e.u32(&header[4..])),
                u64::from(e.u32(&header[16..])),
            )
        };
        if size == 0 || size > MAX_INTERP {
            return None;
        }
        let text = read_at(&file, offset, size as usize)?;
        let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
        let interp = PathBuf::from(std::str::from_utf8(&text[..end]).ok()?);
        return interp.is_absolute().then_some(interp);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_names_its_loader_and_other_files_name_none() {
        // This test binary is dynamically linked (Rust's default on Linux).
        let me = std::env::current_exe().unwrap();
        let loader = interpreter(&me).expect("a dynamically linked test binary");
        assert!(loader.is_absolute());
        assert!(
            loader
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ld"),
            "{}",
            loader.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(interpreter(&script), None);
        // Truncated or lying headers are not trusted.
        let bytes = std::fs::read(&me).unwrap();
        let cut = dir.path().join("cut");
        std::fs::write(&cut, &bytes[..40]).unwrap();
        assert_eq!(interpreter(&cut), None);
        let mut lying = bytes[..4096].to_vec();
        lying[0x38] = 0xff;
        lying[0x39] = 0xff;
        let lie = dir.path().join("lie");
        std::fs::write(&lie, &lying).unwrap();
        assert_eq!(interpreter(&lie), None);
        assert_eq!(interpreter(&dir.path().join("missing")), None);
        assert_eq!(interpreter(dir.path()), None);
    }
}
