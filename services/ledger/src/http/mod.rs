//! The ledger service: every ledger operation as an HTTP/JSON route, and a client that turns the
//! routes back into `OrchestrationServices`.

mod api;
mod client;
mod extract;
mod metrics;
mod server;

pub use api::*;
pub use client::LedgerClient;
pub use server::{openapi, router};

/// Largest accepted request body: a maximal document plus room for the envelope. Larger bodies are
/// refused with 413 before they are buffered (here, not in server.rs, so the body reader in
/// extract.rs and the routes in server.rs both read it without naming each other).
pub const MAX_BODY_BYTES: usize = crate::store::MAX_DOCUMENT_BYTES + 64 * 1024;
