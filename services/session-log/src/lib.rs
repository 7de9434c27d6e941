//! The Kube Harness session log (`lh.remote-session.v1`).
//!
//! The session log is the source of truth of a run: an append-only, per-run sequence of events
//! that a stateless process replays to rebuild everything else. This crate holds the HTTP server,
//! its three stores (memory, file, PostgreSQL), the Rust client and the replay lookup used by the
//! exec path. The protocol and guarantees are documented in `docs/session-log.md`.

pub mod canonical;
pub mod cli;
pub mod client;
pub mod model;
pub mod reads;
pub mod replay;
pub mod scope;
pub mod server;
pub mod store;

pub use client::{ClientError, ClientOptions, SessionLogClient};
pub use model::{EventInput, RunId, StoredEvent};
pub use store::{AppendOutcome, Store, StoreError, StoreOptions};
