//! The HTTP face over loopback: bad input gets a clear JSON 4xx and writes nothing; auth, health,
//! metrics and the OpenAPI document; `ledger serve` as users start it.

use super::common::{open_store, serve, Backend, TOKEN};
use kube_harness_ledger::cli::{serve_ledger, ServeArgs};
use kube_harness_ledger::http::{LedgerClient, MAX_BODY_BYTES};
use kube_harness_ledger::ledger::{create_durable_orchestration_services, NewTask};
use kube_harness_ledger::store::MAX_DOCUMENT_BYTES;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends one raw HTTP/1.1 request (so paths reach the server exactly as written, without URL
/// normalisation) and returns (status, body).
async fn raw(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    // The server may answer (413) before reading a huge body; ignore a broken pipe then.
    let _ = stream.write_all(body).await;
    let mut resp = Vec::new();
    let _ = stream.read_to_end(&mut resp).await;
    let text = String::from_utf8_lossy(&resp).to_string();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// method, path, headers, body, expected status, expected error code
type Case = (
    &'static str,
    String,
    Vec<(&'static str, &'static str)>,
    Vec<u8>,
    u16,
    &'static str,
);

const AUTH: (&str, &str) = ("Authorization", "Bearer test-token-0123456789");
const JSON: (&str, &str) = ("Content-Type", "application/json");

/// The error code in a JSON error body (chunked encoding tolerated by scanning for the object).
fn code(body: &str) -> String {
    let start = body
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {body:?}"));
    let end = body.rfind('}').unwrap();
    let v: Value =
        serde_json::from_str(&body[start..=end]).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {body}"))
        .to_string()
}

fn json_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| e.unwrap())
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                json_files(&p)
            } else {
                usize::from(p.extension().is_some_and(|x| x == "json"))
            }
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_4xx_and_writes_nothing() {
    let fixture = open_store(Backend::File, "http_bad").await.unwrap();
    let store_dir = fixture.dir.as_ref().unwrap().path().join("store");
    let (base, server) =
        serve(create_durable_orchestration_services("ledgers", fixture.store.clone()).unwrap())
            .await;

    let task = br#"{"payload": {"x": 1}}"#;
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON],
            task.to_vec(),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, ("Authorization", "Bearer wrong")],
            task.to_vec(),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, ("Authorization", "Basic dGVzdA==")],
            task.to_vec(),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, AUTH],
            b"{\"payload\": ".to_vec(),
            400,
            "malformed-json",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, AUTH],
            b"not json".to_vec(),
            400,
            "malformed-json",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, AUTH],
            br#"{"max_attempts": "three"}"#.to_vec(),
            400,
            "invalid-input",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![AUTH],
            task.to_vec(),
            415,
            "unsupported-media-type",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, AUTH],
            br#"{"id": "..", "payload": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, AUTH],
            br#"{"id": "a/b", "payload": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, AUTH],
            br#"{"id": "a\u0000b", "payload": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "POST",
            "/v1/tasks".into(),
            vec![JSON, AUTH],
            br#"{"payload": 1, "max_attempts": 0}"#.to_vec(),
            400,
            "invalid-input",
        ),
        (
            "PUT",
            "/v1/results/..".into(),
            vec![JSON, AUTH],
            br#"{"value": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "PUT",
            "/v1/results/%2E%2E".into(),
            vec![JSON, AUTH],
            br#"{"value": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "PUT",
            "/v1/results/a%2Fb".into(),
            vec![JSON, AUTH],
            br#"{"value": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "PUT",
            "/v1/results/a%00b".into(),
            vec![JSON, AUTH],
            br#"{"value": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "PUT",
            "/v1/results/a%5Cb".into(),
            vec![JSON, AUTH],
            br#"{"value": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "PUT",
            "/v1/results/%FF".into(),
            vec![JSON, AUTH],
            br#"{"value": 1}"#.to_vec(),
            400,
            "invalid-path",
        ),
        (
            "PUT",
            "/v1/continuations/../k".into(),
            vec![JSON, AUTH],
            br#"{"payload": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "PUT",
            "/v1/continuations/s/%2E".into(),
            vec![JSON, AUTH],
            br#"{"payload": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "POST",
            "/v1/queues/..%2F..%2Fetc/messages".into(),
            vec![JSON, AUTH],
            br#"{"payload": 1}"#.to_vec(),
            400,
            "invalid-key",
        ),
        (
            "POST",
            "/v1/task-claims".into(),
            vec![JSON, AUTH],
            br#"{"owner": "w", "lease_ms": 0}"#.to_vec(),
            400,
            "invalid-input",
        ),
        (
            "POST",
            "/v1/task-claims".into(),
            vec![JSON, AUTH],
            br#"{"owner": "w"}"#.to_vec(),
            400,
            "invalid-input",
        ),
        (
            "GET",
            "/v1/due-wakeups?limit=lots".into(),
            vec![AUTH],
            vec![],
            400,
            "invalid-query",
        ),
        (
            "GET",
            "/v1/nope".into(),
            vec![AUTH],
            vec![],
            404,
            "no-route",
        ),
    ];
    for (method, path, headers, body, status, want) in &cases {
        let (got, resp) = raw(&base, method, path, headers, body).await;
        assert_eq!(
            (got, code(&resp).as_str()),
            (*status, *want),
            "{method} {path}: {resp}"
        );
    }

    // Oversized: a document just over the limit inside an accepted body, and a body over the cap.
    let doc = serde_json::to_vec(&json!({"value": "x".repeat(MAX_DOCUMENT_BYTES)})).unwrap();
    assert!(doc.len() < MAX_BODY_BYTES);
    let (s, resp) = raw(&base, "PUT", "/v1/results/big", &[JSON, AUTH], &doc).await;
    assert_eq!((s, code(&resp).as_str()), (413, "too-large"), "{resp}");
    let huge = serde_json::to_vec(&json!({"payload": "x".repeat(MAX_BODY_BYTES)})).unwrap();
    let (s, resp) = raw(&base, "POST", "/v1/tasks", &[JSON, AUTH], &huge).await;
    assert_eq!(s, 413, "{resp}");

    assert_eq!(json_files(&store_dir), 0, "bad input wrote nothing");
    let client = LedgerClient::new(&base, Some(TOKEN.into()))
        .unwrap()
        .services();
    assert!(client.tasks.list().await.unwrap().is_empty());
    assert_eq!(client.results.get("big").await.unwrap(), None);

    // The client refuses the same keys before sending, with the same error family.
    assert!(client.results.put("..", json!(1)).await.is_err());
    let wrong = LedgerClient::new(&base, Some("wrong".into()))
        .unwrap()
        .services();
    let err = wrong
        .tasks
        .create(NewTask {
            id: None,
            payload: json!(1),
            max_attempts: 1,
            delay_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), "unauthorized");
    assert_eq!(json_files(&store_dir), 0);

    // And a good request does write.
    client
        .tasks
        .create(NewTask {
            id: Some("ok".into()),
            payload: json!(1),
            max_attempts: 1,
            delay_ms: 0,
        })
        .await
        .unwrap();
    assert_eq!(json_files(&store_dir), 1);
    server.abort();
    fixture.cleanup().await;
}

