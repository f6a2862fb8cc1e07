//! Process worlds for tests: [`NoProcesses`] refuses honestly; [`ScriptedShell`] records
//! each call and answers from a script the test wrote.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::shell::{ExecOptions, ExecOutput, Script, Shell};
use crate::{CapsError, Result};

/// A world with no processes: every call fails with [`CapsError::Unsupported`] instead of
/// pretending to succeed.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProcesses;

#[async_trait::async_trait]
impl Shell for NoProcesses {
    async fn exec(&self, argv: &[String], _options: &ExecOptions) -> Result<ExecOutput> {
        Err(CapsError::Unsupported {
            what: format!(
                "cannot execute {:?}: the memory world has no processes",
                argv.first().map(String::as_str).unwrap_or("")
            ),
        })
    }

    async fn run(&self, _script: &Script, _options: &ExecOptions) -> Result<ExecOutput> {
        Err(CapsError::Unsupported {
            what: "cannot run a script: the memory world has no processes".into(),
        })
    }
}

/// One call a [`ScriptedShell`] received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordedCall {
    /// A [`Shell::exec`] call.
    Exec {
        /// The argv as given.
        argv: Vec<String>,
        /// The options as given.
        options: ExecOptions,
    },
    /// A [`Shell::run`] call.
    Run {
        /// The script as given.
        script: Script,
        /// The options as given.
        options: ExecOptions,
    },
}

type Responder = Box<dyn Fn(&RecordedCall) -> Result<ExecOutput> + Send + Sync>;

/// A shell for tests: records every call and answers with queued results, or with a
/// responder function once the queue is empty. With neither, a call is an explicit
/// [`CapsError::Unsupported`] error, never a fake success.
#[derive(Clone, Default)]
pub struct ScriptedShell {
    inner: Arc<Mutex<ScriptState>>,
}

#[derive(Default)]
struct ScriptState {
    calls: Vec<RecordedCall>,
    queued: VecDeque<Result<ExecOutput>>,
    responder: Option<Arc<Responder>>,
    /// The world programs come from, for [`ExecOptions::expect_program`].
    files: Option<Arc<dyn crate::Fs>>,
    /// Whether it claims to enforce [`ExecOptions::exec_allowlist`] (it records it).
    exec_allowlist: bool,
}

impl fmt::Debug for ScriptedShell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("ScriptedShell")
            .field("calls", &state.calls.len())
            .field("queued", &state.queued.len())
            .finish()
    }
}

impl ScriptedShell {
    /// A shell with no answers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue the result of the next call.
    pub fn push_result(&self, result: Result<ExecOutput>) -> &Self {
        self.state().queued.push_back(result);
        self
    }

    /// Answer calls (once the queue is empty) with `f`.
    pub fn respond_with(
        &self,
        f: impl Fn(&RecordedCall) -> Result<ExecOutput> + Send + Sync + 'static,
    ) -> &Self {
        self.state().responder = Some(Arc::new(Box::new(f)));
        self
    }

    /// Check [`ExecOptions::expect_program`] against `files`, as a real provider checks
    /// it against the disk: a program that is no longer the expected file is refused and
    /// not recorded (nothing started).
    pub fn with_files(&self, files: Arc<dyn crate::Fs>) -> &Self {
        self.state().files = Some(files);
        self
    }

    /// Claim to enforce [`ExecOptions::exec_allowlist`], as a sandbox that can does: the
    /// allowlist then reaches the recorded options, for tests of who passes it on.
    pub fn with_exec_allowlist_support(&self) -> &Self {
        self.state().exec_allowlist = true;
        self
    }

    /// Every call received so far, in order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.state().calls.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ScriptState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn answer(&self, call: RecordedCall) -> Result<ExecOutput> {
        let (queued, responder) = {
            let mut state = self.state();
            state.calls.push(call.clone());
            (state.queued.pop_front(), state.responder.clone())
        };
        match (queued, responder) {
            (Some(result), _) => result,
            (None, Some(f)) => f(&call),
            (None, None) => Err(CapsError::Unsupported {
                what: "ScriptedShell has no scripted answer for this call".into(),
            }),
        }
    }
}

#[async_trait::async_trait]
impl Shell for ScriptedShell {
    async fn exec(&self, argv: &[String], options: &ExecOptions) -> Result<ExecOutput> {
        let files = self.state().files.clone();
        if let (Some(files), Some(expected), Some(program)) =
            (files, options.expect_program, argv.first())
        {
            let now = files.symlink_metadata(std::path::Path::new(program))?.id;
            if now != expected {
                return Err(CapsError::denied(
                    program,
                    format!(
                        "the program is no longer the file that was approved ({expected}, now {now}); nothing was run"
                    ),
                ));
            }
        }
        self.answer(RecordedCall::Exec {
            argv: argv.to_vec(),
            options: options.clone(),
        })
    }

    async fn run(&self, script: &Script, options: &ExecOptions) -> Result<ExecOutput> {
        self.answer(RecordedCall::Run {
            script: script.clone(),
            options: options.clone(),
        })
    }

    fn exec_allowlist_support(&self) -> std::result::Result<(), String> {
        if self.state().exec_allowlist {
            Ok(())
        } else {
            Err("this scripted shell does not claim exec allowlist support".into())
        }
    }
}
