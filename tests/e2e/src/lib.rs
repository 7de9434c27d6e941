//! Helpers for end-to-end tests against a real cluster reached through `KUBECONFIG`: the cluster from
//! `tests/cluster/up.sh` in CI, or a kind cluster on a developer machine. Every wait is bounded and
//! reports what it was waiting for and the last state seen, so a broken cluster fails fast and legibly.

pub mod harness;
pub mod namespace;
pub mod node;
pub mod peer;
pub mod pods;
pub mod procstat;
pub mod promtext;
pub mod scale;
pub mod startup;
pub mod stats;
pub mod tiers;
pub mod wait;

/// Image the smoke tests run (built from `images/smoke/Containerfile`); override with `KH_E2E_IMAGE`.
pub fn smoke_image() -> String {
    std::env::var("KH_E2E_IMAGE").unwrap_or_else(|_| "localhost/kube-harness/smoke:dev".to_string())
}

/// Errors of the e2e helpers; tests turn them into panics with the message.
#[derive(Debug, thiserror::Error)]
pub enum E2eError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("timed out after {secs}s waiting for {what}; last seen: {last}")]
    Timeout {
        what: String,
        secs: u64,
        last: String,
    },
    #[error("{0}")]
    Failed(String),
    #[error("running {cmd}: {detail}")]
    Command { cmd: String, detail: String },
}

pub type Result<T> = std::result::Result<T, E2eError>;
