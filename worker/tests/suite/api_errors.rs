//! Bad input has defined answers: wrong or missing tokens (401), malformed or incomplete bodies
//! (400), oversized bodies (413), unknown routes (404) and methods (405): always the JSON error
//! shape, never a panic, and the server keeps serving afterwards.

use super::api_support::{raw, start, TOKEN};
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_worker::api::WorkerClient;
use reqwest::Method;

fn code(body: &serde_json::Value) -> &str {
    body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_required_except_for_health() {
    let w = start().await;
    let url = &w.base_url;
    let exec = || Some(br#"{"script":"touch /session/unauth"}"#.to_vec());
    for token in [None, Some("wrong"), Some(""), Some("worker-token-012")] {
        let (status, body) = raw(url, Method::POST, "/v1/exec", token, exec()).await;
        assert_eq!((status, code(&body)), (401, "unauthorized"), "{token:?}");
        let (status, _) = raw(url, Method::GET, "/v1/status", token, None).await;
        assert_eq!(status, 401);
        let (status, _) = raw(url, Method::POST, "/v1/turns/end", token, None).await;
        assert_eq!(status, 401);
    }
    assert!(!w.host("/session/unauth").exists(), "nothing ran");
    // The typed client reports the same.
    let bad = WorkerClient::new(url, "nope").unwrap();
    let err = bad.exec(&ExecRequest::new("true")).await.unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(401), Some("unauthorized"))
    );
    assert_eq!(bad.healthz().await.unwrap().status, "ok");
    assert_eq!(bad.readyz().await.unwrap().status, "ready");
    assert_eq!(w.client.status().await.unwrap().session, "s1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_400_with_a_reason() {
    let w = start().await;
    let cases: Vec<(&[u8], &str)> = vec![
        (b"{not json", "invalid exec request"),
        (b"", "invalid exec request"),
        (b"{}", "missing field `script`"),
        (br#"{"script": 42}"#, "invalid type"),
        (
            br#"{"script": "true", "bogus": 1}"#,
            "unknown field `bogus`",
        ),
        (br#"{"script": "true", "runId": "a/b"}"#, "runId"),
        (br#"{"script": "true", "stepKey": ""}"#, "stepKey"),
        (br#"{"script": "true", "timeoutMs": 0}"#, "timeoutMs"),
        (br#"{"script": "true", "timeoutMs": 99999999}"#, "timeoutMs"),
        (b"\xff\xfe", "invalid exec request"),
    ];
    for (body, reason) in cases {
        let (status, answer) = raw(
            &w.base_url,
            Method::POST,
            "/v1/exec",
            Some(TOKEN),
            Some(body.to_vec()),
        )
        .await;
        assert_eq!((status, code(&answer)), (400, "bad-request"), "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(reason),
            "{message:?} should mention {reason:?}"
        );
    }
    let (status, answer) = raw(
        &w.base_url,
        Method::POST,
        "/v1/turns/end",
        Some(TOKEN),
        Some(b"[1]".to_vec()),
    )
    .await;
    assert_eq!((status, code(&answer)), (400, "bad-request"));
    // Still serving.
    let r = w.client.exec(&ExecRequest::new("echo fine")).await.unwrap();
    assert_eq!(r.outcome.stdout, "fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_413_and_nothing_runs() {
    let w = start().await;
    let script = format!("touch /session/big; : {}", "x".repeat(300 * 1024));
    let body = serde_json::to_vec(&ExecRequest::new(script)).unwrap();
    let (status, answer) = raw(
        &w.base_url,
        Method::POST,
        "/v1/exec",
        Some(TOKEN),
        Some(body),
    )
    .await;
    assert_eq!(
        (status, code(&answer)),
        (413, "payload-too-large"),
        "{answer}"
    );
    assert!(!w.host("/session/big").exists());
    let err = w
        .client
        .exec(&ExecRequest::new("x".repeat(400 * 1024)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("payload-too-large"));
    // Under the body limit but over what bash can take as one argument.
    let err = w
        .client
        .exec(&ExecRequest::new(format!(
            "touch /session/long; : {}",
            "y".repeat(130 * 1024)
        )))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("payload-too-large"));
    assert!(err.to_string().contains("one argument"), "{err}");
    assert!(!w.host("/session/long").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_methods_answer_json() {
    let w = start().await;
    let (status, answer) = raw(&w.base_url, Method::GET, "/v1/nope", Some(TOKEN), None).await;
    assert_eq!((status, code(&answer)), (404, "not-found"));
    let (status, answer) = raw(&w.base_url, Method::GET, "/v1/exec", Some(TOKEN), None).await;
    assert_eq!((status, code(&answer)), (405, "method-not-allowed"));
    let (status, answer) = raw(&w.base_url, Method::GET, "/healthz", None, None).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("ok")));
    let (status, answer) = raw(&w.base_url, Method::GET, "/readyz", None, None).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("ready")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_sandbox_makes_the_worker_unready_not_absent() {
    let (tmp, mut cfg) = super::api_support::config();
    // A workspace whose /session is missing cannot be sandboxed.
    std::fs::remove_dir(tmp.path().join("session")).unwrap();
    cfg.session = "broken".into();
    let worker = kube_harness_worker::api::Worker::new(cfg, None).unwrap();
    let reason = worker.readiness().unwrap_err();
    let reason = reason.to_string();
    assert!(reason.contains("/session"), "{reason}");
    let err = worker.exec(ExecRequest::new("true")).await.unwrap_err();
    assert_eq!((err.status.as_u16(), err.code), (503, "not-ready"));
    assert!(!worker.status().ready);
}
