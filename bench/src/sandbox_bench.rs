//! The sandbox rows: `exec-sandbox` (the in-process runner, with the sandbox built as
//! `sandbox.builder = "auto"` builds it here, against minimal bubblewrap, for
//! information), `exec-sandbox-plan` (the same run against bubblewrap running Warden's
//! own mount plan and seccomp programs, so the ratio is what a Warden run costs over
//! bubblewrap doing the same work), `exec-sandbox-plan-bwrap` (the same with bubblewrap
//! building the sandbox: Warden's overhead — helper, Landlock, runner — over bubblewrap
//! alone) and `exec-sandbox-cli` (`warden exec -- /bin/true` as a user runs it, against
//! bubblewrap as a process).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use anyhow::bail;
use caps::process::{ProcessSpec, WorkingDir, supervise};
use caps::{ExecOptions, Shell};

use crate::harness::{RatioSpec, Report, compare};

/// The namespace flags of the minimal baseline (as `warden exec` uses them).
const MINIMAL_BWRAP: &[&str] = &[
    "--die-with-parent",
    "--new-session",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-net",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
    "--",
    "/bin/true",
];

/// The rows [`run`] measures.
pub const ROWS: &[&str] = &[
    "exec-sandbox",
    "exec-sandbox-plan",
    "exec-sandbox-plan-bwrap",
    "exec-sandbox-cli",
];

/// A workspace and a Warden home, removed when dropped.
pub struct Dirs {
    pub workspace: PathBuf,
    pub home: PathBuf,
}

