//! `sandbox.network = "proxy"` composed: the sandbox's network mode, the plan's view of
//! it, and the gate that decides by `[sandbox.egress]` a connection of a run that carries
//! no rules of its own (`policy::egress_gate`, the proxy's `Gate` through `caps`).

use std::sync::Arc;

use policy::egress_gate::RulesGate;
use policy::{Config, PlannedNetwork, SandboxNetwork};
use sandbox::egress::proxy::{Limits, SystemResolver};

/// The sandbox's network mode for `config`.
pub fn sandbox_network(config: &Config) -> sandbox::Network {
    match config.sandbox.network {
        SandboxNetwork::Off => sandbox::Network::Off,
        SandboxNetwork::On => sandbox::Network::On,
        SandboxNetwork::Proxy => sandbox::Network::Proxy,
    }
}

/// What a sandbox built from `config` gives a run, as plans say it (the runner refuses a
/// plan that says otherwise).
pub fn planned_network(config: &Config) -> PlannedNetwork {
    PlannedNetwork::of_sandbox(&config.sandbox)
}

/// How a sandbox built from `config` decides the connections of a run that carries no
/// rules of its own (the runner gives every proxied run its plan's).
pub fn egress(config: &Config) -> sandbox::Egress {
    sandbox::Egress {
        gate: Arc::new(RulesGate::new(config.sandbox.egress.clone(), None)),
        resolver: Arc::new(SystemResolver),
        limits: Limits::default(),
    }
}
