use thiserror::Error;

#[derive(Error, Debug)]
pub enum ClientError {
    #[error("HarnessSession {name} not found in namespace {namespace}")]
    NotFound { namespace: String, name: String },
    #[error(
        "HarnessSession {name} did not become Ready within {seconds}s (phase {phase}: {reason})"
    )]
    NotReady {
        name: String,
        seconds: u64,
        phase: String,
        reason: String,
    },
    /// The namespace does not admit the session's worker (a ResourceQuota, a LimitRange, Pod
    /// Security admission) or lacks a Persistent Dir's claim or ConfigMap: waiting would not help
    /// until someone changes the namespace.
    #[error("HarnessSession {name} cannot start its worker ({reason}): {message}")]
    Refused {
        name: String,
        reason: String,
        message: String,
    },
    /// `spec.suspend` is true: the session is hibernated on purpose, and waking it would go
    /// against its spec (and a GitOps tool that applies it).
    #[error("HarnessSession {name} is suspended (spec.suspend: true); set spec.suspend to false (in git, if a GitOps tool applies it) to run commands in it")]
    Suspended { name: String },
    /// The session's TTL passed with ttlAction Release: its worker and workspace are gone.
    #[error("HarnessSession {name} expired (lifetime.ttlSeconds passed): its worker and workspace were released; raise ttlSeconds to start it again with an empty workspace")]
    Expired { name: String },
    #[error("HarnessSession {0} has no token Secret yet")]
    NoToken(String),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("HarnessSession {0} shows no in-cluster address (status.address) yet")]
    NoAddress(String),
    #[error("port-forward: {0}")]
    Tunnel(String),
    #[error(transparent)]
    Worker(#[from] kube_harness_protocol::WorkerClientError),
}
