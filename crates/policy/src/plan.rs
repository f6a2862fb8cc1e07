//! The run plan: exactly what will run if a command runs — the file (with its identity)
//! or the shell text, argv, working directory, complete environment, agent, session and
//! host. It is worked out once, while the command is explained; a human approves it (its
//! digest binds the answer), and the runner executes it verbatim. Nothing is resolved
//! again in between.

use std::collections::BTreeMap;
use std::path::Path;

use caps::FileId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::confinement::Confinement;
use crate::env::build_child_env;
use crate::evaluate::{EvalContext, Evaluation, Rebuilt};
use crate::exe::ResolveFailure;
use crate::hex::hex;
use crate::modes::Host;
use crate::resolve::ResolvedPolicy;
use crate::shell::CommandInput;

/// The shell that runs shell strings and rebuilt lists.
pub const SHELL: &str = "/bin/sh";

/// What is started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Launch {
    /// A program with arguments; no shell involved.
    Exec {
        /// The file that runs: an absolute path resolved through this host's trusted
        /// PATH — or, on the sandbox host, the name as given (found inside the sandbox).
        program: String,
        /// The file `program` was when the plan was made; a different file at that path
        /// is refused, never run.
        #[serde(default, rename = "programId", skip_serializing_if = "Option::is_none")]
        program_id: Option<FileId>,
        /// The arguments, `argv[0]` being the name the program sees.
        argv: Vec<String>,
    },
    /// Source text run as `shell -c source`.
    Script {
        /// The shell (absolute path).
        shell: String,
        /// The text.
        source: String,
    },
}

impl Launch {
    /// The argv as the OS sees it (for a script: the shell, `-c`, the text).
    pub fn os_argv(&self) -> Vec<String> {
        match self {
            Launch::Exec { argv, .. } => argv.clone(),
            Launch::Script { shell, source } => vec![shell.clone(), "-c".into(), source.clone()],
        }
    }

    /// The command as one line for prompts and records.
    pub fn display(&self) -> String {
        match self {
            Launch::Exec { argv, .. } => argv.join(" "),
            Launch::Script { source, .. } => source.clone(),
        }
    }
}

/// Exactly what will run if approved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunPlan {
    /// What is started.
    pub launch: Launch,
    /// Working directory (absolute).
    pub cwd: String,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
    /// Requesting agent.
    pub agent: String,
    /// Requesting session.
    pub session: String,
    /// Executing host (`gateway`, `sandbox`, a node id).
    pub host: String,
    /// What the run is held to. Part of what a human approves; every executor takes the
    /// run's limits from here and nowhere else.
    pub limits: PlannedLimits,
}

/// The limits a run is held to, worked out with its plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PlannedLimits {
    /// The timeout, in milliseconds (its whole process tree is killed then).
    pub timeout_ms: u64,
    /// Processes and threads the run may have at once.
    pub max_processes: u64,
    /// Bytes of memory the run may use.
    pub max_memory: u64,
    /// The only programs a sandboxed run may execute; `None`: no such restriction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_allowlist: Option<PlannedExecAllowlist>,
    /// What network a sandboxed run has (`None`: the run is not sandboxed, and its
    /// host's own network is its network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<PlannedNetwork>,
    /// `host = sandbox` served WITHOUT an OS sandbox (the operator's direct mode): no
    /// exec allowlist, the host's own network. An executor that confines refuses such a
    /// plan, and one that does not refuses every other sandbox plan.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconfined: bool,
}

/// A sandboxed run's network, as planned: `false` (none), `true` (the host's), or
/// `{"proxy": {"allow": [...], "deny": [...]}}` — only through Warden's egress proxy, to
/// what these rules allow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PlannedNetwork {
    /// None (`false`) or the host's own (`true`).
    Plain(bool),
    /// Only through the egress proxy.
    Proxy {
        /// The rules it decides by.
        proxy: crate::ResolvedEgress,
    },
}

