//! `warden doctor`'s word on the record: whether it is kept, where, whether Warden can
//! write there (a required record that cannot be written refuses every request), and
//! whether the end of the log is an intact record. The whole chain is checked by
//! `warden log --verify`, which reads every record.

use std::path::Path;

use crate::host::HostFacts;

/// The record's state here.
pub struct RecordCheck {
    /// Records can be written (or the record is off).
    pub ok: bool,
    /// What to say.
    pub detail: String,
}

/// Check the record of `facts` under `config`.
pub fn check(facts: &HostFacts, config: Option<&policy::Config>) -> RecordCheck {
    let settings = config.map(|c| c.audit).unwrap_or_default();
    if !settings.enabled {
        return RecordCheck {
            ok: true,
            detail: "off (audit.enabled = false): nothing is recorded".into(),
        };
    }
    let dir = facts.audit_dir();
    let required = if settings.required {
        "; audit.required: a request that cannot be recorded is refused"
    } else {
        ""
    };
    if let Some(problem) = unwritable(&dir) {
        return RecordCheck {
            ok: false,
            detail: format!(
                "{} cannot be written ({problem}){}",
                dir.display(),
                if settings.required {
                    ": every request is refused until it can"
                } else {
                    ": runs go on unrecorded"
                }
            ),
        };
    }
    let fs = facts.fs();
    let last = audit::Records::read(fs.as_ref(), &dir, audit::Filter::default())
        .ok()
        .and_then(|records| records.filter_map(Result::ok).last());
    let detail = match last {
        Some(s) => format!(
            "{} (last #{} at {}){required}; `warden log --verify` checks the chain",
            dir.display(),
            s.record.seq,
            s.record.time
        ),
        None => format!("{} (nothing recorded yet){required}", dir.display()),
    };
    RecordCheck { ok: true, detail }
}

/// Why Warden cannot write in `dir` (or, if it does not exist yet, create it), if so.
fn unwritable(dir: &Path) -> Option<String> {
    let mut at = dir;
    // The nearest existing directory decides.
    while !at.exists() {
        at = at.parent()?;
    }
    nix::unistd::access(
        at,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .err()
    .map(|e| format!("{}: {e}", at.display()))
}
