//! What the operator is told at start-up (flags of `kube-harness operator`).

use std::net::SocketAddr;

/// Operator settings that every reconcile reads.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// The operator's own namespace: its Lease, the session log's token Secret and pods.
    pub namespace: String,
    /// This replica's name in the Lease and in Events.
    pub identity: String,
    /// Name of the Lease that elects the active replica.
    pub lease_name: String,
    /// Address of /metrics, /healthz and /readyz.
    pub listen: SocketAddr,
    /// Session log URL handed to worker pods; none: workers keep events to themselves.
    pub session_log_url: Option<String>,
    /// Secret in `namespace` whose `token` key authenticates workers to the session log.
    pub session_log_token_secret: Option<String>,
    /// Image used for a worker when its level-0 tier does not name one.
    pub worker_image: String,
    /// Port the worker API listens on in its pod.
    pub worker_port: u16,
}

impl OperatorConfig {
    /// Settings for tests and local runs: no session log, default ports.
    pub fn for_namespace(namespace: &str) -> Self {
        OperatorConfig {
            namespace: namespace.into(),
            identity: "kube-harness-operator".into(),
            lease_name: "kube-harness-operator".into(),
            listen: ([0, 0, 0, 0], 8000).into(),
            session_log_url: None,
            session_log_token_secret: None,
            worker_image: "localhost/kube-harness/worker:dev".into(),
            worker_port: 8080,
        }
    }
}
