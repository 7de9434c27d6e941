//! Finding a session, waking it, waiting for Ready and connecting to its worker.

use crate::error::ClientError;
use crate::tunnel::Tunnel;
use backon::{ConstantBuilder, Retryable};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use kube_harness_crds::condition::{is_true, reasons, types};
use kube_harness_crds::session::WAKE_ANNOTATION;
use kube_harness_crds::{HarnessSession, Phase};
use kube_harness_protocol::WorkerClient;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a missing Persistent Dir source must stay reported before [`SessionHandle::ready`]
/// gives up: longer than the operator's 10 s recheck, so a source created just before the call
/// is seen.
pub const SOURCE_RECHECK: Duration = Duration::from_secs(12);

/// How often [`SessionHandle::ready`] looks at the session.
const POLL: Duration = Duration::from_millis(250);

/// Why one look at the session did not end [`SessionHandle::ready`]: not Ready yet (with the
/// status seen, for the timeout's message), or an answer no wait would change.
enum Wait {
    Pending(kube_harness_crds::session::HarnessSessionStatus),
    Failed(ClientError),
}

/// Port of the worker API in the worker pod.
pub const WORKER_PORT: u16 = 8080;

/// A named session in a namespace.
pub struct SessionHandle {
    client: Client,
    namespace: String,
    name: String,
}

/// A connected worker; keep this alive while using `worker` (it holds the tunnel, if any).
pub struct Connected {
    pub worker: WorkerClient,
    pub session: HarnessSession,
    /// The route taken: [`Route::Address`] or [`Route::PortForward`].
    pub route: Route,
    _tunnel: Option<Tunnel>,
}

/// How a client reaches the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Route {
    /// In a pod, the session's in-cluster address when it answers within [`PROBE_TIMEOUT`];
    /// anywhere else (or when it does not answer) the port-forward.
    #[default]
    Auto,
    /// The in-cluster address (`status.address`), directly; only from inside the cluster.
    Address,
    /// The API server's port-forward to the worker pod; works from anywhere the kubeconfig
    /// reaches.
    PortForward,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Auto => "auto",
            Route::Address => "address",
            Route::PortForward => "port-forward",
        }
    }
}

/// How long [`Route::Auto`] waits for a TCP connection to the in-cluster address before it falls
/// back to the port-forward (a NetworkPolicy that does not admit the pod drops the SYN, so a
/// refusal shows only as silence).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether this process runs in a Kubernetes pod (the in-cluster Service environment and a
/// service account token), where cluster DNS names resolve.
pub fn in_pod() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
}