impl PlannedNetwork {
    /// The network of `mode`, with `egress`'s rules in proxy mode (none given: nothing
    /// is allowed).
    pub fn new(mode: crate::SandboxNetwork, egress: Option<&crate::ResolvedEgress>) -> Self {
        match mode {
            crate::SandboxNetwork::Off => PlannedNetwork::Plain(false),
            crate::SandboxNetwork::On => PlannedNetwork::Plain(true),
            crate::SandboxNetwork::Proxy => PlannedNetwork::Proxy {
                proxy: egress.cloned().unwrap_or_default(),
            },
        }
    }

    /// Its mode, without the rules (what a sandbox is built for; the rules come with
    /// each run's plan).
    pub fn mode(&self) -> crate::SandboxNetwork {
        match self {
            PlannedNetwork::Plain(false) => crate::SandboxNetwork::Off,
            PlannedNetwork::Plain(true) => crate::SandboxNetwork::On,
            PlannedNetwork::Proxy { .. } => crate::SandboxNetwork::Proxy,
        }
    }

    /// The egress rules a run decides its connections by (proxy mode only).
    pub fn egress(&self) -> Option<&crate::ResolvedEgress> {
        match self {
            PlannedNetwork::Proxy { proxy } => Some(proxy),
            PlannedNetwork::Plain(_) => None,
        }
    }

    /// What `policy` says a sandboxed run's network is: in proxy mode its rules with the
    /// request's narrowing.
    pub fn of(policy: &ResolvedPolicy) -> Self {
        let egress = policy.egress.as_ref().map(|rules| crate::ResolvedEgress {
            request: policy.egress_request.clone(),
            ..rules.clone()
        });
        PlannedNetwork::new(policy.network.value, egress.as_ref())
    }

    /// What a sandbox built from `sandbox` gives every run (the runner refuses a plan
    /// that says otherwise).
    pub fn of_sandbox(sandbox: &crate::SandboxSettings) -> Self {
        PlannedNetwork::new(
            sandbox.network,
            Some(&crate::ResolvedEgress::of(&sandbox.egress)),
        )
    }
}

impl std::fmt::Display for PlannedNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlannedNetwork::Plain(false) => f.write_str("no network"),
            PlannedNetwork::Plain(true) => f.write_str("the host's network"),
            PlannedNetwork::Proxy { proxy } => {
                write!(f, "only through Warden's proxy, to ")?;
                if proxy.allow.is_empty() {
                    f.write_str("nothing")?;
                } else {
                    f.write_str(&proxy.allow.join(", "))?;
                }
                if !proxy.deny.is_empty() {
                    write!(f, " (never {})", proxy.deny.join(", "))?;
                }
                if let Some(agent) = &proxy.agent {
                    write!(f, " by agent {agent}'s rules")?;
                }
                if let Some(request) = &proxy.request {
                    let list = |rules: &[crate::egress::RuleText]| {
                        rules
                            .iter()
                            .map(crate::egress::RuleText::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    match &request.allow {
                        Some(allow) if allow.is_empty() => {
                            f.write_str("; this request: nothing at all")?
                        }
                        Some(allow) => write!(f, "; this request: only {}", list(allow))?,
                        None => f.write_str("; this request")?,
                    }
                    if !request.deny.is_empty() {
                        write!(f, ", never {}", list(&request.deny))?;
                    }
                }
                // The hosts the agent's egressAllow stores, and those a human allows when
                // asked, are reached too: each was a human's decision about that host.
                let narrowed = proxy.request.as_ref().is_some_and(|r| r.allow.is_some());
                f.write_str(if narrowed {
                    "; another host the request names only as the agent's egressAllow or the approver allows"
                } else {
                    "; another host only as the agent's egressAllow or the approver allows"
                })
            }
        }
    }
}

