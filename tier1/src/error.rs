//! What goes wrong on Tier-1, by where it went wrong. Every message is what the agent reads on
//! stderr (exit 126) or in a `harness.runtime.dispose.failed` event, so each says what was being
//! done.

use crate::tier_api::TierApiError;
use kube_harness_runtime::TierError;
use kube_harness_workspace::WorkspaceError;

#[derive(Debug, thiserror::Error)]
pub enum Tier1Error {
    /// The command could not be started (its script, the namespace set-up, bash or `unshare`).
    #[error("the script contains a NUL byte")]
    NulInScript,
    /// A local resource of the worker, the host or the agent: the HTTP client, a pipe, a spool
    /// or scratch directory, starting a process.
    #[error("{what}: {source}")]
    Local {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The workspace could not be packed, unpacked or merged.
    #[error("{what}: {source}")]
    Workspace {
        what: &'static str,
        #[source]
        source: WorkspaceError,
    },
    /// The packed workspace is larger than the handoff allows.
    #[error("the workspace is over the handoff limit of {limit} bytes (--max-archive-bytes)")]
    OverHandoffLimit { limit: u64 },
    /// The session's skills (`/.agents`) pack into more than a skills archive may hold.
    #[error("the skills under /.agents are over the limit of {limit} bytes of a skills archive")]
    OverSkillsLimit { limit: u64 },
    /// A blocking pack or merge task panicked or was cancelled.
    #[error("{what}: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    /// This host cannot run a local Tier-1 (no `unshare`, no private mount namespace) or the
    /// agent was configured with what it cannot use.
    #[error("{0}")]
    Unfit(String),
    /// The operator's tier API refused, or the sandbox failed or was not ready in time.
    #[error("{0}")]
    Sandbox(String),
    /// The Tier-1 pod's agent refused, stopped answering, or answered what it must not.
    #[error("{0}")]
    Pod(String),
    /// A failure, after which ending the sandbox failed too.
    #[error("{error}; ending the sandbox also failed: {end}")]
    EndFailed {
        error: Box<Tier1Error>,
        end: TierApiError,
    },
}

impl Tier1Error {
    pub(crate) fn local(what: impl Into<String>, source: std::io::Error) -> Self {
        Tier1Error::Local {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn workspace(what: &'static str) -> impl FnOnce(WorkspaceError) -> Self {
        move |source| Tier1Error::Workspace { what, source }
    }

    pub(crate) fn task(what: &'static str) -> impl FnOnce(tokio::task::JoinError) -> Self {
        move |source| Tier1Error::Task { what, source }
    }
}

impl From<Tier1Error> for TierError {
    fn from(e: Tier1Error) -> Self {
        TierError::Failed(Box::new(e))
    }
}
