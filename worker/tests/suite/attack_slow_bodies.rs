//! Attack: slow request bodies on the routes that read one (issue 29, item 5). A token holder
//! sent `/v1/exec` bodies one byte at a time: each held its connection for as long as it liked,
//! none was ever evicted (a request whose head has arrived was never closed for room), and with
//! every slot held that way `/readyz` went unanswered for more than 130 s.
//!
//! Now every body keeps a pace (never silent for its idle time; after its grace, on average at
//! least the minimum rate), a body read whole (JSON) is complete within a deadline counted from
//! the request's first byte, both answered 408 `body-timeout`; and at the connection limit, a
//! connection still sending a body whose handler has not acted is closed to make room, so the
//! probes are answered during such a flood. Real worker, real Tier-1 agent, a real pooled worker,
//! raw sockets on loopback.

use super::api_support::{config, start_with, TOKEN};
use kube_harness_protocol::worker_api::ExecRequest;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Sends a request head declaring `declared` body bytes (and `extra` headers), then drips one
/// byte of the body every `every` from a thread of its own until the server closes or
/// `bytes` were sent. Returns the socket, to read the answer from.
fn dripping(
    addr: &str,
    head: &str,
    extra: &str,
    declared: usize,
    every: Duration,
    bytes: usize,
) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{head} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n{extra}content-length: {declared}\r\n\r\n"
    )
    .unwrap();
    let mut dripper = s.try_clone().unwrap();
    std::thread::spawn(move || {
        for _ in 0..bytes {
            if dripper.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(every);
        }
    });
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// The status and body of the answer on `s` (`0` when the server closed without answering).
fn answer(s: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|l| l.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

/// Each route that reads a JSON body: a body dripped a byte at a time is 408 `body-timeout` soon
/// after the grace period (its average is far under the minimum), and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_json_body_dripped_a_byte_at_a_time_is_408_on_every_route() {
    let (tmp, mut cfg) = config();
    cfg.connections.body.idle = Duration::from_secs(5);
    cfg.connections.body.grace = Duration::from_secs(1);
    cfg.connections.body.min_rate = 1000;
    let w = start_with(tmp, cfg).await;
    let addr = w.base_url.trim_start_matches("http://").to_string();
    let routes = [
        ("POST /v1/exec", ""),
        ("POST /v1/exec", "accept: application/x-ndjson\r\n"),
        ("POST /v1/turns/end", ""),
        ("POST /v1/persistent/commit", ""),
    ];
    let results = tokio::task::spawn_blocking(move || {
        let socks: Vec<_> = routes
            .iter()
            .map(|(head, extra)| {
                let s = dripping(&addr, head, extra, 1000, Duration::from_millis(300), 1000);
                (*head, *extra, Instant::now(), s)
            })
            .collect();
        socks
            .into_iter()
            .map(|(head, extra, started, mut s)| {
                let (status, body) = answer(&mut s);
                (head, extra, status, body, started.elapsed())
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (head, extra, status, body, took) in results {
        assert_eq!(status, 408, "{head} {extra}: {body}");
        assert!(body.contains("body-timeout"), "{head}: {body}");
        assert!(took < Duration::from_secs(4), "{head}: {took:?}");
    }
    let status = w.client.status().await.unwrap();
    assert_eq!(status.commands.tier0, 0, "nothing ran");
}

/// A JSON body that keeps the pace but never ends is 408 at the deadline, counted from the
/// request's first byte: a head trickled for 2 s leaves the body only the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_json_body_that_keeps_the_pace_but_never_ends_is_408_at_the_deadline() {
    let (tmp, mut cfg) = config();
    cfg.connections.body.idle = Duration::from_secs(5);
    cfg.connections.body.grace = Duration::from_secs(1);
    cfg.connections.body.min_rate = 10;
    cfg.connections.body.json_deadline = Duration::from_secs(3);
    let w = start_with(tmp, cfg).await;
    let addr = w.base_url.trim_start_matches("http://").to_string();
    let (status, body, took, after_head) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut s = TcpStream::connect(&addr).unwrap();
        let head = format!(
            "POST /v1/exec HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: 100000\r\n\r\n"
        );
        // The head over 2 s (within the 10 s header read timeout).
        let pause = Duration::from_millis(2000 / head.len() as u64);
        for b in head.bytes() {
            s.write_all(&[b]).unwrap();
            std::thread::sleep(pause);
        }
        let head_done = Instant::now();
        let mut dripper = s.try_clone().unwrap();
        std::thread::spawn(move || {
            // 20 bytes a second: twice the minimum rate, for longer than the deadline.
            for _ in 0..200 {
                if dripper.write_all(b" ").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let (status, body) = answer(&mut s);
        (status, body, started.elapsed(), head_done.elapsed())
    })
    .await
    .unwrap();
    assert_eq!(status, 408, "{body}");
    assert!(
        body.contains("body-timeout") && body.contains("first byte"),
        "{body}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_millis(4500),
        "{took:?}"
    );
    assert!(after_head < Duration::from_millis(2500), "{after_head:?}");
    let r = w.client.exec(&ExecRequest::new("echo fine")).await.unwrap();
    assert_eq!(r.outcome.stdout, "fine\n");
}

/// Every connection slot held by a body dripped a byte at a time (with the default pace: they
/// could go on for the whole grace period): `/readyz`, `/healthz` and an authenticated exec are
/// still answered at once, each new connection taking the slot of the dripping one that was
/// silent longest. Failed before the fix: the probes waited in the backlog for as long as the
/// drips went on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_bodies_holding_every_slot_do_not_starve_the_probes() {
    const LIMIT: usize = 8;
    let (tmp, mut cfg) = config();
    cfg.connections.max_connections = LIMIT;
    let w = start_with(tmp, cfg).await;
    let addr = w.base_url.trim_start_matches("http://").to_string();
    let drip_addr = addr.clone();
    let mut socks = tokio::task::spawn_blocking(move || {
        (0..LIMIT)
            .map(|_| {
                dripping(
                    &drip_addr,
                    "POST /v1/exec",
                    "",
                    100_000,
                    Duration::from_millis(200),
                    100_000,
                )
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // Every slot is now answering a request whose body has not arrived.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for _ in 0..3 {
        for probe in ["/readyz", "/healthz"] {
            let started = Instant::now();
            let r = http
                .get(format!("{}{probe}", w.base_url))
                .send()
                .await
                .unwrap_or_else(|e| panic!("{probe} unanswered during the flood: {e}"));
            assert_eq!(r.status().as_u16(), 200, "{probe}");
            assert!(started.elapsed() < Duration::from_secs(2), "{probe}");
        }
    }
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        w.client.exec(&ExecRequest::new("echo served")),
    )
    .await
    .expect("exec answered during the flood")
    .unwrap();
    assert_eq!(r.outcome.stdout, "served\n");
    // The slots came from dripping connections, closed unanswered.
    let closed = tokio::task::spawn_blocking(move || {
        socks
            .iter_mut()
            .map(|s| {
                s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
                let mut buf = [0u8; 64];
                matches!(s.read(&mut buf), Ok(0))
                    || matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
            })
            .filter(|c| *c)
            .count()
    })
    .await
    .unwrap();
    assert!(closed >= 1, "no dripping connection made room");
}

/// A pace for these tests: silent at most 5 s, 1000 bytes/s after the first second, JSON done
/// within 20 s.
fn quick_pace() -> kube_harness_service_kit::ConnectionLimits {
    let mut limits = kube_harness_service_kit::ConnectionLimits::default();
    limits.body.idle = Duration::from_secs(5);
    limits.body.grace = Duration::from_secs(1);
    limits.body.min_rate = 1000;
    limits.body.json_deadline = Duration::from_secs(20);
    limits
}

/// Drips a body (1000 declared, a byte every 300 ms) to each of `routes` at once; the answers.
async fn drip_all(
    addr: String,
    routes: &'static [&'static str],
) -> Vec<(&'static str, u16, String)> {
    tokio::task::spawn_blocking(move || {
        let socks: Vec<_> = routes
            .iter()
            .map(|head| {
                let s = dripping(&addr, head, "", 1000, Duration::from_millis(300), 1000);
                (*head, s)
            })
            .collect();
        socks
            .into_iter()
            .map(|(head, mut s)| {
                let (status, body) = answer(&mut s);
                (head, status, body)
            })
            .collect()
    })
    .await
    .unwrap()
}

/// The Tier-1 agent's routes keep the same pace: its exec (JSON), the workspace bind and the
/// skills (uploads). Each dripped body is 408 `body-timeout`, and the agent is still unbound
/// and ready (nothing was done).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tier1_agents_bodies_keep_the_same_pace() {
    use kube_harness_tier1::{agent_http, Agent, AgentConfig};
    let root = tempfile::tempdir().unwrap();
    for dir in ["session", "artifacts", "persistent"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    let agent = std::sync::Arc::new(Agent::new(AgentConfig::new(root.path())).unwrap());
    let listener = kube_harness_worker::api::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(agent_http::serve_with(
        listener,
        agent.clone(),
        kube_harness_worker::api::AuthConfig::with_token(TOKEN).unwrap(),
        quick_pace(),
        async {
            let _ = stopped.await;
        },
    ));
    // The skills wait for a bind in progress (409), so they come after.
    let mut answers = drip_all(addr.clone(), &["POST /v1/exec", "PUT /v1/workspace"]).await;
    answers.extend(drip_all(addr.clone(), &["PUT /v1/skills"]).await);
    for (head, status, body) in answers {
        assert_eq!(status, 408, "{head}: {body}");
        assert!(body.contains("body-timeout"), "{head}: {body}");
    }
    assert!(!agent.is_bound());
    assert!(agent.broken().is_none());
    let _ = stop.send(());
}

/// A pooled worker's adoption keeps the pace too: a dripped `POST /v1/adopt` is 408 before the
/// adoption is bound (the attempt spends the pooled worker, as every failed adoption does).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dripped_adoption_is_408_and_binds_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = kube_harness_worker::api::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let bound = std::sync::Arc::new(AtomicBool::new(false));
    let seen = bound.clone();
    let bind: kube_harness_worker::api::adopt::Bind = Box::new(move |_| {
        seen.store(true, Ordering::SeqCst);
        Err("not in this test".into())
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(kube_harness_worker::api::adopt::serve_pooled(
        listener,
        kube_harness_worker::api::AuthConfig::with_token(TOKEN).unwrap(),
        quick_pace(),
        bind,
        async {
            let _ = stopped.await;
        },
    ));
    let answers = drip_all(addr, &["POST /v1/adopt"]).await;
    let (_, status, body) = &answers[0];
    assert_eq!(*status, 408, "{body}");
    assert!(body.contains("body-timeout"), "{body}");
    assert!(!bound.load(Ordering::SeqCst), "the adoption was bound");
    let _ = stop.send(());
}
