//! The HarnessSession controller. A reconcile ([`reconcile`]) ensures the child objects
//! (`resources` builds them, `observe` and `usage` read the worker), computes the status from what
//! it observed ([`status`], pure), and writes it once.

pub mod access;
pub mod observe;
pub mod owned;
pub mod persistent;
pub mod reconcile;
pub mod resources;
pub mod status;
pub mod trust;
pub mod usage;

pub use reconcile::{error_policy, reconcile};