impl PlannedLimits {
    /// The timeout as a duration.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.timeout_ms)
    }

    /// Whether the run's network goes only through Warden's egress proxy (then a host
    /// its rules do not name is asked about).
    pub fn through_proxy(&self) -> bool {
        matches!(self.network, Some(PlannedNetwork::Proxy { .. }))
    }

    /// The process and memory limits as a shell takes them.
    pub fn resources(&self) -> caps::ResourceLimits {
        caps::ResourceLimits {
            max_processes: Some(self.max_processes),
            max_memory: Some(self.max_memory),
        }
    }

    /// The limits `policy` resolved for a run on its host, served as `confinement` says
    /// when that host is the sandbox.
    pub fn of(policy: &ResolvedPolicy, confinement: Confinement<'_>) -> Self {
        let on_sandbox_host = policy.host.value == Host::Sandbox;
        let unconfined = on_sandbox_host && confinement.is_unconfined();
        let sandboxed = on_sandbox_host && !unconfined;
        PlannedLimits {
            timeout_ms: u64::try_from(policy.timeout.value.as_millis()).unwrap_or(u64::MAX),
            max_processes: policy.max_processes.value,
            max_memory: policy.max_memory.value,
            exec_allowlist: policy
                .exec_allowlist
                .as_ref()
                .filter(|_| sandboxed)
                .map(|list| PlannedExecAllowlist {
                    paths: list.paths.value.clone(),
                    required: list.required(),
                }),
            network: sandboxed.then(|| PlannedNetwork::of(policy)),
            unconfined,
        }
    }
}

/// A sandboxed run's exec allowlist as planned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PlannedExecAllowlist {
    /// The files and directories whose programs may be executed.
    pub paths: Vec<std::path::PathBuf>,
    /// A sandbox that cannot enforce it refuses the run (otherwise the run goes without,
    /// and its decision says so).
    pub required: bool,
}

impl PlannedExecAllowlist {
    /// What a sandbox shell is handed to enforce.
    pub fn to_caps(&self) -> caps::ExecAllowlist {
        caps::ExecAllowlist {
            paths: self.paths.clone(),
        }
    }
}

fn put(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

impl RunPlan {
    /// `sha256:<hex>` over a length-delimited encoding of every field, in a fixed order.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        put(&mut h, b"warden-run-plan/v4");
        match &self.launch {
            Launch::Exec {
                program,
                program_id,
                argv,
            } => {
                put(&mut h, b"exec");
                put(&mut h, program.as_bytes());
                let id = program_id.map(|i| format!("{i}")).unwrap_or_default();
                put(&mut h, id.as_bytes());
                h.update((argv.len() as u64).to_be_bytes());
                for a in argv {
                    put(&mut h, a.as_bytes());
                }
            }
            Launch::Script { shell, source } => {
                put(&mut h, b"script");
                put(&mut h, shell.as_bytes());
                put(&mut h, source.as_bytes());
            }
        }
        put(&mut h, self.cwd.as_bytes());
        h.update((self.env.len() as u64).to_be_bytes());
        for (k, v) in &self.env {
            put(&mut h, k.as_bytes());
            put(&mut h, v.as_bytes());
        }
        put(&mut h, self.agent.as_bytes());
        put(&mut h, self.session.as_bytes());
        put(&mut h, self.host.as_bytes());
        let limits = &self.limits;
        for n in [limits.timeout_ms, limits.max_processes, limits.max_memory] {
            h.update(n.to_be_bytes());
        }
        match &limits.exec_allowlist {
            None => put(&mut h, b"any program"),
            Some(list) => {
                put(
                    &mut h,
                    if list.required {
                        b"required"
                    } else {
                        b"best-effort"
                    },
                );
                h.update((list.paths.len() as u64).to_be_bytes());
                for p in &list.paths {
                    put(&mut h, p.as_os_str().as_encoded_bytes());
                }
            }
        }
        put(
            &mut h,
            match &limits.network {
                None => b"host network",
                Some(PlannedNetwork::Plain(true)) => b"network on",
                Some(PlannedNetwork::Plain(false)) => b"network off",
                Some(PlannedNetwork::Proxy { .. }) => b"network proxy",
            },
        );
        if let Some(PlannedNetwork::Proxy { proxy }) = &limits.network {
            for rules in [&proxy.allow, &proxy.deny] {
                h.update((rules.len() as u64).to_be_bytes());
                for rule in rules {
                    put(&mut h, rule.as_bytes());
                }
            }
        }
        put(
            &mut h,
            if limits.unconfined {
                b"no os sandbox"
            } else {
                b"as its host runs"
            },
        );
        format!("sha256:{}", hex(&h.finalize()))
    }
}

