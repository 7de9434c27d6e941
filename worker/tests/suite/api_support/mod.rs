//! A real worker server on 127.0.0.1 over a temporary workspace, and a real session log server
//! (memory store) in the same process, for the API tests. Everything talks HTTP over loopback.
#![allow(dead_code)]

use kube_harness_service_kit::AuthConfig;
use kube_harness_session_log::server::{app, ServerConfig};
use kube_harness_session_log::{ClientOptions, SessionLogClient, Store, StoreOptions};
use kube_harness_worker::api::{self, SessionLogConfig, Worker, WorkerClient, WorkerConfig};
use prometheus_client::registry::Registry;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const TOKEN: &str = "worker-token-0123";
pub const LOG_TOKEN: &str = "log-token-4567";

pub struct TestWorker {
    pub base_url: String,
    pub client: WorkerClient,
    /// The workspace root: `session/`, `artifacts/`, `persistent/`, `.agents/` below it.
    pub root: PathBuf,
    pub worker: Arc<Worker>,
    stop: Option<oneshot::Sender<()>>,
    pub served: Option<JoinHandle<std::io::Result<()>>>,
    _tmp: tempfile::TempDir,
}

impl TestWorker {
    /// The host path of a harness path under the workspace (`/session/a` → `<root>/session/a`).
    pub fn host(&self, harness: &str) -> PathBuf {
        self.root.join(harness.trim_start_matches('/'))
    }

    /// Sends SIGTERM's equivalent: the shutdown future completes.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for TestWorker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fresh workspace with the canonical folders, and the default config over it.
pub fn config() -> (tempfile::TempDir, WorkerConfig) {
    let tmp = tempfile::tempdir().unwrap();
    for dir in ["session", "artifacts", "persistent", ".agents/skills"] {
        std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
    }
    let mut config = WorkerConfig::new("s1", tmp.path());
    config.shutdown_grace = Duration::from_secs(10);
    (tmp, config)
}

pub async fn start() -> TestWorker {
    let (tmp, config) = config();
    start_with(tmp, config).await
}

pub async fn start_with(tmp: tempfile::TempDir, config: WorkerConfig) -> TestWorker {
    start_with_tier(tmp, config, None).await
}

/// As [`start_with`], with `next` as the escalation target.
pub async fn start_with_tier(
    tmp: tempfile::TempDir,
    config: WorkerConfig,
    next: Option<Arc<dyn kube_harness_runtime::NextTier>>,
) -> TestWorker {
    let worker = Arc::new(Worker::new(config, next).unwrap());
    worker
        .readiness()
        .expect("the Tier-0 sandbox is usable here (tests run as root)");
    let listener = api::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let served = tokio::spawn(api::serve(
        listener,
        worker.clone(),
        AuthConfig::with_token(TOKEN).unwrap(),
        async {
            let _ = rx.await;
        },
    ));
    TestWorker {
        client: WorkerClient::new(&base_url, TOKEN).unwrap(),
        base_url,
        root: tmp.path().to_path_buf(),
        worker,
        stop: Some(tx),
        served: Some(served),
        _tmp: tmp,
    }
}

/// A session log server with the memory store, stopped on drop; it can be stopped and started
/// again on the same port over the same store (an outage).
pub struct TestLog {
    pub base_url: String,
    addr: std::net::SocketAddr,
    store: Store,
    /// The server's payload limit (its default when `None`).
    max_payload_bytes: Option<usize>,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<std::io::Result<()>>>,
}

impl Drop for TestLog {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestLog {
    pub async fn start() -> TestLog {
        Self::start_limited(None).await
    }

    /// A log that refuses (413) events whose payload is over `max_payload_bytes`.
    pub async fn start_limited(max_payload_bytes: Option<usize>) -> TestLog {
        let store = Store::open(&"memory".parse().unwrap(), StoreOptions::default())
            .await
            .unwrap();
        let mut log = TestLog {
            base_url: String::new(),
            addr: "127.0.0.1:0".parse().unwrap(),
            store,
            max_payload_bytes,
            stop: None,
            served: None,
        };
        log.serve().await;
        log
    }

    async fn serve(&mut self) {
        let listener = kube_harness_service_kit::bind(self.addr).await.unwrap();
        self.addr = listener.local_addr().unwrap();
        self.base_url = format!("http://{}", self.addr);
        let mut config = ServerConfig::new(AuthConfig::with_token(LOG_TOKEN).unwrap());
        if let Some(max) = self.max_payload_bytes {
            config.max_payload_bytes = max;
        }
        let router = app(self.store.clone(), config, Registry::default());
        let (tx, rx) = oneshot::channel::<()>();
        self.served = Some(tokio::spawn(kube_harness_service_kit::serve(
            listener,
            router,
            async {
                let _ = rx.await;
            },
        )));
        self.stop = Some(tx);
    }

    /// Stops serving (the port refuses connections) until [`TestLog::resume`].
    pub async fn pause(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.unwrap().unwrap();
        }
    }

    pub async fn resume(&mut self) {
        self.serve().await;
    }

    pub fn config(&self) -> SessionLogConfig {
        SessionLogConfig {
            url: self.base_url.clone(),
            token: Some(LOG_TOKEN.into()),
            run_scope: None,
        }
    }

    pub fn client(&self) -> SessionLogClient {
        SessionLogClient::new(
            &self.base_url,
            Some(LOG_TOKEN.into()),
            ClientOptions {
                backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(50),
                ..ClientOptions::default()
            },
        )
        .unwrap()
    }
}

/// Raw HTTP with a chosen method, path, token and body, for the bad-input tests.
pub async fn raw(
    base_url: &str,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Vec<u8>>,
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new().request(method, format!("{base_url}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("non-JSON answer ({status}): {e}: {bytes:?}"));
    (status, json)
}

/// Waits until the worker reports a command running.
pub async fn wait_busy(client: &WorkerClient) {
    for _ in 0..500 {
        if client.status().await.unwrap().busy {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the worker never became busy");
}
