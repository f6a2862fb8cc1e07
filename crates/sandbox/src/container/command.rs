//! The command lines run in the container: what every engine invocation needs
//! ([`Target`]), the constant in-container scripts (finding a run's processes, the
//! session sweep, the wrapper around each run, the killer and the signaller), and the
//! engine command lines that run a command, kill one and signal one.

use std::ffi::OsString;
use std::path::PathBuf;

use caps::process::ProcessSpec;
use caps::{ExecOptions, Stdin};

use super::engine::engine_spec;
use super::readonly::ReadOnlyTools;

/// The shell inside the container that runs the wrapper, the probe and the killer.
pub(super) const CONTAINER_SHELL: &str = "/bin/sh";

/// Prefix of the marker argument (`$0`) of the wrapper; the killer searches
/// `/proc/*/cmdline` for `warden-run:TOKEN:`.
pub(super) const RUN_MARKER_PREFIX: &str = "warden-run:";

/// `warden_members ROOT SPARE STOP`: set `ws_found` to process `ROOT`, every process in
/// the session it leads, and every descendant of any of them — a run's processes, also
/// those that left its process group or were reparented — sparing pid `SPARE` (itself
/// when `SPARE` is `ROOT`: then only what is below it). With `STOP` = 1 each is stopped
/// as it is found, so that a process found cannot fork behind our back; the scan repeats
/// until it finds nothing new. Only shell builtins are used (`read`, `kill`, parameter
/// expansion), so it works in any POSIX shell and costs no extra processes.
/// `/proc/PID/stat` is parsed after the last `)` (the command name may contain spaces and
/// parentheses): state, ppid, pgrp, session.
///
/// `warden_sweep ROOT SPARE`: those, stopped, then killed.
///
/// `warden_marked TOKEN`: set `warden_hits` to every process whose command line holds
/// `warden-run:TOKEN:` (a run's wrapper). Reading `/proc/PID/cmdline` with `read` works
/// because shells drop the NUL separators (the probe verifies this per container). The
/// caller's own command line holds the token but never the full marker, and it skips
/// itself anyway.
const PROCESS_FUNCTIONS: &str = r#"warden_members() {
  ws_root=$1 ws_spare=$2 ws_stop=$3 ws_tree=" $1 " ws_found=' ' ws_more=1
  if [ "$ws_root" != "$ws_spare" ]; then
    [ "$ws_stop" = 1 ] && kill -STOP "$ws_root" 2>/dev/null
    ws_found=" $ws_root "
  fi
  while [ "$ws_more" = 1 ]; do
    ws_more=0
    for ws_f in /proc/[0-9]*/stat; do
      ws_p=${ws_f#/proc/}
      ws_p=${ws_p%/stat}
      case "$ws_tree" in *" $ws_p "*) continue ;; esac
      [ "$ws_p" = "$ws_spare" ] && continue
      { IFS= read -r ws_l < "$ws_f"; } 2>/dev/null || continue
      set -- ${ws_l##*\)}
      case "$ws_tree" in *" $2 "*) ws_child=1 ;; *) ws_child=0 ;; esac
      if [ "$4" = "$ws_root" ] || [ "$ws_child" = 1 ]; then
        [ "$ws_stop" = 1 ] && kill -STOP "$ws_p" 2>/dev/null
        ws_tree="$ws_tree$ws_p "
        ws_found="$ws_found$ws_p "
        ws_more=1
      fi
    done
  done
}
warden_sweep() {
  warden_members "$1" "$2" 1
  [ "$ws_found" = ' ' ] || kill -KILL $ws_found 2>/dev/null
}
warden_marked() {
  warden_hits=
  for wk_d in /proc/[0-9]*; do
    wk_p=${wk_d#/proc/}
    [ "$wk_p" = "$$" ] && continue
    { while IFS= read -r wk_l || [ -n "$wk_l" ]; do
        case "$wk_l" in *"warden-run:$1:"*) warden_hits="$warden_hits $wk_p"; break ;; esac
      done < "$wk_d/cmdline"; } 2>/dev/null
  done
}
"#;

/// Runs `"$@"` (`ENV -i -- K=V... ARGV...`), then sweeps its own session so nothing the
/// command left behind outlives the run, and exits with the command's status. Ctrl-C and
/// Ctrl-\ on a run's terminal reach the whole foreground group, this wrapper included:
/// it traps them with a no-op (a handler, which the command's exec resets to the default
/// — an ignored signal would stay ignored) so that it lives to report the command's end.
const WRAPPER_BODY: &str = r#"trap : INT QUIT
"$@"
warden_status=$?
warden_sweep $$ $$
exit "$warden_status"
"#;

