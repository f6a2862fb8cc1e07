//! What the exec allowlist needs from an ELF file, read with the `object` crate from the
//! few byte ranges that hold it (never the whole file): its program interpreter
//! (`PT_INTERP`, the dynamic loader such as `/lib64/ld-linux-x86-64.so.2`, which the
//! kernel opens for execution when the program starts, so Landlock's `EXECUTE` right must
//! cover it too), and the shared libraries it needs with where it says to look for them
//! (`DT_NEEDED`, `DT_RUNPATH`, `DT_RPATH`), which must stay on mounts that allow mapping
//! code when everything else is `noexec`.

use std::fs::File;
use std::path::{Path, PathBuf};

use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::{Endianness, ReadCache, ReadRef, elf};

/// More program headers than any real binary has; a file claiming more is not trusted.
const MAX_HEADERS: usize = 512;
/// Longer than any loader path or string table a program needs read here.
const MAX_STRINGS: u64 = 1 << 20;

/// The dynamic-linking facts of one ELF file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    /// `PT_INTERP`: the loader (absolute), if the file has one.
    pub interpreter: Option<PathBuf>,
    /// `DT_NEEDED`: the libraries it needs, as named (`libc.so.6`).
    pub needed: Vec<String>,
    /// `DT_RUNPATH` directories, as written (`$ORIGIN` not expanded).
    pub runpath: Vec<String>,
    /// `DT_RPATH` directories, as written.
    pub rpath: Vec<String>,
}

/// The program interpreter `path` asks for, if it is an ELF file that has one (a static
/// binary, a script or anything else: `None`).
pub fn interpreter(path: &Path) -> Option<PathBuf> {
    dynamic(path).and_then(|d| d.interpreter)
}

/// The dynamic-linking facts of `path`, if it is an ELF file (anything else, or a file
/// whose headers do not add up: `None`).
pub fn dynamic(path: &Path) -> Option<Dynamic> {
    let file = File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let data = ReadCache::new(file);
    let ident = data.read_bytes_at(0, 16).ok()?;
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    // e_ident[EI_CLASS]: 32 or 64 bits.
    match ident[4] {
        elf::ELFCLASS64 => read::<elf::FileHeader64<Endianness>>(&data),
        elf::ELFCLASS32 => read::<elf::FileHeader32<Endianness>>(&data),
        _ => None,
    }
}

fn read<H: FileHeader<Endian = Endianness>>(data: &ReadCache<File>) -> Option<Dynamic> {
    let header = H::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let segments = header.program_headers(endian, data).ok()?;
    if segments.len() > MAX_HEADERS {
        return None;
    }
    let mut out = Dynamic::default();
    let mut entries: Vec<(i64, u64)> = Vec::new();
    for segment in segments {
        let (offset, size) = segment.file_range(endian);
        match segment.p_type(endian) {
            elf::PT_INTERP if size > 0 && size <= MAX_STRINGS => {
                let text = data.read_bytes_at(offset, size).ok()?;
                let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
                let interp = PathBuf::from(std::str::from_utf8(&text[..end]).ok()?);
                if !interp.is_absolute() {
                    return None;
                }
                out.interpreter = Some(interp);
            }
            elf::PT_DYNAMIC => {
                let dynamic = segment.dynamic(endian, data).ok()??;
                entries = dynamic
                    .iter()
                    .map(|d| (d.d_tag(endian).into(), d.d_val(endian).into()))
                    .collect();
            }
            _ => {}
        }
    }
    let tag = |t: i64| entries.iter().find(|(k, _)| *k == t).map(|e| e.1);
    let (Some(strtab), Some(strsz)) = (tag(elf::DT_STRTAB), tag(elf::DT_STRSZ)) else {
        return Some(out);
    };
    if strsz > MAX_STRINGS {
        return None;
    }
    // The string table is named by its address once loaded: find the file bytes of the
    // loadable segment that holds it.
    let table = segments.iter().find_map(|s| {
        let (vaddr, filesz): (u64, u64) = (s.p_vaddr(endian).into(), s.p_filesz(endian).into());
        let inside = s.p_type(endian) == elf::PT_LOAD
            && strtab >= vaddr
            && strtab.checked_add(strsz)? <= vaddr.checked_add(filesz)?;
        inside.then(|| {
            let offset: u64 = s.p_offset(endian).into();
            data.read_bytes_at(offset + (strtab - vaddr), strsz).ok()
        })?
    })?;
    let string = |at: u64| -> Option<String> {
        let rest = table.get(usize::try_from(at).ok()?..)?;
        let end = rest.iter().position(|b| *b == 0)?;
        String::from_utf8(rest[..end].to_vec()).ok()
    };
    for (t, v) in &entries {
        match *t {
            elf::DT_NEEDED => out.needed.extend(string(*v)),
            elf::DT_RUNPATH => out
                .runpath
                .extend(string(*v).iter().flat_map(|s| split_paths(s))),
            elf::DT_RPATH => out
                .rpath
                .extend(string(*v).iter().flat_map(|s| split_paths(s))),
            _ => {}
        }
    }
    Some(out)
}

/// A `:`-separated search path, empty entries dropped.
fn split_paths(text: &str) -> Vec<String> {
    text.split(':')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_names_its_loader_and_libraries_and_other_files_none() {
        // This test binary is dynamically linked (Rust's default on Linux).
        let me = std::env::current_exe().unwrap();
        let facts = dynamic(&me).expect("an ELF test binary");
        let loader = facts
            .interpreter
            .clone()
            .expect("a dynamically linked binary");
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
        assert!(
            facts.needed.iter().any(|n| n.starts_with("libc.so")),
            "{facts:?}"
        );
        assert_eq!(interpreter(&me), Some(loader));
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

    #[test]
    fn a_shared_library_needs_others_and_has_no_loader() {
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
        ]
        .iter()
        .map(Path::new)
        .find(|p| p.exists());
        let Some(libc) = libc else {
            eprintln!("SKIPPED: no Debian multiarch libc here");
            return;
        };
        let facts = dynamic(libc).unwrap();
        assert!(
            facts.needed.iter().any(|n| n.starts_with("ld-linux")),
            "{facts:?}"
        );
    }

    #[test]
    fn search_paths_split_on_colons() {
        assert_eq!(
            split_paths("$ORIGIN/../lib::/opt/x"),
            ["$ORIGIN/../lib", "/opt/x"]
        );
    }
}
