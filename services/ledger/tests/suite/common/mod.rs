//! Fixtures shared by the integration tests: a store per backend (a fresh temp dir or a fresh
//! PostgreSQL database per test, so tests run in parallel), and the ledgers either in process or
//! behind the real HTTP service on a loopback port.
#![allow(dead_code)]

use kube_harness_ledger::http::{router, LedgerClient};
use kube_harness_ledger::ledger::create_durable_orchestration_services_with_clock;
use kube_harness_ledger::{
    Clock, DurableJsonStore, FileStore, MemoryStore, OrchestrationServices, PostgresStore,
    PostgresStoreOptions,
};
use kube_harness_service_kit::testing::{fresh_database, TestDatabase};
use kube_harness_service_kit::AuthConfig;
use std::sync::Arc;

pub const TOKEN: &str = "test-token-0123456789";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    File,
    Postgres,
}

/// Keeps a test's backing resources alive; drops the PostgreSQL database on `cleanup`.
pub struct Fixture {
    pub store: Arc<dyn DurableJsonStore>,
    pub dir: Option<tempfile::TempDir>,
    pub db: Option<TestDatabase>,
    pub server: Option<tokio::task::JoinHandle<()>>,
    pub base_url: Option<String>,
}

impl Fixture {
    pub async fn cleanup(self) {
        if let Some(server) = self.server {
            server.abort();
        }
        drop(self.store);
        if let Some(db) = self.db {
            db.drop_database().await;
        }
    }
}

/// A fresh store; `None` when PostgreSQL tests are explicitly skipped (KH_SKIP_POSTGRES=1).
pub async fn open_store(backend: Backend, test: &str) -> Option<Fixture> {
    Some(match backend {
        Backend::Memory => Fixture {
            store: Arc::new(MemoryStore::new()),
            dir: None,
            db: None,
            server: None,
            base_url: None,
        },
        Backend::File => {
            let dir = tempfile::tempdir().expect("temp dir");
            Fixture {
                store: Arc::new(FileStore::open(dir.path().join("store")).expect("file store")),
                dir: Some(dir),
                db: None,
                server: None,
                base_url: None,
            }
        }
        Backend::Postgres => {
            let db = fresh_database(test).await?;
            let store = PostgresStore::connect(&db.url, PostgresStoreOptions::default())
                .await
                .expect("connect to the test database");
            Fixture {
                store: Arc::new(store),
                dir: None,
                db: Some(db),
                server: None,
                base_url: None,
            }
        }
    })
}

/// Serves `services` on 127.0.0.1:<ephemeral> with bearer auth; returns the base URL and task.
pub async fn serve(services: OrchestrationServices) -> (String, tokio::task::JoinHandle<()>) {
    let app = router(
        services,
        AuthConfig::with_token(TOKEN).unwrap(),
        Default::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (base, handle)
}

/// Ledgers over `backend`, in process (`http == false`) or through the HTTP service and client.
pub async fn ledgers(
    backend: Backend,
    http: bool,
    test: &str,
    clock: Arc<dyn Clock>,
) -> Option<(OrchestrationServices, Fixture)> {
    let mut fixture = open_store(backend, test).await?;
    let direct =
        create_durable_orchestration_services_with_clock("ledgers", fixture.store.clone(), clock)
            .unwrap();
    if !http {
        return Some((direct, fixture));
    }
    let (base, handle) = serve(direct).await;
    fixture.server = Some(handle);
    fixture.base_url = Some(base.clone());
    let client = LedgerClient::new(&base, Some(TOKEN.to_string())).unwrap();
    Some((client.services(), fixture))
}
