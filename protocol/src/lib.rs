//! The wire of Kube Harness, defined once for both ends: the worker API (`worker_api`, and its
//! typed [`WorkerClient`]), the Tier-1 agent and tier API (`tier1`), trace events (`trace`), and
//! the types they share; and the worker's settings (`worker_args`), which the operator renders
//! and the binary parses. Serde, clap and an HTTP client only: the operator and
//! `kube-harness-client` depend on this, never on the sandbox, the workspace archives or the
//! bash grammar.

pub mod client;
pub mod error;
pub mod outcome;
pub mod tier1;
pub mod toggles;
pub mod trace;
pub mod worker_api;
pub mod worker_args;

pub use client::{WorkerClient, WorkerClientError};
pub use outcome::CommandOutcome;
pub use toggles::RuntimeToggles;
pub use trace::TraceEvent;
pub use worker_args::{SameSession, WorkerArgs};