/// Why no plan can be made: the request itself is unusable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PlanError {
    /// Bad input (empty argv, a rejected environment name, a timeout over the maximum,
    /// a working directory that is not UTF-8).
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// The program does not exist on the trusted PATH / at that path.
    #[error("program not found: {program}")]
    NotFound {
        /// The name as given.
        program: String,
    },
    /// The program exists but is not an executable file.
    #[error("program not executable: {program} ({path})")]
    NotExecutable {
        /// The name as given.
        program: String,
        /// The file found.
        path: String,
    },
}

impl PlanError {
    /// The exit code a shell would give (125 for Warden's own refusal, 126, 127).
    pub fn exit_code(&self) -> i32 {
        match self {
            PlanError::Invalid { .. } => 125,
            PlanError::NotExecutable { .. } => 126,
            PlanError::NotFound { .. } => 127,
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        PlanError::Invalid {
            message: message.into(),
        }
    }
}

/// Who asks, as far as the plan is concerned.
#[derive(Clone, Copy, Debug)]
pub struct PlanRequest<'a> {
    /// The agent.
    pub agent: &'a str,
    /// The session.
    pub session: &'a str,
    /// Variables the request wants to set.
    pub env: &'a BTreeMap<String, String>,
    /// This host's own environment (only allowlisted names are forwarded).
    pub host_env: &'a BTreeMap<String, String>,
}

/// The plans for one explained command: `as_written` is what a human approves and what
/// `security=full` runs; `rebuilt` is what an allowlist-satisfied command runs (every
/// program its resolved file, every word quoted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plans {
    /// The command as written, its program resolved.
    pub as_written: Result<RunPlan, PlanError>,
    /// The rebuilt command, when the allowlist is satisfied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<RunPlan>,
}

fn utf8_path(path: &Path, what: &str) -> Result<String, PlanError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| PlanError::invalid(format!("{what} {} is not UTF-8", path.display())))
}

/// Whether a request's own egress rules hold for a run with `limits`: through Warden's
/// proxy they are part of its rules, and with no network there is nothing to narrow;
/// anywhere else nothing could hold the run to them, so it is refused (an agent that
/// asked for a narrower network must not get a wider one without a word).
fn egress_enforceable(policy: &ResolvedPolicy, limits: &PlannedLimits) -> Result<(), String> {
    let where_ = match &limits.network {
        Some(PlannedNetwork::Proxy { .. } | PlannedNetwork::Plain(false)) => return Ok(()),
        Some(PlannedNetwork::Plain(true)) => {
            "has the host's network (sandbox.network = true)".to_owned()
        }
        None if limits.unconfined => {
            "runs unconfined (direct mode), with the host's network".to_owned()
        }
        None => match policy.host.value {
            Host::Node => "runs on a node, which has no egress proxy".to_owned(),
            _ => format!("runs on the {} host, with its network", policy.host.value),
        },
    };
    Err(format!(
        "`egress` narrows the network of a run sandboxed with sandbox.network = \"proxy\"; \
         this run {where_}, so nothing could hold it to those rules"
    ))
}

