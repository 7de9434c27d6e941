//! `kube-harness operator`: the HarnessSession, SandboxTier and HarnessTurn controllers.

use clap::Args;
use kube_harness_operator::OperatorConfig;
use std::net::SocketAddr;
use std::process::ExitCode;

#[derive(Args)]
pub struct OperatorArgs {
    /// The operator's own namespace (its Lease and the session log token Secret).
    #[arg(long, env = "KH_OPERATOR_NAMESPACE", default_value = "kube-harness")]
    namespace: String,
    /// This replica's identity in the Lease and in Events (the pod name in a Deployment).
    #[arg(
        long,
        env = "KH_OPERATOR_IDENTITY",
        default_value = "kube-harness-operator"
    )]
    identity: String,
    /// Name of the Lease that elects the active replica.
    #[arg(
        long,
        env = "KH_OPERATOR_LEASE",
        default_value = "kube-harness-operator"
    )]
    lease_name: String,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "KH_OPERATOR_LISTEN", default_value = "0.0.0.0:8000")]
    listen: SocketAddr,
    /// Session log URL given to worker pods (events of every command are appended there).
    #[arg(long, env = "KH_OPERATOR_SESSION_LOG_URL")]
    session_log_url: Option<String>,
    /// Secret in --namespace whose `token` key authenticates workers to the session log.
    #[arg(
        long,
        env = "KH_OPERATOR_SESSION_LOG_TOKEN_SECRET",
        requires = "session_log_url"
    )]
    session_log_token_secret: Option<String>,
    /// Image for worker pods when the level-0 SandboxTier names none.
    #[arg(
        long,
        env = "KH_OPERATOR_WORKER_IMAGE",
        default_value = "localhost/kube-harness/worker:dev"
    )]
    worker_image: String,
    /// Port of the worker API in worker pods.
    #[arg(long, env = "KH_OPERATOR_WORKER_PORT", default_value_t = 8080)]
    worker_port: u16,
    /// Pull policy of --worker-image where the operator names it itself (the Tier-1 pods' init
    /// container): Always, IfNotPresent or Never; unset: the cluster's default.
    #[arg(long, env = "KH_OPERATOR_WORKER_IMAGE_PULL_POLICY", value_parser = ["Always", "IfNotPresent", "Never"])]
    worker_image_pull_policy: Option<String>,
    /// Address of the tier API workers open Tier-1 sandboxes with (served by every replica).
    #[arg(
        long,
        env = "KH_OPERATOR_TIER_API_LISTEN",
        default_value = "0.0.0.0:8081"
    )]
    tier_api_listen: SocketAddr,
    /// The tier API's URL as worker pods reach it (the chart's `<release>-operator` Service on
    /// 8081); unset: workers are not told to escalate and refuse escalating commands.
    #[arg(long, env = "KH_OPERATOR_TIER_API_URL", value_name = "URL")]
    tier_api_url: Option<String>,
    /// Largest workspace archive (bytes) a prepared warm-pool pod takes; larger ones get an
    /// ordinary pod (missReason workspace_too_large).
    #[arg(long, env = "KH_OPERATOR_PREPARED_MAX_BYTES", default_value_t = kube_harness_operator::config::PREPARED_MAX_BYTES)]
    prepared_max_bytes: u64,
}

pub fn run(args: OperatorArgs) -> anyhow::Result<ExitCode> {
    let config = OperatorConfig {
        namespace: args.namespace,
        identity: args.identity,
        lease_name: args.lease_name,
        listen: args.listen,
        session_log_url: args.session_log_url,
        session_log_token_secret: args.session_log_token_secret,
        worker_image: args.worker_image,
        worker_port: args.worker_port,
        worker_image_pull_policy: args.worker_image_pull_policy,
        tier_api_listen: args.tier_api_listen,
        tier_api_url: args.tier_api_url,
        prepared_max_bytes: args.prepared_max_bytes,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(kube_harness_operator::run(config))?;
    Ok(ExitCode::SUCCESS)
}
