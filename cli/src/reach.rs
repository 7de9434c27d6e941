//! How the session commands (exec, end-turn, cp, ping) reach a session's worker: `--via` and the
//! one connect they share.

use anyhow::Context;
use clap::{Args, ValueEnum};
use kube_harness_client::{Connected, Route, SessionHandle};
use kube_harness_worker::protocol::WorkerClient;
use std::path::PathBuf;
use std::time::Duration;

/// `--worker-url` with `--token-file`: a worker reached directly (a local `kube-harness worker`,
/// or one reached another way), not a session found through the API server.
#[derive(Args)]
pub struct Direct {
    /// Talk to this worker URL directly (with --token-file) instead of through the API server.
    #[arg(long, requires = "token_file")]
    worker_url: Option<String>,
    /// The worker's bearer token, for --worker-url.
    #[arg(long, requires = "worker_url")]
    token_file: Option<PathBuf>,
}

impl Direct {
    /// The worker client, when both flags are given.
    pub fn client(&self) -> anyhow::Result<Option<WorkerClient>> {
        let (Some(url), Some(token_file)) = (&self.worker_url, &self.token_file) else {
            return Ok(None);
        };
        let token = std::fs::read_to_string(token_file)
            .with_context(|| format!("reading {}", token_file.display()))?;
        Ok(Some(WorkerClient::new(url, token.trim())?))
    }
}

/// `--via`: the route to the worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// From a pod, the session's in-cluster address (status.address) when it answers; otherwise
    /// the port-forward.
    #[default]
    Auto,
    /// The in-cluster address only (from a pod that the session's spec.access admits).
    Address,
    /// A port-forward through the API server (works from anywhere the kubeconfig reaches).
    PortForward,
}

impl From<Via> for Route {
    fn from(via: Via) -> Route {
        match via {
            Via::Auto => Route::Auto,
            Via::Address => Route::Address,
            Via::PortForward => Route::PortForward,
        }
    }
}

/// The session `name` in `namespace` (default: the kubeconfig's, or the pod's own in a pod).
pub async fn handle(namespace: Option<String>, name: &str) -> anyhow::Result<SessionHandle> {
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes configuration (KUBECONFIG or in-cluster)")?;
    let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_string());
    Ok(SessionHandle::new(client, namespace, name))
}

/// The session a command reaches, and how: what exec, end-turn, commit, trace and doctor share.
#[derive(Args)]
pub struct SessionArgs {
    /// Namespace of the session (default: the kubeconfig's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Name of the HarnessSession.
    pub session: String,
    /// How long to wait for the session to be Ready (waking it if hibernated).
    #[arg(long, default_value_t = 180)]
    pub wait: u64,
    /// Route to the worker.
    #[arg(long, value_enum, default_value_t = Via::Auto)]
    pub via: Via,
}

impl SessionArgs {
    /// [`connect`] with these arguments.
    pub async fn connect(&self) -> anyhow::Result<Connected> {
        connect(self.namespace.clone(), &self.session, self.wait, self.via).await
    }
}

/// Finds the session, waits up to `wait` seconds for it to be Ready (waking it), and connects to
/// its worker by `via`.
pub async fn connect(
    namespace: Option<String>,
    session: &str,
    wait: u64,
    via: Via,
) -> anyhow::Result<Connected> {
    let handle = handle(namespace, session).await?;
    Ok(handle
        .connect_via(Duration::from_secs(wait), via.into())
        .await?)
}
