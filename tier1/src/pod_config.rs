//! The worker's Tier-1 pod settings and their defaults. A leaf: pod.rs (provisioning),
//! pod_shell.rs (commands) and tier_api.rs (the operator's API) all read it.

use std::path::PathBuf;
use std::time::Duration;

/// Where the worker finds the operator, and its bounds.
#[derive(Debug, Clone)]
pub struct PodTier1Config {
    /// The operator's tier API, e.g. `http://kube-harness-operator.kube-harness:8081`.
    pub tier_api_url: String,
    /// The session's namespace and name.
    pub namespace: String,
    pub session: String,
    /// The session's worker token: the bearer to the operator.
    pub token: String,
    /// How long a sandbox may take to be Ready and bound.
    pub provision_timeout: Duration,
    pub poll_interval: Duration,
    /// A command's limit when its request names none (the worker's `--command-timeout`).
    pub command_timeout: Duration,
    /// What a request to the agent may take beyond the command's own limit (transfer, the
    /// agent's kill and drain) before the pod counts as gone.
    pub request_margin: Duration,
    /// Bound on fetching the change archive at the end of the turn.
    pub changes_timeout: Duration,
    /// Largest archive either way: the workspace packed for the handoff (refused before the
    /// pod is asked for beyond it) and the change archive read back (the merge fails cleanly
    /// beyond it: nothing applied). Both are streamed through `spool_dir`, never held in memory.
    pub max_archive_bytes: u64,
    /// Largest JSON answer read from the agent or the operator (an exec answer carries up to
    /// 2 × 1 MiB of output and a state report, base64-encoded).
    pub max_answer_bytes: usize,
    /// Where archives are spooled (unnamed temporary files: nothing is left behind).
    pub spool_dir: PathBuf,
}

/// Default of [`PodTier1Config::max_archive_bytes`] (and the agent's): 1 GiB.
pub use kube_harness_protocol::worker_args::DEFAULT_MAX_ARCHIVE_BYTES;
/// Default of [`PodTier1Config::max_answer_bytes`]: 16 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 16 << 20;
/// How much of an error answer is kept for the message.
pub(crate) const ERROR_TEXT_BYTES: usize = 64 << 10;

impl PodTier1Config {
    pub fn new(tier_api_url: &str, namespace: &str, session: &str, token: &str) -> Self {
        PodTier1Config {
            tier_api_url: tier_api_url.to_string(),
            namespace: namespace.to_string(),
            session: session.to_string(),
            token: token.to_string(),
            provision_timeout: Duration::from_secs(180),
            poll_interval: Duration::from_millis(250),
            command_timeout: Duration::from_secs(60),
            request_margin: Duration::from_secs(15),
            changes_timeout: Duration::from_secs(300),
            max_archive_bytes: DEFAULT_MAX_ARCHIVE_BYTES,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            spool_dir: std::env::temp_dir(),
        }
    }
}
