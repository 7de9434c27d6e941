//! One command at a time per session: `reject` answers 409 session-busy while a command runs,
//! `queue` runs waiting commands in arrival order; SIGTERM lets the running command finish,
//! refuses new ones, and ends the turn.

use super::api_support::{config, start_with, wait_busy, TestLog};
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_runtime::event::kind;
use kube_harness_worker::api::SameSession;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_answers_409_while_a_command_runs() {
    let (tmp, mut cfg) = config();
    cfg.same_session = SameSession::Reject;
    let w = start_with(tmp, cfg).await;
    let c = w.client.clone();
    let first = tokio::spawn(async move { c.exec(&ExecRequest::new("sleep 1; echo first")).await });
    wait_busy(&w.client).await;
    let err = w
        .client
        .exec(&ExecRequest::new("touch /session/second"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("session-busy"))
    );
    assert!(!w.host("/session/second").exists());
    assert_eq!(first.await.unwrap().unwrap().outcome.stdout, "first\n");
    // Free again.
    let r = w
        .client
        .exec(&ExecRequest::new("echo third"))
        .await
        .unwrap();
    assert_eq!(r.outcome.stdout, "third\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_runs_waiting_commands_in_arrival_order() {
    let (tmp, cfg) = config();
    assert_eq!(cfg.same_session, SameSession::Queue);
    let w = start_with(tmp, cfg).await;
    let mut tasks = Vec::new();
    for (i, script) in [
        "sleep 0.6; echo a >> /session/order",
        "echo b >> /session/order",
        "echo c >> /session/order",
        "echo d >> /session/order",
    ]
    .into_iter()
    .enumerate()
    {
        let c = w.client.clone();
        tasks.push(tokio::spawn(async move {
            c.exec(&ExecRequest::new(script)).await
        }));
        if i == 0 {
            wait_busy(&w.client).await;
        } else {
            // Let this request reach the session lock before the next one is sent.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().outcome.exit_code, 0);
    }
    assert_eq!(
        std::fs::read_to_string(w.host("/session/order")).unwrap(),
        "a\nb\nc\nd\n"
    );
    assert_eq!(w.client.status().await.unwrap().commands.tier0, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_running_command_finish_then_ends_the_turn() {
    let log = TestLog::start().await;
    let (tmp, mut cfg) = config();
    cfg.session_log = Some(log.config());
    let mut w = start_with(tmp, cfg).await;
    let c = w.client.clone();
    let running = tokio::spawn(async move {
        c.exec(&ExecRequest::new(
            "sleep 0.8; echo finished > /session/done; echo ok",
        ))
        .await
    });
    wait_busy(&w.client).await;
    w.stop();
    let r = running.await.unwrap().unwrap();
    assert_eq!(
        (r.outcome.stdout.as_str(), r.outcome.exit_code),
        ("ok\n", 0)
    );
    assert!(w.host("/session/done").exists());
    tokio::time::timeout(Duration::from_secs(15), w.served.take().unwrap())
        .await
        .expect("serve returns after shutdown")
        .unwrap()
        .unwrap();
    // The turn was ended: its usage event is in the session log.
    let events = log.client().read_all("s1").await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types.last().copied(),
        Some(kind::TURN_USAGE),
        "events: {types:?}"
    );
    // And the port is closed.
    assert!(w.client.healthz().await.is_err());
}
