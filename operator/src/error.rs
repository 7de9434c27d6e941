//! Typed reconcile errors; each has a metric label so `/metrics` counts failures by cause.

use thiserror::Error;

#[derive(Error, Debug)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("object has no {0}")]
    MissingField(&'static str),
    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),
    #[error("worker API: {0}")]
    Worker(String),
    #[error("session log token: {0}")]
    SessionLogToken(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Low-cardinality label for `kube_harness_reconcile_errors_total{error=...}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "client",
            Error::Finalizer(_) => "finalizer",
            Error::MissingField(_) => "missing-field",
            Error::Serialize(_) => "serialize",
            Error::Worker(_) => "worker",
            Error::SessionLogToken(_) => "session-log-token",
        }
    }
}