/// `$1` is the token: sweep every run wrapper with that token (its session and tree).
const KILLER_BODY: &str = r#"warden_marked "$1"
for wk_p in $warden_hits; do warden_sweep "$wk_p" "$$"; done
echo "warden-killed:$warden_hits"
"#;

/// `$1` is the token, `$2` a signal name: send the signal to the same processes the
/// killer would end — the run's session and tree — but its wrapper, which must live to
/// report the command's end; nothing is stopped.
const SIGNALLER_BODY: &str = r#"wg_sig=$2
warden_marked "$1"
wg_all=
for wg_p in $warden_hits; do warden_members "$wg_p" "$wg_p" 0; wg_all="$wg_all$ws_found"; done
case "$wg_all" in *[0-9]*) kill -"$wg_sig" $wg_all 2>/dev/null ;; esac
echo "warden-signalled:$wg_all"
"#;

/// What every engine invocation needs; shared with the kill guards of running commands,
/// which may outlive the borrow of the shell.
#[derive(Debug)]
pub(super) struct Target {
    /// The engine binary (a checked, canonical path).
    pub(super) engine: PathBuf,
    /// The container name or id (checked: cannot be mistaken for an option).
    pub(super) container: String,
    /// The absolute path of `env` inside the container.
    pub(super) env_program: String,
    /// The engine client's complete environment.
    pub(super) engine_env: Vec<(OsString, OsString)>,
}

impl Target {
    /// A spec running this target's engine with `args`.
    pub(super) fn spec(&self, args: Vec<OsString>) -> ProcessSpec {
        engine_spec(&self.engine, self.engine_env.clone(), args)
    }

    /// `ENGINE exec ... CONTAINER /bin/sh -c WRAPPER MARKER [VIEW...] ENV -i -- K=V... ARGV...`,
    /// where `VIEW` builds the read-only view (see `readonly.rs`) when `read_only` is given.
    pub(super) fn exec_spec(
        &self,
        argv: &[String],
        options: &ExecOptions,
        token: &str,
        read_only: Option<&ReadOnlyTools>,
    ) -> ProcessSpec {
        let mut args: Vec<OsString> = vec!["exec".into()];
        if matches!(options.stdin, Stdin::Bytes(_) | Stdin::Stream(_)) {
            args.push("--interactive".into());
        }
        if options.terminal.is_some() {
            // The engine client runs on the terminal Warden made for the run and gives
            // the command one inside the container, relaying keys, output and resizes.
            args.push("--tty".into());
        }
        args.push("--workdir".into());
        args.push(options.cwd.clone().into_os_string());
        args.push(self.container.clone().into());
        args.push(CONTAINER_SHELL.into());
        args.push("-c".into());
        args.push(format!("{PROCESS_FUNCTIONS}{WRAPPER_BODY}").into());
        args.push(format!("{RUN_MARKER_PREFIX}{token}:").into());
        if let Some(tools) = read_only {
            args.extend(tools.launcher());
        }
        args.push(self.env_program.clone().into());
        args.push("-i".into());
        args.push("--".into());
        args.extend(
            options
                .env
                .iter()
                .map(|(k, v)| OsString::from(format!("{k}={v}"))),
        );
        args.extend(argv.iter().map(OsString::from));
        let mut spec = self.spec(args);
        spec.stdin = options.stdin.clone();
        spec.terminal = options.terminal;
        spec.display_name = argv[0].clone();
        spec
    }

    /// `ENGINE exec CONTAINER /bin/sh -c SIGNALLER warden-signal TOKEN SIGNAL`.
    pub(super) fn signal_spec(&self, token: &str, signal: &str) -> ProcessSpec {
        self.spec(vec![
            "exec".into(),
            self.container.clone().into(),
            CONTAINER_SHELL.into(),
            "-c".into(),
            format!("{PROCESS_FUNCTIONS}{SIGNALLER_BODY}").into(),
            "warden-signal".into(),
            token.into(),
            signal.into(),
        ])
    }

    /// `ENGINE exec CONTAINER /bin/sh -c KILLER warden-kill TOKEN`.
    pub(super) fn kill_spec(&self, token: &str) -> ProcessSpec {
        self.spec(vec![
            "exec".into(),
            self.container.clone().into(),
            CONTAINER_SHELL.into(),
            "-c".into(),
            format!("{PROCESS_FUNCTIONS}{KILLER_BODY}").into(),
            "warden-kill".into(),
            token.into(),
        ])
    }
}
