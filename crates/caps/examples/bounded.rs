//! Confine file access to one directory with the bounded provider, and watch an escape
//! attempt fail before any I/O outside it.
//!
//! `cargo run -p warden-caps --example bounded`
// An example is its own composition root: it prints, and reads its arguments.
#![allow(clippy::print_stdout)]

use std::path::Path;

use caps::{BoundedFs, Fs, WriteOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let fs = BoundedFs::open(dir.path())?;
    fs.create_dir_all(Path::new("notes"), 0o755)?;
    fs.write(
        Path::new("notes/today.md"),
        b"# hello",
        WriteOptions::default(),
    )?;
    println!(
        "inside: {}",
        fs.read_to_string(Path::new("notes/today.md"))?
    );
    for escape in ["../etc/passwd", "/etc/passwd", "notes/../../x"] {
        match fs.read(Path::new(escape)) {
            Err(e) if e.is_denied() => println!("refused {escape:?}: {e}"),
            other => return Err(format!("{escape:?} was not refused: {other:?}").into()),
        }
    }
    Ok(())
}
