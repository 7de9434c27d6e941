//! Finding a session, waking it, waiting for Ready and connecting to its worker.

use crate::error::ClientError;
use crate::tunnel::Tunnel;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use kube_harness_crds::condition::{is_true, types};
use kube_harness_crds::session::WAKE_ANNOTATION;
use kube_harness_crds::{HarnessSession, Phase};
use kube_harness_protocol::WorkerClient;
use serde_json::json;
use std::time::{Duration, Instant};

/// Port of the worker API in the worker pod.
pub const WORKER_PORT: u16 = 8080;

/// A named session in a namespace.
pub struct SessionHandle {
    client: Client,
    namespace: String,
    name: String,
}

/// A worker reachable through a tunnel; keep it alive while using `worker`.
pub struct Connected {
    pub worker: WorkerClient,
    pub session: HarnessSession,
    _tunnel: Tunnel,
}

impl SessionHandle {
    pub fn new(client: Client, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        SessionHandle {
            client,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn api(&self) -> Api<HarnessSession> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub async fn get(&self) -> Result<HarnessSession, ClientError> {
        self.api()
            .get_opt(&self.name)
            .await?
            .ok_or_else(|| ClientError::NotFound {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            })
    }

    /// Asks the operator to wake a hibernated session.
    pub async fn wake(&self) -> Result<(), ClientError> {
        let patch =
            json!({"metadata": {"annotations": {WAKE_ANNOTATION: Timestamp::now().to_string()}}});
        self.api()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Waits until the session is Ready, waking it first if it is hibernated.
    pub async fn ready(&self, timeout: Duration) -> Result<HarnessSession, ClientError> {
        let deadline = Instant::now() + timeout;
        let mut woke = false;
        loop {
            let session = self.get().await?;
            let status = session.status.clone().unwrap_or_default();
            if is_true(&status.conditions, types::READY) && status.worker_pod.is_some() {
                return Ok(session);
            }
            if status.phase == Some(Phase::Hibernated) && !woke {
                self.wake().await?;
                woke = true;
            }
            if Instant::now() >= deadline {
                let reason = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == types::READY)
                    .map(|c| format!("{}: {}", c.reason, c.message))
                    .unwrap_or_else(|| "no Ready condition yet".into());
                return Err(ClientError::NotReady {
                    name: self.name.clone(),
                    seconds: timeout.as_secs(),
                    phase: status.phase.map_or("none", |p| p.as_str()).into(),
                    reason,
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The worker API token from the session's Secret.
    pub async fn token(&self, session: &HarnessSession) -> Result<String, ClientError> {
        let secret_name = session
            .status
            .as_ref()
            .and_then(|s| s.token_secret.clone())
            .ok_or_else(|| ClientError::NoToken(self.name.clone()))?;
        let secret = Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .get(&secret_name)
            .await?;
        secret
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .ok_or_else(|| ClientError::NoToken(self.name.clone()))
    }

    /// Ready, token, tunnel: a worker client for the session.
    pub async fn connect(&self, timeout: Duration) -> Result<Connected, ClientError> {
        let session = self.ready(timeout).await?;
        let token = self.token(&session).await?;
        let pod = session
            .status
            .as_ref()
            .and_then(|s| s.worker_pod.clone())
            .ok_or_else(|| ClientError::Tunnel("the session has no worker pod".into()))?;
        let tunnel = Tunnel::open(
            Api::<Pod>::namespaced(self.client.clone(), &self.namespace),
            &pod,
            WORKER_PORT,
        )
        .await?;
        let worker = WorkerClient::new(format!("http://{}", tunnel.local), token)?;
        Ok(Connected {
            worker,
            session,
            _tunnel: tunnel,
        })
    }
}
