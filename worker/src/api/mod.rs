//! The worker's HTTP API: `kube-harness worker` serves one session's runtime to the operator and
//! to `kube-harness exec` (exec, end-turn, status, health), appends its events to the session
//! log, and answers replayed steps from it. Routes and semantics: `docs/worker-api.md`.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

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
pub use kube_harness_service_kit::{
    bind, shutdown_signal, AuthConfig, ConnectionLimits, DEFAULT_HEADER_READ_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};
pub use server::{router, serve};
pub use state::{Broken, Worker};

/// Locks a std mutex even when an earlier holder panicked. Only for the worker's own small
/// mutexes whose data is consistent at every instant a panic could leave it (a value assigned
/// whole, a `Vec` pushed to, a set inserted into): refusing them forever after one panic would
/// turn that panic into a 500 for every later request, which is what issue 12 found.
pub(crate) fn relock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