impl Dirs {
    /// Fresh directories, their names told apart by `tag` (two rows' may coexist).
    pub fn new(tag: &str) -> anyhow::Result<Dirs> {
        // Under /var/tmp, not /tmp: the sandbox hides /tmp, so a workspace there would be
        // bound back in, which is not what a user's workspace costs.
        let base = Path::new("/var/tmp");
        let workspace = base.join(format!("warden-bench-{tag}-{}", std::process::id()));
        let home = base.join(format!("warden-bench-{tag}h-{}", std::process::id()));
        std::fs::create_dir_all(&workspace)?;
        std::fs::create_dir_all(&home)?;
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        Ok(Dirs { workspace, home })
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.workspace);
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// The trusted bubblewrap, if this machine has one.
pub fn find_bwrap() -> Option<PathBuf> {
    let dirs: Vec<PathBuf> = sandbox::namespace::TRUSTED_BWRAP_DIRS
        .iter()
        .map(PathBuf::from)
        .collect();
    sandbox::namespace::find_bwrap(&dirs).ok()
}

/// The baseline of the rows that start Warden as a process: `bwrap` with the namespace
/// flags `warden exec` uses, running `/bin/true`, as a process.
pub async fn bare_bwrap(bwrap: &Path) -> anyhow::Result<()> {
    let status = tokio::process::Command::new(bwrap)
        .args(MINIMAL_BWRAP)
        .stdin(Stdio::null())
        .status()
        .await?;
    if !status.success() {
        bail!("bare bwrap failed");
    }
    Ok(())
}

/// Run the sandbox rows that `wanted` selects.
pub async fn run(
    report: &mut Report,
    quick: bool,
    wanted: &dyn Fn(&str) -> bool,
) -> anyhow::Result<()> {
    let dirs_list: Vec<PathBuf> = sandbox::namespace::TRUSTED_BWRAP_DIRS
        .iter()
        .map(PathBuf::from)
        .collect();
    let Some(bwrap) = find_bwrap() else {
        for id in ROWS.iter().filter(|id| wanted(id)) {
            println!("{id}: SKIPPED (bubblewrap is not installed)");
        }
        return Ok(());
    };
    let bin_dir = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let helper = bin_dir.join("warden-sandbox-helper");
    if !helper.exists() {
        bail!(
            "the warden binaries were not found next to the bench binary: {}",
            helper.display()
        );
    }
    let helper = caps::process::OpenedProgram::open(&helper)?;
    let (warmup, iterations) = if quick { (2, 5) } else { (20, 200) };
    let dirs = Dirs::new("sb")?;
    let policy = sandbox::SandboxPolicy {
        writable_paths: vec![dirs.workspace.clone()],
        readable_extra_paths: Vec::new(),
        hidden_paths: vec![dirs.home.clone()],
        read_only_paths: Vec::new(),
        network: sandbox::Network::Off,
        landlock: sandbox::LandlockMode::Auto,
    };
    // bubblewrap's sandbox (the baselines' command line, and a row of its own), and the
    // one `sandbox.builder = "auto"` runs here: Warden's own builder where it works.
    let bubblewrap = Arc::new(
        sandbox::NamespaceSandbox::new(policy.clone(), helper.clone(), &dirs_list)
            .map_err(|e| anyhow::anyhow!(e.0))?,
    );
    let sb = match sandbox::probe::builder_works(helper.exec_path()) {
        Ok(()) => Arc::new(
            sandbox::NamespaceSandbox::built_by_warden(policy, helper)
                .map_err(|e| anyhow::anyhow!(e.0))?,
        ),
        Err(why) => {
            println!(
                "exec-sandbox: Warden's own builder cannot run here ({why}); measuring bubblewrap"
            );
            Arc::clone(&bubblewrap)
        }
    };
    let runner = in_process_runner(&dirs)?;
    let executor_for = |sb: &Arc<sandbox::NamespaceSandbox>| {
        let readonly: Arc<dyn Shell> = Arc::new(sb.shell(sandbox::Profile::ReadOnly));
        runner::Executor::Sandbox(runner::SandboxShells {
            readonly: Arc::clone(&readonly),
            watched: Arc::clone(&readonly),
            writable: readonly,
            unconfined: None,
            read_only_unavailable: None,
            network: policy::PlannedNetwork::Plain(false),
        })
    };
    let executor = executor_for(&sb);
    let bubblewrap_executor = executor_for(&bubblewrap);
    let cancel = tokio_util::sync::CancellationToken::new();
    let run_in = |executor: &runner::Executor| {
        let (runner, cancel, executor) = (&runner, &cancel, executor.clone());
        async move {
            let request = runner::ExecRequest::new(
                "bench",
                "bench",
                runner::Command::Argv(vec!["/bin/true".into()]),
            );
            let report = runner
                .run(request, &executor, &runner::NoEvents, cancel)
                .await;
            match report.outcome {
                runner::Outcome::Finished { output } if output.status.success() => Ok(()),
                other => bail!("sandboxed /bin/true failed: {other:?}"),
            }
        }
    };
    let through_bubblewrap = || run_in(&bubblewrap_executor);
    let through_runner = || run_in(&executor);

    if wanted("exec-sandbox") {
        let (base, warden) =
            compare(warmup, iterations, || bare_bwrap(&bwrap), through_runner).await?;
        report.ratio(
            RatioSpec {
                id: "exec-sandbox",
                what: "/bin/true through the runner in the sandbox as `sandbox.builder = auto` builds it (Warden's own builder where it works, else bwrap; seccomp, Landlock; read-only profile)",
                baseline: "bare bwrap with the same namespace flags",
                unit: "ms",
                max_ratio: 1.10,
                iterations,
            },
            base,
            warden,
        );
    }
    if wanted("exec-sandbox-plan") {
        let plan_only = || same_plan_without_warden(&bubblewrap, &dirs.workspace);
        let (base, warden) = compare(warmup, iterations, plan_only, through_runner).await?;
        report.ratio(
            RatioSpec {
                id: "exec-sandbox-plan",
                what: "/bin/true through the runner in the sandbox as `auto` builds it (read-only profile)",
                baseline: "bubblewrap running Warden's own mount plan and seccomp programs, without the helper",
                unit: "ms",
                max_ratio: 1.15,
                iterations,
            },
            base,
            warden,
        );
        // The same with bubblewrap building the sandbox (`sandbox.builder = "bubblewrap"`):
        // Warden's overhead over bubblewrap alone.
        let plan_only = || same_plan_without_warden(&bubblewrap, &dirs.workspace);
        let (base, warden) = compare(warmup, iterations, plan_only, through_bubblewrap).await?;
        report.ratio(
            RatioSpec {
                id: "exec-sandbox-plan-bwrap",
                what: "/bin/true through the runner in the sandbox built by bubblewrap (read-only profile)",
                baseline: "bubblewrap running Warden's own mount plan and seccomp programs, without the helper",
                unit: "ms",
                max_ratio: 1.15,
                iterations,
            },
            base,
            warden,
        );
    }
    if wanted("exec-sandbox-cli") {
        let warden_bin = bin_dir.join("warden");
        let cli = || warden_exec(&warden_bin, &dirs);
        let (base, warden) = compare(warmup, iterations, || bare_bwrap(&bwrap), cli).await?;
        report.ratio(
            RatioSpec {
                id: "exec-sandbox-cli",
                what: "`warden exec -- /bin/true` on the sandbox host, end to end (process start, config, cached probe, containment, sandbox, exit)",
                baseline: "bare bwrap with the same namespace flags, as a process",
                unit: "ms",
                max_ratio: 1.5,
                iterations,
            },
            base,
            warden,
        );
    }
    Ok(())
}

/// A runner on the sandbox host, read-only profile, with a private approvals file.
fn in_process_runner(dirs: &Dirs) -> anyhow::Result<runner::Runner> {
    let fs: Arc<caps::LocalFs> = Arc::new(caps::LocalFs::new("/")?);
    let store = crate::fixtures::store(fs.clone(), &dirs.home);
    let clock: Arc<dyn approvals::Clock> = Arc::new(approvals::SystemClock);
    Ok(runner::Runner::new(
        runner::HostContext::builder(
            fs,
            store,
            policy::Config::parse(
                "[sandbox]\npermission_mode = \"readonly\"\n",
                Path::new("config.toml"),
            )?,
        )
        .trusted_path(policy::TrustedPath::parse("/usr/bin:/bin"))
        .default_cwd(dirs.workspace.clone())
        .clock(clock)
        .build(),
    ))
}

/// bubblewrap with exactly the arguments and descriptors Warden gives it for
/// `/bin/true`, minus the helper (which would apply Landlock and exec the command).
async fn same_plan_without_warden(
    sb: &sandbox::NamespaceSandbox,
    cwd: &Path,
) -> anyhow::Result<()> {
    let launch = sb.command_line(
        sandbox::Profile::ReadOnly,
        cwd,
        &["/bin/true".to_owned()],
        None,
        None,
        None,
        None,
        &caps::ExecOptions::new(cwd, std::time::Duration::from_secs(10)),
    )?;
    let Some(cut) = launch.args.iter().position(|a| a == "--") else {
        bail!("no `--` before the helper in {:?}", launch.args);
    };
    let Some(bwrap) = sb.bwrap_path() else {
        bail!("this baseline needs bubblewrap");
    };
    let mut argv = vec![bwrap.to_string_lossy().into_owned()];
    argv.extend(launch.args[..cut].iter().cloned());
    argv.extend(["--".to_owned(), "/bin/true".to_owned()]);
    let options = ExecOptions::new(cwd, std::time::Duration::from_secs(30));
    let spec = ProcessSpec {
        keep_fds: launch.fds,
        ..ProcessSpec::for_request(
            bwrap.to_path_buf(),
            argv.into_iter().map(Into::into).collect(),
            WorkingDir::Path(PathBuf::from("/")),
            &options,
            "bwrap",
        )
    };
    let out = supervise(spec, options.timeout, options.limits).await?;
    if !out.status.success() {
        bail!("bwrap with Warden's plan failed: {}", out.stderr);
    }
    Ok(())
}

/// `warden exec -- /bin/true` from the workspace, with a fresh home's defaults.
async fn warden_exec(warden: &Path, dirs: &Dirs) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(warden)
        .args(["exec", "--", "/bin/true"])
        .current_dir(&dirs.workspace)
        .env_clear()
        .env("HOME", &dirs.home)
        .env("WARDEN_HOME", &dirs.home)
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .await?;
    if !out.status.success() {
        bail!(
            "warden exec failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
