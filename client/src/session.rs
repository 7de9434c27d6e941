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
    Pending(Box<kube_harness_crds::session::HarnessSessionStatus>),
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
            Err(Wait::Pending(Box::new(status)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A session as the API server returns it, with this status.
    fn session(status: Value, suspend: bool) -> Value {
        json!({
            "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
            "metadata": {"name": "demo", "namespace": "ns", "generation": 1, "resourceVersion": "1"},
            "spec": {"suspend": suspend},
            "status": status,
        })
    }

    fn ready_condition(status: &str, reason: &str) -> Value {
        json!({"type": "Ready", "status": status, "reason": reason, "message": "m",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    /// An API server that answers the n-th GET with `answers[n]` (the last one from then on) and
    /// every PATCH (a wake) with the current answer; counts the GETs and the PATCHes.
    async fn api(answers: Vec<Value>) -> (SessionHandle, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (gets, patches) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (g, p) = (gets.clone(), patches.clone());
        let answers = Arc::new(answers);
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                let (g, p, answers) = (g.clone(), p.clone(), answers.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let n = if head.starts_with(b"PATCH") {
                        p.fetch_add(1, Ordering::SeqCst);
                        g.load(Ordering::SeqCst).saturating_sub(1)
                    } else {
                        g.fetch_add(1, Ordering::SeqCst)
                    };
                    let body = answers[n.min(answers.len() - 1)].to_string();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                });
            }
        });
        let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        let client = Client::try_from(config).unwrap();
        (SessionHandle::new(client, "ns", "demo"), gets, patches)
    }

    #[tokio::test]
    async fn ready_waits_for_the_ready_condition_and_wakes_a_hibernated_session_once() {
        let hibernated = session(
            json!({"phase": "Hibernated", "conditions": [ready_condition("False", "Hibernated")]}),
            false,
        );
        let ready = session(
            json!({"phase": "Ready", "workerPod": "demo-worker",
                   "conditions": [ready_condition("True", "WorkerReady")]}),
            false,
        );
        let (handle, gets, patches) = api(vec![hibernated.clone(), hibernated, ready]).await;
        let started = Instant::now();
        let session = handle.ready(Duration::from_secs(10)).await.unwrap();
        assert_eq!(
            session.status.unwrap().worker_pod.as_deref(),
            Some("demo-worker")
        );
        assert_eq!(gets.load(Ordering::SeqCst), 3);
        assert_eq!(patches.load(Ordering::SeqCst), 1, "woken once");
        // Two waits of the poll interval between the three looks.
        assert!(started.elapsed() >= 2 * POLL, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn ready_gives_up_at_its_timeout_naming_the_last_reason() {
        let pending = session(
            json!({"phase": "Pending", "conditions": [ready_condition("False", "WorkerStarting")]}),
            false,
        );
        let (handle, gets, _) = api(vec![pending]).await;
        let started = Instant::now();
        let err = handle.ready(Duration::from_secs(1)).await.unwrap_err();
        assert!(
            matches!(&err, ClientError::NotReady { seconds: 1, phase, reason, .. }
                if phase == "Pending" && reason == "WorkerStarting: m"),
            "{err}"
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(3),
            "{took:?}"
        );
        assert!(gets.load(Ordering::SeqCst) >= 3, "polled");
    }

    #[tokio::test]
    async fn ready_refuses_at_once_what_no_wait_would_change() {
        let suspended = session(json!({"phase": "Hibernated"}), true);
        let (handle, gets, patches) = api(vec![suspended]).await;
        let err = handle.ready(Duration::from_secs(10)).await.unwrap_err();
        assert!(matches!(err, ClientError::Suspended { .. }), "{err}");
        assert_eq!(
            (gets.load(Ordering::SeqCst), patches.load(Ordering::SeqCst)),
            (1, 0)
        );

        let quota = session(
            json!({"phase": "Pending", "conditions": [ready_condition("False", reasons::QUOTA_EXCEEDED)]}),
            false,
        );
        let (handle, gets, _) = api(vec![quota]).await;
        let err = handle.ready(Duration::from_secs(10)).await.unwrap_err();
        assert!(
            matches!(&err, ClientError::Refused { reason, .. } if reason == reasons::QUOTA_EXCEEDED),
            "{err}"
        );
        assert_eq!(gets.load(Ordering::SeqCst), 1);
    }
}
