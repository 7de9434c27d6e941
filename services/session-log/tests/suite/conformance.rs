//! One conformance suite, run over HTTP on loopback against each store: memory, file, PostgreSQL.
//!
//! PostgreSQL cases need `KH_TEST_POSTGRES_URL` (from `bash tests/services/postgres.sh start`);
//! without it they fail, unless `KH_SKIP_POSTGRES=1` asks for an explicit skip.

use super::common::{obj, TestServer, TOKEN};
use kube_harness_session_log::client::NewEvent;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::HashSet;

async fn post_raw(
    server: &TestServer,
    run_path: &str,
    body: &str,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new()
        .post(server.url(&format!("/v1/runs/{run_path}/events")))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get_raw(server: &TestServer, path_and_query: &str) -> (StatusCode, Value) {
    let resp = reqwest::Client::new()
        .get(server.url(path_and_query))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn count(server: &TestServer, run: &str) -> usize {
    server.client().read_all(run).await.unwrap().len()
}

async fn gapless_sequences_per_run(server: TestServer) {
    let client = server.client();
    for i in 1..=5u64 {
        let appended = client
            .append("run-a", &NewEvent::new("t", obj(json!({"i": i}))))
            .await
            .unwrap();
        assert_eq!(appended.sequence, i);
        assert_eq!(appended.event.sequence, i);
        assert_eq!(appended.event.run_id, "run-a");
    }
    let other = client
        .append("run-b", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap();
    assert_eq!(other.sequence, 1, "each run has its own sequence");
    let events = client.read_all("run-a").await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(events[2].payload["i"], 3);
    assert!(client.read_all("never-written").await.unwrap().is_empty());
}

async fn same_key_same_content_returns_original(server: TestServer) {
    let client = server.client();
    let first = client
        .append(
            "r",
            &NewEvent::with_key("k1", "t", obj(json!({"a": 1, "b": [1, 2]}))),
        )
        .await
        .unwrap();
    client
        .append("r", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap();
    // Same content spelled differently (key order, 1.0 vs 1): same canonical digest.
    let (status, body) = post_raw(
        &server,
        "r",
        r#"{"payload": {"b": [1.0, 2], "a": 1}, "type": "t", "appendIdempotencyKey": "k1"}"#,
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["sequence"], 1);
    let event: kube_harness_session_log::StoredEvent =
        serde_json::from_value(body["event"].clone()).unwrap();
    assert_eq!(
        event, first.event,
        "the original event, recordedAtMs included"
    );
    assert_eq!(count(&server, "r").await, 2, "a duplicate writes nothing");
}

async fn same_key_other_content_conflicts(server: TestServer) {
    let client = server.client();
    client
        .append("r", &NewEvent::with_key("k1", "t", obj(json!({"a": 1}))))
        .await
        .unwrap();
    for changed in [
        NewEvent::with_key("k1", "t", obj(json!({"a": 2}))),
        NewEvent::with_key("k1", "other.type", obj(json!({"a": 1}))),
        NewEvent {
            occurrence_id: Some("o".into()),
            ..NewEvent::with_key("k1", "t", obj(json!({"a": 1})))
        },
    ] {
        let err = client.append("r", &changed).await.unwrap_err();
        match &err {
            kube_harness_session_log::ClientError::Rejected {
                status,
                code,
                message,
            } => {
                assert_eq!(*status, 409);
                assert_eq!(code, "idempotency-conflict");
                assert!(
                    message.contains("k1") && message.contains("sequence 1"),
                    "{message}"
                );
            }
            other => panic!("expected 409, got {other:?}"),
        }
    }
    assert_eq!(count(&server, "r").await, 1);
}

async fn occurrence_id_may_repeat(server: TestServer) {
    let client = server.client();
    for ty in ["x.started", "x.completed"] {
        let mut e = NewEvent::new(ty, obj(json!({})));
        e.occurrence_id = Some("occ-1".into());
        client.append("r", &e).await.unwrap();
    }
    let events = client.read_all("r").await.unwrap();
    assert_eq!(events.len(), 2);
    assert!(events
        .iter()
        .all(|e| e.occurrence_id.as_deref() == Some("occ-1")));
}

async fn concurrent_appends_serialize(server: TestServer) {
    let client = server.client();
    let mut tasks = Vec::new();
    for t in 0..32 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..8 {
                let run = if i % 2 == 0 { "hot" } else { "cold" };
                let e = NewEvent::with_key(format!("t{t}-i{i}"), "t", obj(json!({"t": t, "i": i})));
                seqs.push((run, client.append(run, &e).await.unwrap().sequence));
            }
            seqs
        }));
    }
    let mut acked = HashSet::new();
    for t in tasks {
        for s in t.await.unwrap() {
            assert!(acked.insert(s), "sequence {s:?} acknowledged twice");
        }
    }
    for run in ["hot", "cold"] {
        let events = client.read_all(run).await.unwrap();
        assert_eq!(events.len(), 128);
        let keys: HashSet<_> = events
            .iter()
            .map(|e| e.append_idempotency_key.clone())
            .collect();
        assert_eq!(keys.len(), 128, "every key exactly once");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e.sequence, i as u64 + 1, "gapless");
        }
    }
}

