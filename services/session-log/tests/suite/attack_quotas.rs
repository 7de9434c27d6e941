//! Issue 30, item 3: one tenant could append without bound (70 MB/s took the session log from 19
//! to 131 MiB, and about 400 MB would have put it past its limit for good). Now each session
//! (run `NS:UID` and runs `NS:UID:…`) and each namespace has a byte quota: past it an append is
//! 413 `session-quota-exceeded` / `namespace-quota-exceeded`, nothing is written, a retry of an
//! event already stored is still answered, and other sessions and namespaces are unaffected. The
//! counts are rebuilt when the store is opened again. Every store.

use super::common::{server_with, TestServer, TOKEN};
use kube_harness_session_log::store::{FileStore, FileStoreOptions, Quotas, RealFs};
use kube_harness_session_log::{RunId, StoreError, StoreOptions};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

const SESSION: u64 = 10_000;
const NAMESPACE: u64 = 20_000;

fn options() -> StoreOptions {
    StoreOptions {
        quotas: Quotas {
            session_bytes: SESSION,
            namespace_bytes: NAMESPACE,
        },
        ..StoreOptions::default()
    }
}

/// Appends an event of about 3 KB to `run` under `key`: (status, error code or sequence).
async fn append(server: &TestServer, run: &str, key: &str) -> (StatusCode, Value) {
    let body =
        json!({"appendIdempotencyKey": key, "type": "t", "payload": {"text": "x".repeat(3000)}});
    let resp = reqwest::Client::new()
        .post(server.url(&format!("/v1/runs/{run}/events")))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    let what = if status.is_success() {
        body["sequence"].clone()
    } else {
        body["error"]["code"].clone()
    };
    (status, what)
}

async fn stored(server: &TestServer, run: &str) -> usize {
    server.client().read_all(run).await.unwrap().len()
}

async fn quotas_refuse_past_the_limit_and_spare_others(server: TestServer) {
    // Session ns:a takes 3 events of ~3 KB; the 4th would pass 10,000 bytes.
    for (i, key) in ["a1", "a2", "a3"].into_iter().enumerate() {
        assert_eq!(
            append(&server, "ns:a", key).await,
            (StatusCode::OK, json!(i + 1))
        );
    }
    let refused = append(&server, "ns:a", "a4").await;
    assert_eq!(
        refused,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!("session-quota-exceeded")
        )
    );
    // Another run of the same session counts against the same quota.
    let refused = append(&server, "ns:a:turn-2", "t1").await;
    assert_eq!(
        refused,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!("session-quota-exceeded")
        )
    );
    assert_eq!(
        stored(&server, "ns:a").await,
        3,
        "nothing written past the quota"
    );
    assert_eq!(stored(&server, "ns:a:turn-2").await, 0);
    // A retry of an event already stored is still answered.
    assert_eq!(
        append(&server, "ns:a", "a2").await,
        (StatusCode::OK, json!(2))
    );

    // Session ns:b is not affected by ns:a; the namespace (20,000) is then nearly full.
    for key in ["b1", "b2", "b3"] {
        assert_eq!(append(&server, "ns:b", key).await.0, StatusCode::OK);
    }
    let refused = append(&server, "ns:c", "c1").await;
    assert_eq!(
        refused,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!("namespace-quota-exceeded")
        )
    );
    assert_eq!(stored(&server, "ns:c").await, 0);
    // Another namespace is not affected.
    assert_eq!(
        append(&server, "other:a", "o1").await,
        (StatusCode::OK, json!(1))
    );
}

#[tokio::test]
async fn memory_quotas_refuse_past_the_limit_and_spare_others() {
    let server = server_with("memory", "", options()).await.unwrap();
    quotas_refuse_past_the_limit_and_spare_others(server).await;
}

