//! Capability providers. Only `local` and `bounded` may touch the real disk and
//! processes (`cargo xtask lint` enforces it); `memory` must not.

pub mod bounded;
pub mod local;
pub mod memory;
pub(crate) mod paths;
