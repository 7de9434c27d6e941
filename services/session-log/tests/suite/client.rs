//! The client's retry contract, against the real server behind a scripted front that can fail
//! attempts, lose responses after commit, or stall past the timeout.

use super::common::{fast_retries, obj, TOKEN};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use kube_harness_session_log::client::NewEvent;
use kube_harness_session_log::{ClientError, ClientOptions, SessionLogClient};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
enum Step {
    /// Answer this status without forwarding.
    Fail(u16),
    /// Forward to the real server and relay its answer.
    Forward,
    /// Forward (so the event commits), then answer 502 as if the response were lost.
    ForwardThenLose,
    /// Forward, then stall past the client's timeout.
    ForwardThenStall,
}

#[derive(Clone)]
struct Front {
    script: Arc<Mutex<VecDeque<Step>>>,
    bodies: Arc<Mutex<Vec<Bytes>>>,
    upstream: String,
}

async fn front_handler(
    State(front): State<Front>,
    Path(run): Path<String>,
    body: Bytes,
) -> Response {
    front.bodies.lock().unwrap().push(body.clone());
    let step = front
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Step::Forward);
    let forward = || async {
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/runs/{run}/events", front.upstream))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        (
            StatusCode::from_u16(resp.status().as_u16()).unwrap(),
            resp.bytes().await.unwrap(),
        )
    };
    match step {
        Step::Fail(status) => (
            StatusCode::from_u16(status).unwrap(),
            r#"{"error":{"code":"scripted","message":"scripted failure"}}"#,
        )
            .into_response(),
        Step::Forward => forward().await.into_response(),
        Step::ForwardThenLose => {
            forward().await;
            StatusCode::BAD_GATEWAY.into_response()
        }
        Step::ForwardThenStall => {
            forward().await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}

struct Fixture {
    _server: super::common::TestServer,
    upstream: SessionLogClient,
    front: Front,
    client: SessionLogClient,
}

async fn fixture(script: &[Step], options: ClientOptions) -> Fixture {
    let server = super::common::memory_server().await.unwrap();
    let front = Front {
        script: Arc::new(Mutex::new(script.iter().copied().collect())),
        bodies: Arc::default(),
        upstream: server.base_url.clone(),
    };
    let router = Router::new()
        .route("/v1/runs/{run}/events", post(front_handler))
        .with_state(front.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    Fixture {
        upstream: server.client(),
        _server: server,
        front,
        client: SessionLogClient::new(format!("http://{addr}"), Some(TOKEN.into()), options)
            .unwrap(),
    }
}

impl Fixture {
    fn attempts(&self) -> Vec<Bytes> {
        self.front.bodies.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn retries_the_exact_bytes_on_5xx_and_429() {
    let f = fixture(&[Step::Fail(503), Step::Fail(429)], fast_retries()).await;
    let appended = f
        .client
        .append("r", &NewEvent::new("t", obj(json!({"b": 2, "a": 1}))))
        .await
        .unwrap();
    assert_eq!(appended.sequence, 1);
    let attempts = f.attempts();
    assert_eq!(attempts.len(), 3);
    assert!(
        attempts.iter().all(|b| *b == attempts[0]),
        "every retry sends identical bytes"
    );
    assert_eq!(f.upstream.read_all("r").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_response_lost_after_commit_is_recovered_by_the_same_key() {
    let f = fixture(&[Step::ForwardThenLose], fast_retries()).await;
    let appended = f
        .client
        .append("r", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap();
    assert_eq!(appended.sequence, 1);
    assert_eq!(f.attempts().len(), 2);
    assert_eq!(
        f.upstream.read_all("r").await.unwrap().len(),
        1,
        "committed once"
    );
}

#[tokio::test]
async fn a_timed_out_attempt_is_retried_and_stored_once() {
    let options = ClientOptions {
        timeout: Duration::from_millis(500),
        ..fast_retries()
    };
    let f = fixture(&[Step::ForwardThenStall], options).await;
    let appended = f
        .client
        .append("r", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap();
    assert_eq!(appended.sequence, 1);
    assert_eq!(f.attempts().len(), 2);
    assert_eq!(f.upstream.read_all("r").await.unwrap().len(), 1);
}

#[tokio::test]
async fn other_4xx_are_never_retried() {
    for status in [400u16, 401, 404, 409, 413] {
        let f = fixture(&[Step::Fail(status)], fast_retries()).await;
        let err = f
            .client
            .append("r", &NewEvent::new("t", obj(json!({}))))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClientError::Rejected { status: s, .. } if s == status),
            "{err}"
        );
        assert_eq!(f.attempts().len(), 1, "status {status} must not be retried");
        assert!(f.upstream.read_all("r").await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn an_append_that_never_commits_fails_its_caller() {
    let f = fixture(&[Step::Fail(503); 5], fast_retries()).await;
    let err = f
        .client
        .append("r", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Exhausted { attempts: 3, .. }),
        "{err}"
    );
    assert_eq!(f.attempts().len(), 3, "max_append_attempts defaults to 3");
    assert!(f.upstream.read_all("r").await.unwrap().is_empty());

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody =
        SessionLogClient::new(format!("http://127.0.0.1:{port}"), None, fast_retries()).unwrap();
    let err = nobody
        .append("r", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Exhausted { attempts: 3, ref last } if last.contains("transport")),
        "{err}"
    );
}

#[test]
fn defaults_match_the_protocol() {
    let o = ClientOptions::default();
    assert_eq!(o.max_append_attempts, 3);
    assert_eq!(o.timeout, Duration::from_secs(30));
}
