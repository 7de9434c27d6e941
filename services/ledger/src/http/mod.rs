//! The ledger service: every ledger operation as an HTTP/JSON route, and a client that turns the
//! routes back into `OrchestrationServices`.

mod api;
mod client;
mod extract;
mod metrics;
mod server;

pub use api::*;
pub use client::LedgerClient;
pub use server::{openapi, router, MAX_BODY_BYTES};
