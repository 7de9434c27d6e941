//! `GET /v1/log`: a session's events read back through its worker from a REAL session log
//! (memory store, loopback): in order, page by page, by run; scoped like the worker's appends,
//! so a session never reads another's run; bad parameters 400, no session log 404, the log down
//! 503.

use super::api_support::{config, raw, start, start_with, TestLog, TOKEN};
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_runtime::event::kind;

async fn worker_with_log(log: &TestLog, scope: Option<&str>) -> super::api_support::TestWorker {
    let (tmp, mut cfg) = config();
    let mut log_config = log.config();
    log_config.run_scope = scope.map(String::from);
    cfg.session_log = Some(log_config);
    start_with(tmp, cfg).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_reads_back_in_order_page_by_page_and_by_run() {
    let log = TestLog::start().await;
    let w = worker_with_log(&log, Some("ns:uid-a")).await;
    let c = &w.client;
    c.exec(&ExecRequest::new("echo one > /session/one"))
        .await
        .unwrap();
    c.exec(&ExecRequest::new("true").step("other", "s1"))
        .await
        .unwrap();
    c.end_turn().await.unwrap();

    let page = c.log_page(None, 0, 1000).await.unwrap();
    assert_eq!(page.run, "s1");
    let kinds: Vec<&str> = page.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(&kinds[..2], [kind::COMMAND_STARTED, kind::FILE_CREATED]);
    assert!(kinds.contains(&kind::COMMAND_COMPLETED), "{kinds:?}");
    assert!(
        kinds.contains(&kind::TURN_USAGE),
        "the end of the turn: {kinds:?}"
    );
    let sequences: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());
    assert_eq!(page.next, None);
    // As trace lines: typed payloads parse.
    let line = page.events[0].trace_event("s1");
    assert_eq!((line.seq, line.session_id.as_str()), (1, "s1"));
    assert!(line.payload().is_ok(), "{line:?}");

    // Page by page: the same events, limit 1 at a time.
    let (mut after, mut paged) = (0, Vec::new());
    loop {
        let page = c.log_page(None, after, 1).await.unwrap();
        paged.extend(page.events);
        match page.next {
            Some(next) => after = next,
            None => break,
        }
    }
    let all = c.log_page(None, 0, 1000).await.unwrap().events;
    assert_eq!(paged, all);

    // Another run of this session: only its command.
    let other = c.log_page(Some("other"), 0, 1000).await.unwrap();
    assert_eq!(other.run, "other");
    assert_eq!(other.events.len(), 2, "{:?}", other.events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_never_reads_another_sessions_run() {
    let log = TestLog::start().await;
    let a = worker_with_log(&log, Some("ns:uid-a")).await;
    let b = worker_with_log(&log, Some("ns:uid-b")).await;
    b.client
        .exec(&ExecRequest::new("echo secret-of-b"))
        .await
        .unwrap();
    assert!(!log.client().read_all("ns:uid-b").await.unwrap().is_empty());
    // Whatever A names, the worker reads below its own scope.
    for run in ["ns:uid-b", "uid-b", "..", "ns"] {
        let page = a.client.log_page(Some(run), 0, 1000).await;
        match page {
            Ok(page) => assert!(page.events.is_empty(), "{run}: {:?}", page.events),
            Err(e) => assert_eq!(e.status(), Some(400), "{run}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_parameters_no_log_and_a_log_that_is_down_are_clear_errors() {
    let mut log = TestLog::start().await;
    let w = worker_with_log(&log, None).await;
    let get =
        |query: &'static str| raw(&w.base_url, reqwest::Method::GET, query, Some(TOKEN), None);
    for query in [
        "/v1/log?limit=0",
        "/v1/log?limit=1001",
        "/v1/log?limit=x",
        "/v1/log?after=-1",
        "/v1/log?run=bad%20run",
        "/v1/log?run=%FF",
        "/v1/log?page=2",
    ] {
        let (status, body) = get(query).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("bad-request")),
            "{query}: {body}"
        );
    }
    let (status, body) = raw(&w.base_url, reqwest::Method::GET, "/v1/log", None, None).await;
    assert_eq!(status, 401, "{body}");
    log.pause().await;
    let down = w.client.log_page(None, 0, 10).await.unwrap_err();
    assert_eq!(
        (down.status(), down.code()),
        (Some(503), Some("session-log-unavailable")),
        "{down}"
    );
    log.resume().await;
    assert!(w.client.log_page(None, 0, 10).await.is_ok());

    let without = start().await;
    let none = without.client.log_page(None, 0, 10).await.unwrap_err();
    assert_eq!((none.status(), none.code()), (Some(404), Some("not-found")));
}

/// Issue 31's attacker: 64 parallel `GET /v1/log` of one session slowed every other session's
/// commands through the shared session log (10 to 28 s). A worker now reads one page at a time:
/// a second read waits, and after `LOG_READ_WAIT` is answered 429. Here the log accepts
/// connections and never answers, so the first read holds the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_reads_one_page_at_a_time_and_a_waiting_read_gets_429() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            open.push(conn);
        }
    });
    let (tmp, mut cfg) = config();
    cfg.session_log = Some(kube_harness_worker::api::SessionLogConfig {
        url,
        token: Some("t".into()),
        run_scope: None,
    });
    let w = start_with(tmp, cfg).await;
    let first = {
        let c = w.client.clone();
        tokio::spawn(async move { c.log_page(None, 0, 10).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let second = w.client.log_page(None, 0, 10).await.unwrap_err();
    assert_eq!(
        (second.status(), second.code()),
        (Some(429), Some("too-many-requests")),
        "{second}"
    );
    assert!(started.elapsed() >= kube_harness_worker::api::state::LOG_READ_WAIT / 2);
    first.abort();
    held.abort();
}