#[tokio::test]
async fn file_quotas_refuse_past_the_limit_and_spare_others() {
    let server = server_with("file", "", options()).await.unwrap();
    quotas_refuse_past_the_limit_and_spare_others(server).await;
}

#[tokio::test]
async fn postgres_quotas_refuse_past_the_limit_and_spare_others() {
    if let Some(server) = server_with("postgres", "quotas", options()).await {
        quotas_refuse_past_the_limit_and_spare_others(server).await;
    }
}

/// The file store counts what it holds again when it opens: a session at its quota stays there.
#[tokio::test]
async fn file_quotas_are_rebuilt_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.ndjson");
    let options = || FileStoreOptions {
        quotas: options().quotas,
        ..FileStoreOptions::default()
    };
    let event = |key: &str| {
        let input = serde_json::from_value(
            json!({"appendIdempotencyKey": key, "type": "t", "payload": {"text": "x".repeat(3000)}}),
        )
        .unwrap();
        kube_harness_session_log::model::PreparedEvent::new(input, 1 << 20).unwrap()
    };
    let run = RunId::parse("ns:a").unwrap();
    {
        let store = FileStore::open(path.clone(), options(), Arc::new(RealFs))
            .await
            .unwrap();
        for key in ["a1", "a2", "a3"] {
            store.append(&run, event(key)).await.unwrap();
        }
    }
    let store = FileStore::open(path, options(), Arc::new(RealFs))
        .await
        .unwrap();
    let err = store.append(&run, event("a4")).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::QuotaExceeded {
                scope: "session",
                ..
            }
        ),
        "{err}"
    );
    let other = RunId::parse("ns:b").unwrap();
    assert!(store.append(&other, event("b1")).await.unwrap().created);
}

/// A database from before quotas (migration 1 only, events already stored): opening it fills
/// each run's byte count from its events (migration 2), so a session already at its quota is
/// refused at once, and its events stay readable.
#[tokio::test]
async fn postgres_quotas_count_events_stored_before_the_upgrade() {
    let Some(db) = kube_harness_service_kit::testing::fresh_database("quota_upgrade").await else {
        return;
    };
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE kh_session_log_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
             INSERT INTO kh_session_log_migrations (version) VALUES (1);
             CREATE TABLE kh_session_log_runs (run_id text PRIMARY KEY, last_sequence bigint NOT NULL CHECK (last_sequence >= 0));
             CREATE TABLE kh_session_log_events (
                 run_id text NOT NULL REFERENCES kh_session_log_runs (run_id),
                 sequence bigint NOT NULL CHECK (sequence >= 1),
                 idempotency_key text NOT NULL, digest text NOT NULL, event json NOT NULL,
                 PRIMARY KEY (run_id, sequence), UNIQUE (run_id, idempotency_key));
             INSERT INTO kh_session_log_runs VALUES ('ns:a', 3);",
        )
        .await
        .unwrap();
    for n in 1..=3i64 {
        let event = json!({"runId": "ns:a", "sequence": n, "appendIdempotencyKey": format!("a{n}"),
            "type": "t", "payload": {"text": "x".repeat(3000)}, "digest": "sha256:00", "recordedAtMs": 1});
        client
            .execute(
                "INSERT INTO kh_session_log_events VALUES ('ns:a', $1, $2, 'sha256:00', $3::text::json)",
                &[&n, &format!("a{n}"), &event.to_string()],
            )
            .await
            .unwrap();
    }
    let spec = format!("postgres:{}", db.url).parse().unwrap();
    let store = kube_harness_session_log::Store::open(&spec, options())
        .await
        .unwrap();
    let server = super::common::serve_store(store).await;
    let refused = append(&server, "ns:a", "a4").await;
    assert_eq!(
        refused,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!("session-quota-exceeded")
        )
    );
    assert_eq!(stored(&server, "ns:a").await, 3);
    assert_eq!(
        append(&server, "ns:b", "b1").await,
        (StatusCode::OK, json!(1))
    );
}
