//! Scripted command results for [`crate::ScriptedShell`] and the code that reads them.

use std::time::Duration;

use crate::{ExecOutput, ExitStatus, OutputCollector, RefusedWrites, Stream};

/// A finished run's output, as a real capture would build it.
pub fn output(status: ExitStatus, stdout: &str, stderr: &str) -> ExecOutput {
    let mut c = OutputCollector::new(Default::default());
    c.push(Stream::Stdout, stdout.as_bytes());
    c.push(Stream::Stderr, stderr.as_bytes());
    c.finish(status, false, Duration::from_millis(1))
}

/// Exit 0 with `stdout`.
pub fn ok_output(stdout: &str) -> ExecOutput {
    output(ExitStatus::Code(0), stdout, "")
}

/// Exit 2 with `stderr`, and what the sandbox learned about refused writes.
pub fn failed_output(stderr: &str, refused: RefusedWrites) -> ExecOutput {
    let mut out = output(ExitStatus::Code(2), "", stderr);
    out.refused_writes = refused;
    out
}
