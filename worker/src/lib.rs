//! The worker: one session's runtime served over HTTP (`api`: exec, end-turn, status, replay from
//! the session log) and the local host (`local`: the same engines without a cluster).
//!
//! The engines are crates of their own, each answering one question; they are re-exported here
//! under their module names so that the binary and the worker's tests reach them in one place.

pub mod api;
pub mod local;

pub use kube_harness_classify as classify;
pub use kube_harness_protocol as protocol;
pub use kube_harness_runtime as runtime;
pub use kube_harness_sandbox as sandbox;
pub use kube_harness_tier1 as tier1;
pub use kube_harness_workspace as workspace;
