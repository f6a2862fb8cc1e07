//! A run's limits: the process, memory and CPU settings written into its cgroups, and
//! whether the kernel enforced the memory limit.

use std::fs;
use std::io;
use std::path::Path;

use super::run_group::Member;
use super::{Flavor, Hierarchy, write};
use crate::shell::ResourceLimits;

/// A run's CPU weight (v2; the default is 100) and shares (v1; the default is 1024):
/// a quarter of any other cgroup's when the CPUs are contended, so a run that spins —
/// a fork bomb at its process limit, a runaway build — cannot starve Warden (whose
/// timeouts must fire) or the host. An idle machine still gives a run every CPU.
const RUN_CPU_WEIGHT: u32 = 25;
const RUN_CPU_SHARES: u32 = 256;

pub(super) fn apply_limits(h: &Hierarchy, dir: &Path, limits: ResourceLimits) -> io::Result<()> {
    match h.flavor {
        Flavor::V2 => {
            if h.cpu {
                write(&dir.join("cpu.weight"), &RUN_CPU_WEIGHT.to_string())?;
            }
            if let Some(n) = limits.max_processes.filter(|_| h.pids) {
                write(&dir.join("pids.max"), &n.to_string())?;
            }
            if let Some(bytes) = limits.max_memory.filter(|_| h.memory) {
                write(&dir.join("memory.max"), &bytes.to_string())?;
                // A memory bomb must not push the host into swap instead.
                let swap = dir.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
            }
        }
        Flavor::V1Pids => {
            if let Some(n) = limits.max_processes {
                write(&dir.join("pids.max"), &n.to_string())?;
            }
        }
        Flavor::V1Cpu => write(&dir.join("cpu.shares"), &RUN_CPU_SHARES.to_string())?,
        Flavor::V1Memory => {
            if let Some(bytes) = limits.max_memory {
                write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                let memsw = dir.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write(&memsw, &bytes.to_string())?;
                }
            }
        }
    }
    Ok(())
}

pub(super) fn oom_killed(m: &Member) -> bool {
    let count = |file: &str| {
        fs::read_to_string(m.dir.join(file))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ").map(|v| v.trim().parse::<u64>()))
            })
            .and_then(Result::ok)
            .unwrap_or(0)
    };
    match m.flavor {
        Flavor::V2 => count("memory.events") > 0,
        Flavor::V1Memory => count("memory.oom_control") > 0,
        Flavor::V1Pids | Flavor::V1Cpu => false,
    }
}
