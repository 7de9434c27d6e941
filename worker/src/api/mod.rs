//! The worker's HTTP API: `kube-harness worker` serves one session's runtime to the operator and
//! to `kube-harness exec` (exec, end-turn, status, health), appends its events to the session
//! log, and answers replayed steps from it. Routes and semantics: `docs/worker-api.md`.

pub mod client;
pub mod config;
pub mod escalation;
pub mod log;
pub mod model;
pub mod replay;
pub mod server;
pub mod state;
pub mod tier0;

pub use client::{WorkerClient, WorkerClientError};
pub use config::{SameSession, SessionLogConfig, WorkerConfig};
/// Auth, binding and the SIGTERM/SIGINT future are the services' own (one behaviour everywhere).
pub use kube_harness_service_kit::{bind, shutdown_signal, AuthConfig};
pub use server::{router, serve};
pub use state::Worker;