#[tokio::test]
async fn health_metrics_and_openapi() {
    let fixture = open_store(Backend::Memory, "http_meta").await.unwrap();
    let (base, server) =
        serve(create_durable_orchestration_services("ledgers", fixture.store.clone()).unwrap())
            .await;
    let http = reqwest::Client::new();
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    let client = LedgerClient::new(&base, Some(TOKEN.into()))
        .unwrap()
        .services();
    client.results.put("k", json!(1)).await.unwrap();
    let _ = client.results.put("k", json!(2)).await;
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            r#"kube_harness_ledger_requests_total{operation="result_put",outcome="ok"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"kube_harness_ledger_requests_total{operation="result_put",outcome="conflict"} 1"#
        ),
        "{metrics}"
    );

    let doc: Value = http
        .get(format!("{base}/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    let expected = [
        ("/v1/tasks", "post"),
        ("/v1/tasks", "get"),
        ("/v1/tasks/{id}", "get"),
        ("/v1/task-claims", "post"),
        ("/v1/tasks/{id}/heartbeat", "post"),
        ("/v1/tasks/{id}/complete", "post"),
        ("/v1/tasks/{id}/fail", "post"),
        ("/v1/continuations/{session}/{id}", "put"),
        ("/v1/continuations/{session}/{id}", "get"),
        ("/v1/continuations/{session}/{id}/resume", "post"),
        ("/v1/continuations/{session}", "get"),
        ("/v1/wakeups", "post"),
        ("/v1/wakeups/{id}", "get"),
        ("/v1/wakeups/{id}", "delete"),
        ("/v1/due-wakeups", "get"),
        ("/v1/wakeup-claims", "post"),
        ("/v1/wakeups/{id}/complete", "post"),
        ("/v1/queues/{queue}/messages", "post"),
        ("/v1/queues/{queue}/messages", "get"),
        ("/v1/queues/{queue}/deliveries", "post"),
        ("/v1/queues/{queue}/messages/{id}/ack", "post"),
        ("/v1/queues/{queue}/dead-letters", "get"),
        ("/v1/results/{key}", "put"),
        ("/v1/results/{key}", "get"),
    ];
    for (path, method) in expected {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from OpenAPI"
        );
    }
    assert_eq!(
        paths
            .values()
            .map(|p| p.as_object().unwrap().len())
            .sum::<usize>(),
        expected.len()
    );
    for schema in [
        "TaskRecord",
        "Continuation",
        "Wakeup",
        "QueueMessage",
        "StoredResult",
        "NewTask",
    ] {
        assert!(
            doc["components"]["schemas"].get(schema).is_some(),
            "schema {schema}"
        );
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    server.abort();
}

/// `kube-harness ledger serve` as wired in the CLI: token file, file store, loopback listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_command_runs_with_token_file() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "cli-token-42\n").unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let args = ServeArgs {
        store: format!("file:{}", dir.path().join("data").display())
            .parse()
            .unwrap(),
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        token_file: Some(token_file),
        insecure_no_auth: false,
        root_dir: "ledgers".into(),
        pg_schema: "kube_harness_ledger".into(),
        connections: Default::default(),
    };
    let server = tokio::spawn(serve_ledger(args.clone()));
    let base = format!("http://127.0.0.1:{port}");
    let client = LedgerClient::new(&base, Some("cli-token-42".into()))
        .unwrap()
        .services();
    let mut ready = false;
    for _ in 0..100 {
        if reqwest::get(format!("{base}/healthz"))
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "server came up");
    client.results.put("r", json!({"ok": true})).await.unwrap();
    assert!(dir.path().join("data/ledgers/results/r.json").is_file());
    server.abort();

    // No token and no --insecure-no-auth: refused before binding.
    let err = serve_ledger(ServeArgs {
        token_file: None,
        ..args
    })
    .await
    .unwrap_err();
    assert!(err.to_string().contains("--insecure-no-auth"), "{err}");
}
