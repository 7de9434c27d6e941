//! What every store returns, and the metric they all record. A leaf: mod.rs (the `Store` that
//! dispatches to the backends) and each backend use it.

use crate::model::StoredEvent;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// Result of an accepted append.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendOutcome {
    pub event: StoredEvent,
    /// `false` when the key was already stored with the same digest (nothing was written).
    pub created: bool,
}

/// Why a store refused or failed an operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("appendIdempotencyKey {key:?} is already stored in run {run} at sequence {sequence} with different content (digest {stored_digest}, this request {request_digest})")]
    Conflict {
        run: String,
        key: String,
        sequence: u64,
        stored_digest: String,
        request_digest: String,
    },
    /// The append would take its session or namespace past its byte quota (`quota.rs`); nothing
    /// was written, and retrying cannot succeed.
    #[error("{scope} {name} stores {used} bytes of events; this append would take it past its quota of {limit} bytes (nothing was written; store large content as an artifact and reference it)")]
    QuotaExceeded {
        scope: &'static str,
        name: String,
        used: u64,
        limit: u64,
    },
    #[error("run {run} cannot be replayed: {reason}")]
    RunCorrupt { run: String, reason: String },
    #[error("store failed and refuses appends until restarted: {0}")]
    Poisoned(String),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

/// A fresh histogram for commit batch sizes (1 .. 4096).
pub fn new_batch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 13))
}
