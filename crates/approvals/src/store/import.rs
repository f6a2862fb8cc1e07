//! `warden approvals import`: merging an OpenClaw-format approvals file into this host's,
//! with OpenClaw's meaning — `*` is every agent — and nothing lost or changed silently:
//! every field is kept at every level, every value that was not applied is reported,
//! and every change that loosens the host is flagged. A dry run shows the result.

use policy::{Ask, AskFallback, Security};
use serde_json::{Map, Value};

use super::{Store, StoreError, Updated};
use crate::file::{ApprovalsFile, Ceilings, EVERY_AGENT};

/// What an import added, flagged and left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportSummary {
    /// Agents that were new (`*`: every agent).
    pub agents_added: Vec<String>,
    /// Allowlist entries added (to new and existing agents).
    pub patterns_added: usize,
    /// Settings that were unset and now have the imported value (`name = value`).
    pub settings_set: Vec<String>,
    /// Changes that loosen this host: a setting looser than what applied before, and
    /// everything given to `*` (it reaches every agent).
    pub loosening: Vec<String>,
    /// Imported values that were not applied, and why.
    pub skipped: Vec<String>,
    /// Fields this version does not know, imported as they were (`defaults.x`).
    pub fields_kept: Vec<String>,
}

/// The result of an import computed without writing.
#[derive(Clone, Debug, PartialEq)]
pub struct DryRun {
    /// What the import would do.
    pub summary: ImportSummary,
    /// The document as it would be written.
    pub file: ApprovalsFile,
    /// Whether anything would change.
    pub changes: bool,
}

fn looser<T: Copy + PartialEq>(new: T, old: T, stricter: fn(T, T) -> T) -> bool {
    new != old && stricter(new, old) == old
}

/// Settings in effect for a scope before the import (unset: the strict default), to
/// judge whether an imported value loosens it.
fn effective(c: Ceilings) -> (Security, Ask, AskFallback) {
    (
        c.security.unwrap_or(Security::Deny),
        c.ask.unwrap_or(Ask::OnMiss),
        c.ask_fallback.unwrap_or(AskFallback::Deny),
    )
}

/// Merge `theirs` settings into `ours` at `scope`: unset values are filled (and flagged
/// when looser than what applied: `before`), set ones are kept (and the imported value
/// reported when it differs).
fn merge_ceilings(
    ours: &mut Ceilings,
    theirs: Ceilings,
    before: Ceilings,
    scope: &str,
    summary: &mut ImportSummary,
) {
    let (sec0, ask0, fb0) = effective(before);
    macro_rules! one {
        ($field:ident, $name:literal, $old:expr, $stricter:expr) => {
            if let Some(value) = theirs.$field {
                match ours.$field {
                    None => {
                        ours.$field = Some(value);
                        summary
                            .settings_set
                            .push(format!("{scope}.{} = {value}", $name));
                        if looser(value, $old, $stricter)
                            || scope == format!("agents.{EVERY_AGENT}")
                        {
                            summary.loosening.push(format!(
                                "{scope}.{}: {} → {value}{}",
                                $name,
                                $old,
                                if scope == format!("agents.{EVERY_AGENT}") {
                                    " (for every agent)"
                                } else {
                                    ""
                                }
                            ));
                        }
                    }
                    Some(kept) if kept != value => summary.skipped.push(format!(
                        "{scope}.{}: kept {kept}, not the imported {value}",
                        $name
                    )),
                    Some(_) => {}
                }
            }
        };
    }
    one!(security, "security", sec0, Security::stricter);
    one!(ask, "ask", ask0, Ask::stricter);
    one!(ask_fallback, "askFallback", fb0, AskFallback::stricter);
}

/// Keep every field this version does not know: new keys are added; a key that is
/// already there with another value keeps ours and is reported.
fn merge_extra(
    ours: &mut Map<String, Value>,
    theirs: Map<String, Value>,
    scope: &str,
    summary: &mut ImportSummary,
) {
    for (key, value) in theirs {
        match ours.get(&key) {
            None => {
                summary.fields_kept.push(format!("{scope}{key}"));
                ours.insert(key, value);
            }
            Some(existing) if *existing != value => summary.skipped.push(format!(
                "{scope}{key}: kept this host's value, not the imported {value}"
            )),
            Some(_) => {}
        }
    }
}

