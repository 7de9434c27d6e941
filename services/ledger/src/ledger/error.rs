//! One error type for every ledger, shared by the in-process ledgers, the HTTP service and its
//! client, so a caller sees the same error whichever way it reaches the ledger.

use crate::key::KeyError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error(transparent)]
    InvalidKey(#[from] KeyError),
    #[error("too large: {0}")]
    TooLarge(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// The same id or key already holds different content.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The caller's lease (or queue receipt) expired or was superseded by another claim.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// A continuation can be resumed exactly once.
    #[error("already resumed: {0}")]
    AlreadyResumed(String),
    #[error("store failed: {0}")]
    Store(String),
    /// Client side only: the service could not be reached or answered nonsense.
    #[error("transport: {0}")]
    Transport(String),
    /// Client side only: the service refused the bearer token.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
}

/// The wire form of an error: `{"error": {"code", "message"}}`, as every kube-harness service
/// (the kit's one type).
pub use kube_harness_service_kit::error::{ErrorBody, ErrorDetail};

impl LedgerError {
    /// Stable machine-readable code, used on the wire and as a metric label.
    pub fn code(&self) -> &'static str {
        match self {
            LedgerError::InvalidInput(_) => "invalid-input",
            LedgerError::InvalidKey(_) => "invalid-key",
            LedgerError::TooLarge(_) => "too-large",
            LedgerError::NotFound(_) => "not-found",
            LedgerError::Conflict(_) => "conflict",
            LedgerError::LeaseLost(_) => "lease-lost",
            LedgerError::AlreadyResumed(_) => "already-resumed",
            LedgerError::Store(_) => "store",
            LedgerError::Transport(_) => "transport",
            LedgerError::Unauthorized(_) => "unauthorized",
        }
    }

    /// HTTP status for the service.
    pub fn status(&self) -> u16 {
        match self {
            LedgerError::InvalidInput(_) | LedgerError::InvalidKey(_) => 400,
            LedgerError::Unauthorized(_) => 401,
            LedgerError::NotFound(_) => 404,
            LedgerError::Conflict(_)
            | LedgerError::LeaseLost(_)
            | LedgerError::AlreadyResumed(_) => 409,
            LedgerError::TooLarge(_) => 413,
            LedgerError::Store(_) => 500,
            LedgerError::Transport(_) => 502,
        }
    }

    /// Rebuilds an error from its wire form (client side).
    pub fn from_wire(status: u16, body: ErrorBody) -> LedgerError {
        let ErrorDetail { code, message: m } = body.error;
        match code.as_str() {
            "invalid-input" | "bad-request" => LedgerError::InvalidInput(m),
            "invalid-key" => LedgerError::InvalidInput(m),
            "too-large" => LedgerError::TooLarge(m),
            "not-found" => LedgerError::NotFound(m),
            "conflict" => LedgerError::Conflict(m),
            "lease-lost" => LedgerError::LeaseLost(m),
            "already-resumed" => LedgerError::AlreadyResumed(m),
            "store" | "internal" => LedgerError::Store(m),
            "unauthorized" => LedgerError::Unauthorized(m),
            other => LedgerError::Transport(format!("HTTP {status} {other}: {m}")),
        }
    }
}

impl From<StoreError> for LedgerError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::InvalidKey(k) => LedgerError::InvalidKey(k),
            StoreError::TooLarge { .. } => LedgerError::TooLarge(e.to_string()),
            other => LedgerError::Store(other.to_string()),
        }
    }
}

pub type LedgerResult<T> = Result<T, LedgerError>;
