//! Issue 30, item 1, on the ledger: a body dripped a byte at a time held its connection for as
//! long as the client liked (axum's extractor has no pace). Now every body is read by the kit's
//! paced reader: 408 `body-timeout` with nothing done, and a wrong token is answered on the head,
//! before any body byte. The pace is shortened for the test; the rule is the kit's.

use super::common::{open_store, Backend, TOKEN};
use kube_harness_ledger::http::router;
use kube_harness_ledger::ledger::create_durable_orchestration_services;
use kube_harness_service_kit::{bind, serve_with, AuthConfig, ConnectionLimits};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends the head of `POST /v1/tasks` with `token` and `{`, then a space every 300 ms until an
/// answer comes (or 8 s pass); the answer's status line and how long it took.
async fn drip_task(addr: std::net::SocketAddr, token: &str) -> (String, Duration) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!("POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n{{");
    s.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    while started.elapsed() < Duration::from_secs(8) {
        match tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                return (text, started.elapsed());
            }
            Ok(_) => break,
            Err(_) => {
                if s.write_all(b" ").await.is_err() {
                    break;
                }
            }
        }
    }
    (String::new(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripping_body_is_refused_for_its_pace_and_a_wrong_token_on_its_head() {
    let fixture = open_store(Backend::Memory, "slow").await.unwrap();
    let services = create_durable_orchestration_services("ledgers", fixture.store.clone()).unwrap();
    let app = router(
        services.clone(),
        AuthConfig::with_token(TOKEN).unwrap(),
        Default::default(),
    );
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut limits = ConnectionLimits::default();
    limits.body.idle = Duration::from_secs(2);
    limits.body.grace = Duration::from_secs(1);
    limits.body.min_rate = 1000;
    limits.body.json_deadline = Duration::from_secs(4);
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_with(listener, app, limits, async {
        let _ = stopped.await;
    }));

    let (answer, took) = drip_task(addr, "wrong-token").await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(took < Duration::from_millis(600), "401 after {took:?}");

    let (answer, took) = drip_task(addr, TOKEN).await;
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "{answer:?} after {took:?}"
    );
    assert!(answer.contains("body-timeout"), "{answer}");
    assert!(services.tasks.list().await.unwrap().is_empty());
    fixture.cleanup().await;
}