/// Work out the plans for `command`, resolved as `policy` says, in `ctx`.
pub(crate) fn plans(
    command: CommandInput<'_>,
    policy: &ResolvedPolicy,
    ctx: &EvalContext<'_>,
    request: &PlanRequest<'_>,
    evaluation: &Evaluation,
    confinement: Confinement<'_>,
) -> Plans {
    let base = (|| -> Result<RunPlan, PlanError> {
        policy
            .checked_timeout()
            .map_err(|e| PlanError::invalid(e.to_string()))?;
        let limits = PlannedLimits::of(policy, confinement);
        if policy.egress_request.is_some() {
            egress_enforceable(policy, &limits).map_err(PlanError::invalid)?;
        }
        match ctx.fs.metadata(ctx.cwd) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(PlanError::invalid(format!(
                    "working directory {} is not a directory",
                    ctx.cwd.display()
                )));
            }
            Err(e) => {
                return Err(PlanError::invalid(format!(
                    "working directory {} is not usable: {e}",
                    ctx.cwd.display()
                )));
            }
        }
        let env = build_child_env(
            request.host_env,
            &ctx.trusted_path.to_path_var(),
            request.env,
            &policy.extra_env_names(),
        )
        .map_err(|e| PlanError::invalid(e.to_string()))?;
        Ok(RunPlan {
            launch: Launch::Script {
                shell: String::new(),
                source: String::new(),
            },
            cwd: utf8_path(ctx.cwd, "the working directory")?,
            env,
            agent: request.agent.to_owned(),
            session: request.session.to_owned(),
            host: policy.host.value.to_string(),
            limits,
        })
    })();
    let base = match base {
        Ok(b) => b,
        Err(e) => {
            return Plans {
                as_written: Err(e),
                rebuilt: None,
            };
        }
    };
    let with = |launch: Launch| RunPlan {
        launch,
        ..base.clone()
    };
    let as_written = as_written(command, policy.host.value, ctx).map(&with);
    let rebuilt = evaluation.rebuilt.as_ref().and_then(|r| match r {
        Rebuilt::Script(text) => Some(with(Launch::Script {
            shell: SHELL.into(),
            source: text.clone(),
        })),
        // The first word became the resolved file of the program (or of the first
        // wrapper); it runs under the name it was written as.
        Rebuilt::Argv(argv) => {
            let chain = evaluation.analysis.as_ref().ok()?;
            let first_word = chain.segments.first()?.argv.first()?.clone();
            let exe = ctx.resolve(&first_word).ok()?;
            let mut argv = argv.clone();
            let program = argv.first()?.clone();
            argv[0] = first_word;
            Some(with(Launch::Exec {
                program,
                program_id: Some(exe.id),
                argv,
            }))
        }
    });
    Plans {
        as_written,
        rebuilt,
    }
}

