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
    /// Pull policy of the worker image where the operator names it itself (the Tier-1 init
    /// container that copies the agent binary); none: the cluster default.
    pub worker_image_pull_policy: Option<String>,
    /// Address of the tier API (docs/tier1.md), served by every replica.
    pub tier_api_listen: SocketAddr,
    /// URL of the tier API as worker pods reach it (the chart's `<release>-operator` Service);
    /// none: workers are not told to escalate and refuse escalating commands.
    pub tier_api_url: Option<String>,
    /// Largest workspace archive (bytes) a prepared warm-pool pod takes.
    pub prepared_max_bytes: u64,
}

/// Default of [`OperatorConfig::prepared_max_bytes`]: 128 KiB.
pub const PREPARED_MAX_BYTES: u64 = 128 * 1024;

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
            worker_image_pull_policy: None,
            tier_api_listen: ([0, 0, 0, 0], 8081).into(),
            tier_api_url: None,
            prepared_max_bytes: PREPARED_MAX_BYTES,
        }
    }
}