async fn concurrent_same_key_appends_store_once(server: TestServer) {
    let client = server.client();
    let event = NewEvent::with_key("same", "t", obj(json!({"x": 1})));
    let mut tasks = Vec::new();
    for _ in 0..24 {
        let (client, event) = (client.clone(), event.clone());
        tasks.push(tokio::spawn(async move {
            client.append("r", &event).await.unwrap()
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    assert!(results.iter().all(|r| r.event == results[0].event));
    assert_eq!(count(&server, "r").await, 1);
}

async fn paging(server: TestServer) {
    let client = server.client();
    for i in 0..25 {
        client
            .append("r", &NewEvent::new("t", obj(json!({"i": i}))))
            .await
            .unwrap();
    }
    let p1 = client.read("r", 0, 10).await.unwrap();
    assert_eq!((p1.events.len(), p1.next), (10, Some(10)));
    let p2 = client.read("r", 10, 10).await.unwrap();
    assert_eq!(
        (p2.events.first().unwrap().sequence, p2.next),
        (11, Some(20))
    );
    let p3 = client.read("r", 20, 10).await.unwrap();
    assert_eq!((p3.events.len(), p3.next), (5, None));
    let past = client.read("r", 99, 10).await.unwrap();
    assert_eq!((past.events.len(), past.next), (0, None));
    let (status, body) = get_raw(&server, "/v1/runs/r/events").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["events"].as_array().unwrap().len(),
        25,
        "default limit covers 25"
    );
    assert_eq!(body["next"], Value::Null);
}

/// A page stops at its byte bound (4 MiB of events past the first) before its count, and `next`
/// says where to go on: a read of big events costs a bounded page, never the run (issue 30).
async fn pages_stop_at_their_byte_bound(server: TestServer) {
    let client = server.client();
    let text = "x".repeat(200 * 1024);
    for i in 0..30 {
        client
            .append(
                "big",
                &NewEvent::new("t", obj(json!({"i": i, "text": text}))),
            )
            .await
            .unwrap();
    }
    let page = client.read("big", 0, 1000).await.unwrap();
    let bytes: usize = page
        .events
        .iter()
        .map(|e| serde_json::to_vec(e).unwrap().len())
        .sum();
    assert!(
        (10..30).contains(&page.events.len()) && bytes <= 4 * 1024 * 1024,
        "{} events, {bytes} bytes in one page",
        page.events.len()
    );
    assert_eq!(page.next, Some(page.events.len() as u64));
    let all = client.read_all("big").await.unwrap();
    let sequences: Vec<u64> = all.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=30).collect::<Vec<_>>());
}

async fn bad_input_is_a_clear_4xx_and_writes_nothing(server: TestServer) {
    let ok = r#"{"appendIdempotencyKey":"k","type":"t","payload":{}}"#;
    let long_run = "x".repeat(201);
    let cases: Vec<(&str, String, Option<&str>, StatusCode, &str)> = vec![
        (
            "r",
            "{not json".into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "malformed-json",
        ),
        (
            "r",
            "".into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "malformed-json",
        ),
        (
            "r",
            r#"{"type":"t","payload":{}}"#.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-event",
        ),
        (
            "r",
            r#"{"appendIdempotencyKey":"k","type":"t"}"#.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-event",
        ),
        (
            "r",
            r#"{"appendIdempotencyKey":"k","type":"t","payload":[1]}"#.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-event",
        ),
        (
            "r",
            r#"{"appendIdempotencyKey":"","type":"t","payload":{}}"#.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-event",
        ),
        (
            "r",
            r#"{"appendIdempotencyKey":"k","type":"t","payload":{},"sequence":9}"#.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-event",
        ),
        (
            "r",
            format!(
                r#"{{"appendIdempotencyKey":"k","type":"t","payload":{{"s":"{}"}}}}"#,
                "x".repeat(300 * 1024)
            ),
            Some(TOKEN),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
        ),
        (
            "r",
            format!(
                r#"{{"appendIdempotencyKey":"k","type":"t","payload":{{"s":"{}"}}}}"#,
                "x".repeat(257 * 1024)
            ),
            Some(TOKEN),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
        ),
        (
            "a%2Fb",
            ok.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-run-id",
        ),
        (
            "..%2Fetc",
            ok.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-run-id",
        ),
        (
            "a%20b",
            ok.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-run-id",
        ),
        (
            long_run.as_str(),
            ok.into(),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid-run-id",
        ),
        (
            "r",
            ok.into(),
            Some("wrong-token"),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "r",
            ok.into(),
            None,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
    ];
    for (run, body, token, status, code) in &cases {
        let (got, answer) = post_raw(&server, run, body, *token).await;
        assert_eq!(got, *status, "run {run:.20} body {body:.80}: {answer}");
        assert_eq!(answer["error"]["code"], *code, "{answer}");
        assert!(!answer["error"]["message"].as_str().unwrap().is_empty());
        assert!(
            !answer.to_string().contains(TOKEN),
            "401 must not leak the token"
        );
    }
    for run in ["r", "a", "b", long_run.as_str()] {
        if let Ok(events) = server.client().read_all(run).await {
            assert!(
                events.is_empty(),
                "nothing may be written by refused requests ({run})"
            );
        }
    }
    // Reads refuse bad parameters and bad tokens too.
    for (q, code) in [
        ("/v1/runs/r/events?limit=0", "invalid-query"),
        ("/v1/runs/r/events?limit=1001", "invalid-query"),
        ("/v1/runs/r/events?after=-1", "invalid-query"),
        ("/v1/runs/r/events?after=x", "invalid-query"),
        ("/v1/runs/r/events?bogus=1", "invalid-query"),
        ("/v1/runs/a%2Fb/events", "invalid-run-id"),
    ] {
        let (status, body) = get_raw(&server, q).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{q}: {body}");
        assert_eq!(body["error"]["code"], code, "{q}");
    }
    let resp = reqwest::Client::new()
        .get(server.url("/v1/runs/r/events"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
}

/// A session-scoped token (minted from the server's token, as the operator does) appends to and
/// reads its own runs only: another scope's run is 403 and nothing is written there; a forged or
/// foreign token is 401.
async fn scoped_tokens_reach_their_own_runs_only(server: TestServer) {
    use kube_harness_session_log::scope;
    let token = scope::mint(TOKEN, "team-a:uid-1").unwrap();
    let scoped = kube_harness_session_log::SessionLogClient::new(
        &server.base_url,
        Some(token.clone()),
        Default::default(),
    )
    .unwrap();
    for run in ["team-a:uid-1", "team-a:uid-1:run-1"] {
        let a = scoped
            .append(run, &NewEvent::new("t", obj(json!({"n": 1}))))
            .await
            .unwrap();
        assert_eq!(a.sequence, 1);
        assert_eq!(scoped.read_all(run).await.unwrap().len(), 1);
    }
    server
        .client()
        .append("team-b:uid-2", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap();
    for run in ["team-b:uid-2", "team-a:uid-10", "team-a", "other"] {
        let (status, body) = post_raw(
            &server,
            run,
            &json!({"appendIdempotencyKey": "k", "type": "t", "payload": {}}).to_string(),
            Some(&token),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("run-out-of-scope")),
            "{run}: {body}"
        );
        let read = reqwest::Client::new()
            .get(server.url(&format!("/v1/runs/{run}/events")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), StatusCode::FORBIDDEN, "{run}");
    }
    // Nothing was written by the refused appends; the server's token still reads everything.
    assert_eq!(
        server
            .client()
            .read_all("team-b:uid-2")
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(server.client().read_all("team-a").await.unwrap().is_empty());
    assert_eq!(
        server
            .client()
            .read_all("team-a:uid-1:run-1")
            .await
            .unwrap()
            .len(),
        1
    );
    // Forged (another scope's name on this MAC) and foreign (another server's) tokens: 401.
    let forged = token.replace("team-a", "team-b");
    let foreign = scope::mint("another-server-token", "team-a:uid-1").unwrap();
    for bad in [forged.as_str(), foreign.as_str()] {
        let (status, _) = post_raw(
            &server,
            "team-a:uid-1",
            &json!({"appendIdempotencyKey": "k2", "type": "t", "payload": {}}).to_string(),
            Some(bad),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bad}");
    }
}

async fn service_routes(server: TestServer) {
    let client = server.client();
    client
        .append("r", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let health = http.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let metrics = http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("kh_session_log_appends_total{outcome=\"created\"} 1"),
        "{metrics}"
    );
    let openapi: Value = http
        .get(server.url("/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(openapi["openapi"].as_str().unwrap().starts_with("3."));
    assert!(openapi["paths"]["/v1/runs/{runId}/events"]["post"].is_object());
    assert!(openapi["paths"]["/v1/runs/{runId}/events"]["get"].is_object());
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $( #[tokio::test] async fn $case() {
                if let Some(s) = crate::suite::common::memory_server().await { super::$case(s).await }
            } )*
        }
        mod file {
            $( #[tokio::test] async fn $case() {
                if let Some(s) = crate::suite::common::file_server().await { super::$case(s).await }
            } )*
        }
        mod postgres {
            $( #[tokio::test] async fn $case() {
                if let Some(s) = crate::suite::common::postgres_server(stringify!($case)).await { super::$case(s).await }
            } )*
        }
    };
}

conformance!(
    gapless_sequences_per_run,
    same_key_same_content_returns_original,
    same_key_other_content_conflicts,
    occurrence_id_may_repeat,
    concurrent_appends_serialize,
    concurrent_same_key_appends_store_once,
    paging,
    pages_stop_at_their_byte_bound,
    bad_input_is_a_clear_4xx_and_writes_nothing,
    scoped_tokens_reach_their_own_runs_only,
    service_routes,
);