/// Merge `incoming` into `file` (pure: no I/O).
pub fn merge_import(file: &mut ApprovalsFile, incoming: ApprovalsFile) -> ImportSummary {
    let mut summary = ImportSummary::default();
    if incoming.socket.is_some() {
        summary
            .skipped
            .push("socket: the approver socket and token are never imported".into());
    }
    let defaults_before = file.defaults.ceilings;
    merge_ceilings(
        &mut file.defaults.ceilings,
        incoming.defaults.ceilings,
        defaults_before,
        "defaults",
        &mut summary,
    );
    merge_extra(
        &mut file.defaults.extra,
        incoming.defaults.extra,
        "defaults.",
        &mut summary,
    );
    merge_extra(&mut file.extra, incoming.extra, "", &mut summary);
    let every_before = file
        .agents
        .get(EVERY_AGENT)
        .map_or(file.defaults.ceilings, |e| {
            e.ceilings.over(file.defaults.ceilings)
        });
    for (id, theirs) in incoming.agents {
        if !file.agents.contains_key(&id) {
            summary.agents_added.push(id.clone());
        }
        // What applied to this agent before: its own values over `*` over defaults.
        let before = if id == EVERY_AGENT {
            file.defaults.ceilings
        } else {
            file.agents
                .get(&id)
                .map_or(every_before, |e| e.ceilings.over(every_before))
        };
        let scope = format!("agents.{id}");
        let ours = file.agents.entry(id.clone()).or_default();
        merge_ceilings(
            &mut ours.ceilings,
            theirs.ceilings,
            before,
            &scope,
            &mut summary,
        );
        merge_extra(
            &mut ours.extra,
            theirs.extra,
            &format!("{scope}."),
            &mut summary,
        );
        for entry in theirs.allowlist {
            let rule = entry.rule();
            match ours
                .allowlist
                .iter_mut()
                .find(|o| o.rule().same_rule(&rule))
            {
                Some(existing) => {
                    let at = format!("{scope}.allowlist[{}].", rule.describe());
                    merge_extra(&mut existing.extra, entry.extra, &at, &mut summary);
                }
                None => {
                    if id == EVERY_AGENT {
                        summary.loosening.push(format!(
                            "agents.*: allowlist entry {} applies to every agent",
                            rule.describe()
                        ));
                    }
                    ours.allowlist.push(entry);
                    summary.patterns_added += 1;
                }
            }
        }
    }
    summary
}

fn parse_incoming(text: &str) -> Result<ApprovalsFile, StoreError> {
    let incoming: ApprovalsFile = serde_json::from_str(text).map_err(|e| StoreError::Invalid {
        problems: vec![format!("not a valid OpenClaw approvals file: {e}")],
    })?;
    let problems = incoming.problems();
    if !problems.is_empty() {
        return Err(StoreError::Invalid { problems });
    }
    Ok(incoming)
}

impl Store {
    /// Merge an OpenClaw-format (schema version 1) approvals file: new agents are added
    /// whole; for known agents, missing settings are filled and allowlist entries added
    /// (existing entries and settings are kept, and what was not taken is reported). The
    /// socket and token are never imported.
    pub fn import_openclaw(&self, text: &str) -> Result<Updated<ImportSummary>, StoreError> {
        let incoming = parse_incoming(text)?;
        self.update(None, |file| Ok(merge_import(file, incoming)))
    }

    /// What [`Store::import_openclaw`] would do, without writing anything.
    pub fn import_openclaw_dry_run(&self, text: &str) -> Result<DryRun, StoreError> {
        let incoming = parse_incoming(text)?;
        let current = self.load()?.file;
        let mut file = current.clone();
        let summary = merge_import(&mut file, incoming);
        let problems = file.problems();
        if !problems.is_empty() {
            return Err(StoreError::Invalid { problems });
        }
        Ok(DryRun {
            summary,
            changes: file != current,
            file,
        })
    }
}
