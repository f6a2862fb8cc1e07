//! The process table as `/proc/PID/stat` shows it: every process's pid with the fields
//! after its command name (which may hold spaces and parentheses, so the split is at the
//! last `)`). One reader for the supervisor's session sweep and the subreaper's
//! descendants.

/// Every process now, with the fields of its stat line after the command name (state,
/// ppid, pgrp, session, …). A process that ends while being read is left out.
pub(crate) fn process_stats() -> Vec<(i32, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut stats = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(fields) = fields_after_name(&stat) {
            stats.push((pid, fields));
        }
    }
    stats
}

/// The fields of a stat line after the command name (field 2), from its last `)`.
pub(crate) fn fields_after_name(stat: &str) -> Option<Vec<String>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}
