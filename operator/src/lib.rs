//! The Kube Harness operator: a HarnessSession controller (workspace PVC, Tier-0 worker pod,
//! NetworkPolicy, token Secret, hibernation, status), a SandboxTier controller (validation
//! against the classifier's capability matrix) and a HarnessTurn controller (the status of Tier-1
//! turns), run by the replica that holds a Lease, with Prometheus metrics and health probes.

pub mod cache;
pub mod config;
pub mod context;
pub mod error;
pub mod events;
pub mod grant;
pub mod kube_util;
pub mod labels;
pub mod leader;
pub mod metrics;
pub mod origin;
pub mod pod_http;
pub mod run;
pub mod server;
pub mod session;
pub mod tier;
pub mod tier1;
pub mod turn;
pub mod warm;

pub use config::OperatorConfig;
pub use context::Context;
pub use error::{Error, Result};
pub use run::run;