/// The command as written: a script stays a script; an argv's program is resolved through
/// the trusted PATH — except on the sandbox host, which finds it inside.
fn as_written(
    command: CommandInput<'_>,
    host: Host,
    ctx: &EvalContext<'_>,
) -> Result<Launch, PlanError> {
    let argv = match command {
        CommandInput::Shell(text) => {
            if text.trim().is_empty() {
                return Err(PlanError::invalid("the command is empty"));
            }
            return Ok(Launch::Script {
                shell: SHELL.into(),
                source: text.to_owned(),
            });
        }
        CommandInput::Argv(argv) => argv,
    };
    let Some(name) = argv.first().filter(|n| !n.is_empty()) else {
        return Err(PlanError::invalid(
            "the request names no program (argv is empty)",
        ));
    };
    if host == Host::Sandbox {
        return Ok(Launch::Exec {
            program: name.clone(),
            program_id: None,
            argv: argv.to_vec(),
        });
    }
    match ctx.resolve(name) {
        Ok(exe) => Ok(Launch::Exec {
            program: utf8_path(&exe.path, "the program")?,
            program_id: Some(exe.id),
            argv: argv.to_vec(),
        }),
        Err(ResolveFailure::NotExecutable { path }) => Err(PlanError::NotExecutable {
            program: name.clone(),
            path: path.display().to_string(),
        }),
        Err(_) => Err(PlanError::NotFound {
            program: name.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> RunPlan {
        RunPlan {
            launch: Launch::Exec {
                program: "/usr/bin/rg".into(),
                program_id: Some(FileId { dev: 1, ino: 2 }),
                argv: vec!["rg".into(), "-n".into(), "x".into()],
            },
            cwd: "/work".into(),
            env: [("PATH".to_string(), "/usr/bin".to_string())].into(),
            agent: "coder".into(),
            session: "s1".into(),
            host: "gateway".into(),
            limits: PlannedLimits {
                timeout_ms: 30_000,
                max_processes: 512,
                max_memory: 1 << 30,
                exec_allowlist: None,
                network: None,
                unconfined: false,
            },
        }
    }

    #[test]
    fn any_change_changes_the_digest() {
        let base = plan().digest();
        type Change = dyn Fn(&mut String, &mut Option<FileId>, &mut Vec<String>);
        let exec = |f: &Change| {
            let mut p = plan();
            if let Launch::Exec {
                program,
                program_id,
                argv,
            } = &mut p.launch
            {
                f(program, program_id, argv);
            }
            p
        };
        let mut variants = vec![
            exec(&|program, _, _| *program = "/tmp/rg".into()),
            exec(&|_, id, _| *id = Some(FileId { dev: 1, ino: 3 })),
            exec(&|_, id, _| *id = None),
            exec(&|_, _, argv| argv[2] = "y".into()),
            exec(&|_, _, argv| *argv = vec!["rg".into(), "-nx".into()]),
        ];
        let mut p = plan();
        p.cwd = "/".into();
        variants.push(p);
        let mut p = plan();
        p.env.insert("TERM".into(), "x".into());
        variants.push(p);
        let mut p = plan();
        p.agent = "other".into();
        variants.push(p);
        let mut p = plan();
        p.session = "s2".into();
        variants.push(p);
        let mut p = plan();
        p.host = "node-1".into();
        variants.push(p);
        let proxy = |allow: &[&str], deny: &[&str]| {
            Some(PlannedNetwork::Proxy {
                proxy: crate::ResolvedEgress {
                    allow: allow.iter().map(|s| s.to_string()).collect(),
                    deny: deny.iter().map(|s| s.to_string()).collect(),
                    agent: None,
                    request: None,
                },
            })
        };
        let limits: [&dyn Fn(&mut PlannedLimits); 14] = [
            &|l| l.unconfined = true,
            &|l| l.timeout_ms += 1,
            &|l| l.max_processes -= 1,
            &|l| l.max_memory *= 2,
            &|l| l.network = Some(PlannedNetwork::Plain(false)),
            &|l| l.network = Some(PlannedNetwork::Plain(true)),
            &|l| l.network = proxy(&[], &[]),
            &|l| l.network = proxy(&["example.com"], &[]),
            &|l| l.network = proxy(&[], &["example.com"]),
            // The same texts moved between the lists, or split differently, differ too.
            &|l| l.network = proxy(&["a.example", "b.example"], &[]),
            // The request's own narrowing is part of what was approved.
            &|l| {
                l.network = Some(PlannedNetwork::Proxy {
                    proxy: crate::ResolvedEgress {
                        request: Some(crate::egress::RequestEgress {
                            allow: Some(Vec::new()),
                            deny: Vec::new(),
                        }),
                        ..Default::default()
                    },
                })
            },
            // Whose rules they are is part of what was approved.
            &|l| {
                l.network = Some(PlannedNetwork::Proxy {
                    proxy: crate::ResolvedEgress {
                        agent: Some("ci".into()),
                        ..Default::default()
                    },
                })
            },
            &|l| {
                l.exec_allowlist = Some(PlannedExecAllowlist {
                    paths: vec!["/usr/bin".into()],
                    required: true,
                })
            },
            &|l| {
                l.exec_allowlist = Some(PlannedExecAllowlist {
                    paths: vec!["/usr/bin".into()],
                    required: false,
                })
            },
        ];
        for change in limits {
            let mut p = plan();
            change(&mut p.limits);
            variants.push(p);
        }
        let mut p = plan();
        p.launch = Launch::Script {
            shell: SHELL.into(),
            source: "rg -n x".into(),
        };
        variants.push(p);
        for v in variants {
            assert_ne!(v.digest(), base, "{v:?}");
        }
        // Field boundaries are unambiguous: moving bytes between fields changes it.
        let mut a = plan();
        a.agent = "ab".into();
        a.session = "c".into();
        let mut b = plan();
        b.agent = "a".into();
        b.session = "bc".into();
        assert_ne!(a.digest(), b.digest());
    }

    #[test]
    fn the_wire_form_is_strict_and_round_trips() {
        let p = plan();
        let text = serde_json::to_string(&p).unwrap();
        assert!(
            text.contains("\"kind\":\"exec\"") && text.contains("\"programId\""),
            "{text}"
        );
        let back: RunPlan = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p);
        let extra = text.replacen("\"cwd\"", "\"extra\":1,\"cwd\"", 1);
        assert!(serde_json::from_str::<RunPlan>(&extra).is_err());
        let launch_extra = text.replacen("\"argv\"", "\"shellHint\":1,\"argv\"", 1);
        assert!(serde_json::from_str::<RunPlan>(&launch_extra).is_err());
    }
}
