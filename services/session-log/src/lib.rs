//! The Kube Harness session log (`lh.remote-session.v1`).
//!
//! The session log is the source of truth of a run: an append-only, per-run sequence of events
//! that a stateless process replays to rebuild everything else. This crate holds the HTTP server
//! and its three stores (memory, file, PostgreSQL). What a client needs (the wire model, the Rust
//! client, the replay lookup used by the exec path, scoped tokens) is the crate
//! `kube-harness-session-log-client`, re-exported here under the same module names. The protocol
//! and guarantees are documented in `docs/session-log.md`.

pub mod cli;
pub mod reads;
pub mod server;
pub mod store;

pub use kube_harness_session_log_client::{canonical, client, model, replay, scope};
pub use kube_harness_session_log_client::{
    ClientError, ClientOptions, EventInput, RunId, SessionLogClient, StoredEvent,
};
pub use store::{AppendOutcome, Store, StoreError, StoreOptions};
