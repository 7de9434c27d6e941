//! `kube-harness operator`: the HarnessSession and SandboxTier controllers.

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
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(kube_harness_operator::run(config))?;
    Ok(ExitCode::SUCCESS)
}