/// `host:port` of an `http://host:port` address.
fn authority(address: &str) -> &str {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// Whether a TCP connection to the address opens within [`PROBE_TIMEOUT`].
async fn answers(address: &str) -> bool {
    matches!(
        tokio::time::timeout(
            PROBE_TIMEOUT,
            tokio::net::TcpStream::connect(authority(address))
        )
        .await,
        Ok(Ok(_))
    )
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

    /// Waits until the session is Ready, waking it first if it is hibernated. A suspended
    /// session (`spec.suspend`) is [`ClientError::Suspended`] and an expired one
    /// [`ClientError::Expired`] at once: no wait would help.
    ///
    /// It polls `get` every 250 ms (backon) rather than watching (`kube::runtime::wait::
    /// await_condition`): a pod that reaches its session at the address needs only `get` on
    /// harnesssessions (docs/operator.md), and a watch would need `list` and `watch` too.
    pub async fn ready(&self, timeout: Duration) -> Result<HarnessSession, ClientError> {
        let deadline = Instant::now() + timeout;
        let woke = AtomicBool::new(false);
        // When this call first saw a missing Persistent Dir source: the operator checks again
        // every 10 s, so a source created a moment ago may still be reported missing.
        let missing_since: Mutex<Option<Instant>> = Mutex::new(None);
        let look = || async {
            let session = self.get().await.map_err(Wait::Failed)?;
            let status = session.status.clone().unwrap_or_default();
            if session.spec.suspend {
                // Waking it would go against its spec: the operator would suspend it again.
                return Err(Wait::Failed(ClientError::Suspended {
                    name: self.name.clone(),
                }));
            }
            if status.phase == Some(Phase::Expired)
                && status.observed_generation == session.metadata.generation
            {
                return Err(Wait::Failed(ClientError::Expired {
                    name: self.name.clone(),
                }));
            }
            if is_true(&status.conditions, types::READY) && status.worker_pod.is_some() {
                return Ok(session);
            }
            let not_ready = status
                .conditions
                .iter()
                .find(|c| c.type_ == types::READY && c.status == "False");
            let missing =
                not_ready.is_some_and(|c| c.reason == reasons::PERSISTENT_DIR_SOURCE_MISSING);
            let since = {
                let mut since = missing_since.lock().unwrap_or_else(|e| e.into_inner());
                *since = if missing {
                    since.or(Some(Instant::now()))
                } else {
                    None
                };
                *since
            };
            if let Some(refused) = not_ready.filter(|c| {
                c.reason == reasons::QUOTA_EXCEEDED
                    || c.reason == reasons::ADMISSION_REFUSED
                    || since.is_some_and(|t| t.elapsed() >= SOURCE_RECHECK)
            }) {
                return Err(Wait::Failed(ClientError::Refused {
                    name: self.name.clone(),
                    reason: refused.reason.clone(),
                    message: refused.message.clone(),
                }));
            }
            if status.phase == Some(Phase::Hibernated) && !woke.load(Ordering::Relaxed) {
                self.wake().await.map_err(Wait::Failed)?;
                woke.store(true, Ordering::Relaxed);
            }
            Err(Wait::Pending(status))
        };
        let polled = look
            .retry(
                ConstantBuilder::default()
                    .with_delay(POLL)
                    .without_max_times(),
            )
            .sleep(tokio::time::sleep)
            .when(|e| matches!(e, Wait::Pending(_)))
            .adjust(|_, delay| delay.filter(|_| Instant::now() < deadline))
            .await;
        polled.map_err(|e| match e {
            Wait::Failed(e) => e,
            Wait::Pending(status) => {
                let reason = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == types::READY)
                    .map(|c| format!("{}: {}", c.reason, c.message))
                    .unwrap_or_else(|| "no Ready condition yet".into());
                ClientError::NotReady {
                    name: self.name.clone(),
                    seconds: timeout.as_secs(),
                    phase: status.phase.map_or("none", |p| p.as_str()).into(),
                    reason,
                }
            }
        })
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

    /// Ready, token, route: a worker client for the session, by [`Route::Auto`].
    pub async fn connect(&self, timeout: Duration) -> Result<Connected, ClientError> {
        self.connect_via(timeout, Route::Auto).await
    }

    /// Ready, token, then the worker by `route`.
    pub async fn connect_via(
        &self,
        timeout: Duration,
        route: Route,
    ) -> Result<Connected, ClientError> {
        let session = self.ready(timeout).await?;
        let token = self.token(&session).await?;
        let address = session.status.as_ref().and_then(|s| s.address.clone());
        let direct = match (route, address) {
            (Route::PortForward, _) => None,
            (Route::Address, Some(a)) => Some(a),
            (Route::Address, None) => return Err(ClientError::NoAddress(self.name.clone())),
            (Route::Auto, Some(a)) if in_pod() => {
                if answers(&a).await {
                    Some(a)
                } else {
                    tracing::warn!(address = %a, "the session's in-cluster address does not answer (is this pod admitted by its spec.access?); using the port-forward");
                    None
                }
            }
            (Route::Auto, _) => None,
        };
        if let Some(address) = direct {
            return Ok(Connected {
                worker: WorkerClient::new(address, token)?,
                session,
                route: Route::Address,
                _tunnel: None,
            });
        }
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
            route: Route::PortForward,
            _tunnel: Some(tunnel),
        })
    }
}
