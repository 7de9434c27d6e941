//! The HarnessSession controller.

pub mod events;
pub mod observe;
pub mod reconcile;
pub mod resources;
pub mod usage;

pub use reconcile::{error_policy, reconcile};
