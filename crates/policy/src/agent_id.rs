//! What an agent id may be, wherever one is made (a gateway credential, a new agent in
//! the approvals file): 1–128 letters, digits, `.`, `_` and `-`. Ids appear in messages,
//! keys and the approver's screens, never as paths; keeping them plain keeps all of
//! those unambiguous.

/// The rule, as error messages state it.
pub const AGENT_ID_RULE: &str = "use 1-128 characters from letters, digits, '.', '_' and '-'";

/// Whether `id` can name a new agent.
pub fn is_agent_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ids_only() {
        for ok in ["main", "claude", "coder-2", "a.b_c", &"x".repeat(128)] {
            assert!(is_agent_id(ok), "{ok}");
        }
        for bad in ["", "bad id!", "a/b", "é", "a\nb", &"x".repeat(129)] {
            assert!(!is_agent_id(bad), "{bad:?}");
        }
    }
}
