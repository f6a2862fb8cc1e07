//! The run plan an approval is bound to: program, argv, cwd, environment, agent, session
//! and host. Its digest travels in the prompt and the answer, so an approval can never be
//! used for a different plan.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::hex;

/// Exactly what will run if approved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunPlan {
    /// The resolved program (absolute path), or empty when it runs through a shell string.
    pub program: String,
    /// The argv (for a shell string: the shell, `-c`, the text).
    pub argv: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// The complete environment.
    pub env: BTreeMap<String, String>,
    /// Requesting agent.
    pub agent: String,
    /// Requesting session.
    pub session: String,
    /// Executing host (`gateway`, `node:<id>`, `sandbox`).
    pub host: String,
}

fn put(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

impl RunPlan {
    /// `sha256:<hex>` over a length-delimited encoding of every field, in a fixed order.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        put(&mut h, b"warden-run-plan/v1");
        put(&mut h, self.program.as_bytes());
        h.update((self.argv.len() as u64).to_be_bytes());
        for a in &self.argv {
            put(&mut h, a.as_bytes());
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
        format!("sha256:{}", hex(&h.finalize()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> RunPlan {
        RunPlan {
            program: "/usr/bin/rg".into(),
            argv: vec!["rg".into(), "-n".into(), "x".into()],
            cwd: "/work".into(),
            env: [("PATH".to_string(), "/usr/bin".to_string())].into(),
            agent: "coder".into(),
            session: "s1".into(),
            host: "gateway".into(),
        }
    }

    #[test]
    fn any_change_changes_the_digest() {
        let base = plan().digest();
        let mut variants = Vec::new();
        let mut p = plan();
        p.program = "/tmp/rg".into();
        variants.push(p);
        let mut p = plan();
        p.argv[2] = "y".into();
        variants.push(p);
        let mut p = plan();
        p.argv = vec!["rg".into(), "-nx".into()];
        variants.push(p);
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
        p.host = "node:n1".into();
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
}
