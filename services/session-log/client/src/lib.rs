//! What a client of the Kube Harness session log (`lh.remote-session.v1`) needs, without the
//! server: the wire model (run ids, events, their validation and digest), the Rust client, the
//! replay lookup used by the exec path, and session-scoped tokens (minted by the operator,
//! checked by the server). No axum, no stores, no PostgreSQL: the operator and the worker link
//! this crate, the server (`kube-harness-session-log`) re-exports it. The protocol and guarantees
//! are documented in `docs/session-log.md`.

pub mod canonical;
pub mod client;
pub mod model;
pub mod replay;
pub mod scope;

pub use client::{ClientError, ClientOptions, SessionLogClient};
pub use model::{EventInput, RunId, StoredEvent};
