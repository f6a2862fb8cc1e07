//! How this host serves `host = sandbox` at the moment a request is decided: inside an
//! OS sandbox, or — while the operator's time-limited direct mode is on — without one.
//! It is a fact of the route, fixed before the decision: the decision and the plan say
//! which it is (the plan's digest covers it), and an executor that would serve the plan
//! the other way refuses it.

/// How `host = sandbox` is served for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Confinement<'a> {
    /// An OS sandbox confines every command (the permission mode gates writes).
    #[default]
    Sandbox,
    /// The operator's direct mode: commands run on this machine without an OS sandbox,
    /// for this stated reason (said in the decision).
    Unconfined(&'a str),
}

impl Confinement<'_> {
    /// Whether commands run without an OS sandbox.
    pub fn is_unconfined(&self) -> bool {
        matches!(self, Confinement::Unconfined(_))
    }
}
