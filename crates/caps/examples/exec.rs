//! Run a command through the local provider and print the typed result.
//!
//! `cargo run -p warden-caps --example exec -- ls -la /`
// An example is its own composition root: it prints, and reads its arguments.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use caps::{ExecOptions, LocalShell, Shell};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let argv = if argv.is_empty() {
        vec!["uname".to_string(), "-a".to_string()]
    } else {
        argv
    };
    let options = ExecOptions::new("/", Duration::from_secs(10)).with_env("PATH", "/usr/bin:/bin");
    let output = LocalShell::new().exec(&argv, &options).await?;
    println!("{}", serde_json::to_string_pretty(&output)?);
    Ok(())
}
