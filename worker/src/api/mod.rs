//! The worker's HTTP API: `kube-harness worker` serves one session's runtime to the operator and
//! to `kube-harness exec` (exec, end-turn, status, health), appends its events to the session
//! log, and answers replayed steps from it. Routes and semantics: `docs/worker-api.md`.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

pub mod adopt;
pub mod adopt_files;
pub mod archive;
pub mod config;
pub mod error;
pub mod escalation;
pub mod files;
pub mod log;
pub mod metrics;
pub mod persistent;
pub mod refusal;
pub mod replay;
pub mod server;
mod spill;
pub mod state;
mod stream;
pub mod tier0;

pub use config::{SameSession, SessionLogConfig, WorkerConfig};
pub use error::{Broken, NotReady, StartError, WorkerError};
/// The wire and its client are the protocol's, kept reachable here under their old names.
pub use kube_harness_protocol::{client, worker_api as model};
pub use kube_harness_protocol::{WorkerClient, WorkerClientError};
/// Auth, binding and the SIGTERM/SIGINT future are the services' own (one behaviour everywhere).
pub use kube_harness_service_kit::{
    bind, shutdown_signal, AuthConfig, ConnectionLimits, DEFAULT_HEADER_READ_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};
pub use server::{router, serve};
pub use state::Worker;

pub(crate) use kube_harness_runtime::relock;
