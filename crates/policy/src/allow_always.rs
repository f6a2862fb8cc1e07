//! "Allow always": which patterns to store after a human approved a command permanently.
//! Only the resolved files of the commands that do the work are stored — never a shell,
//! an interpreter or a wrapper, because allowing one of those allows everything.

use serde::Serialize;

use crate::allowlist::escape_glob;
use crate::evaluate::Evaluation;
use crate::shell::{base_name, is_never_stored};

/// A program that was not stored, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The program as written.
    pub program: String,
    /// Why it was not stored.
    pub reason: String,
}

/// The patterns to store, and what was left out. `patterns` may be empty: then nothing is
/// stored and `skipped` says why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AllowAlways {
    /// Exact canonical paths, escaped so that they match only themselves.
    pub patterns: Vec<String>,
    /// Programs that could not be stored.
    pub skipped: Vec<Skipped>,
}

/// Derive the patterns "allow always" stores for an evaluated command.
pub fn derive_allow_always(evaluation: &Evaluation) -> AllowAlways {
    let mut result = AllowAlways::default();
    if let Err(miss) = &evaluation.analysis {
        result.skipped.push(Skipped {
            program: String::new(),
            reason: format!(
                "the command is not a plain list of simple commands ({}); nothing can be stored",
                miss.detail
            ),
        });
        return result;
    }
    for leaf in &evaluation.leaves {
        let Some(exe) = &leaf.resolved else {
            result.skipped.push(Skipped {
                program: leaf.program.clone(),
                reason: "does not resolve to an executable file".into(),
            });
            continue;
        };
        let resolved_name = exe.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if is_never_stored(base_name(&leaf.program)) || is_never_stored(resolved_name) {
            result.skipped.push(Skipped {
                program: leaf.program.clone(),
                reason: "shells, interpreters and wrappers are never stored".into(),
            });
            continue;
        }
        let pattern = escape_glob(&exe.path.to_string_lossy());
        if !result.patterns.contains(&pattern) {
            result.patterns.push(pattern);
        }
    }
    result
}
