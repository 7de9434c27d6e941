//! Helpers shared by the integration tests: a real server on loopback over a chosen store.
#![allow(dead_code)]

use kube_harness_service_kit::testing::{fresh_database, TestDatabase};
use kube_harness_service_kit::{bind, serve, AuthConfig};
use kube_harness_session_log::server::{app, ServerConfig};
use kube_harness_session_log::store::{FileStore, FileStoreOptions, RealFs};
use kube_harness_session_log::{ClientOptions, SessionLogClient, Store, StoreOptions};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

pub const TOKEN: &str = "test-token-123";

/// A server running in this process on 127.0.0.1, stopped on drop.
pub struct TestServer {
    pub base_url: String,
    pub store: Store,
    stop: Option<oneshot::Sender<()>>,
    _dir: Option<tempfile::TempDir>,
    pub db: Option<TestDatabase>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestServer {
    pub fn client(&self) -> SessionLogClient {
        SessionLogClient::new(&self.base_url, Some(TOKEN.into()), fast_retries()).unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }
}

/// Client options for tests: the default policy, with short backoffs.
pub fn fast_retries() -> ClientOptions {
    ClientOptions {
        backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    }
}

pub async fn start_with(store: Store, config: ServerConfig) -> (String, oneshot::Sender<()>) {
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = app(store, config, Registry::default());
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, router, async {
        let _ = rx.await;
    }));
    (format!("http://{addr}"), tx)
}

fn config() -> ServerConfig {
    ServerConfig::new(AuthConfig::with_token(TOKEN).unwrap())
}

pub async fn memory_server() -> Option<TestServer> {
    let store = Store::open(&"memory".parse().unwrap(), StoreOptions::default())
        .await
        .unwrap();
    let (base_url, stop) = start_with(store.clone(), config()).await;
    Some(TestServer {
        base_url,
        store,
        stop: Some(stop),
        _dir: None,
        db: None,
    })
}

pub async fn file_server() -> Option<TestServer> {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(
        dir.path().join("sessions.ndjson"),
        FileStoreOptions::default(),
        Arc::new(RealFs),
    )
    .await
    .unwrap();
    let store = Store::File(Arc::new(store));
    let (base_url, stop) = start_with(store.clone(), config()).await;
    Some(TestServer {
        base_url,
        store,
        stop: Some(stop),
        _dir: Some(dir),
        db: None,
    })
}

pub async fn postgres_server(test: &str) -> Option<TestServer> {
    let db = fresh_database(test).await?;
    let spec = format!("postgres:{}", db.url).parse().unwrap();
    let store = Store::open(&spec, StoreOptions::default()).await.unwrap();
    let (base_url, stop) = start_with(store.clone(), config()).await;
    Some(TestServer {
        base_url,
        store,
        stop: Some(stop),
        _dir: None,
        db: Some(db),
    })
}

pub fn obj(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// A server over a `kind` store ("memory", "file" or "postgres") opened with `options`, as
/// `kube-harness session-log serve` opens it; `None` when PostgreSQL is explicitly skipped.
pub async fn server_with(kind: &str, test: &str, options: StoreOptions) -> Option<TestServer> {
    let (spec, dir, db) = match kind {
        "memory" => ("memory".to_string(), None, None),
        "file" => {
            let dir = tempfile::tempdir().unwrap();
            let spec = format!("file:{}", dir.path().join("log.ndjson").display());
            (spec, Some(dir), None)
        }
        _ => {
            let db = fresh_database(test).await?;
            (format!("postgres:{}", db.url), None, Some(db))
        }
    };
    let store = Store::open(&spec.parse().unwrap(), options).await.unwrap();
    let (base_url, stop) = start_with(store.clone(), config()).await;
    Some(TestServer {
        base_url,
        store,
        stop: Some(stop),
        _dir: dir,
        db,
    })
}

/// A server over an already opened `store`.
pub async fn serve_store(store: Store) -> TestServer {
    let (base_url, stop) = start_with(store.clone(), config()).await;
    TestServer {
        base_url,
        store,
        stop: Some(stop),
        _dir: None,
        db: None,
    }
}
