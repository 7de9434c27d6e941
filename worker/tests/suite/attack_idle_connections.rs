//! Attack: hold the worker's port with connections that never finish a request (issue 12, B13).
//!
//! The tester opened ~20,000 sockets to the worker and sent `GET /healthz HTTP/1.1\r\nHost: x\r\n`
//! on each without the blank line that ends the head, then held them: every one kept a file
//! descriptor, the worker logged "accept error: Too many open files", and `/v1/exec` and
//! `/healthz` timed out. Here the same flood (200 sockets against a limit of 64) runs against a
//! real worker on loopback (in this process) and a real Tier-1 agent, and:
//!
//! - the server closes every half-sent request after the header read timeout, answering none;
//! - while the flood holds the maximum number of connections, an authenticated exec and
//!   `/healthz` are answered at once (a new connection takes the slot of the oldest idle one);
//! - the sockets the server holds for connections never exceed the limit (+1: the one just
//!   accepted, while it makes room), counted from this process's descriptors.

use super::api_support::{config, start_with, TOKEN};
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_tier1::{agent_http, Agent, AgentConfig};
use kube_harness_worker::api::ConnectionLimits;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMIT: usize = 64;
const FLOOD: usize = 200;
const HALF_REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";

/// Opens `n` connections and sends each a request head without its end.
async fn half_requests(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut socks = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(HALF_REQUEST).await.unwrap();
        socks.push(s);
    }
    socks
}

/// How many of `socks` the server closes within `wait` (EOF or reset). The server must never
/// answer a request whose head did not end.
async fn closed_within(socks: &mut [TcpStream], wait: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + wait;
    let reads = socks.iter_mut().map(|s| async move {
        let mut buf = [0u8; 256];
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => false,
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(n)) => panic!(
                "the server answered a half-sent request: {:?}",
                String::from_utf8_lossy(&buf[..n])
            ),
        }
    });
    futures::future::join_all(reads)
        .await
        .into_iter()
        .filter(|c| *c)
        .count()
}

/// Sockets of this process whose local port is `port` and that are not listening: the
/// connections the server on `port` holds (the attacking and client sockets have other local
/// ports).
fn server_sockets(port: u16) -> usize {
    let mine: HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut count = 0;
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f[1].rsplit(':').next().unwrap();
            let listening = f[3] == "0A";
            if u16::from_str_radix(local_port, 16).unwrap() == port
                && !listening
                && mine.contains(f[9])
            {
                count += 1;
            }
        }
    }
    count
}

fn limits(header_read_timeout: Duration) -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout,
        idle_timeout: Duration::from_secs(30),
        max_connections: LIMIT,
        ..ConnectionLimits::default()
    }
}

async fn healthz(base_url: &str) -> u16 {
    reqwest::get(format!("{base_url}/healthz"))
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_sent_requests_are_closed_after_the_header_timeout_and_exec_still_runs() {
    let (tmp, mut config) = config();
    config.connections = limits(Duration::from_secs(1));
    let w = start_with(tmp, config).await;
    let addr: SocketAddr = w.base_url.trim_start_matches("http://").parse().unwrap();

    let mut socks = half_requests(addr, FLOOD).await;
    let mut most = server_sockets(addr.port());

    // During the flood: an authenticated command and the health check are answered.
    let r = w
        .client
        .exec(&ExecRequest::new("echo still-serving"))
        .await
        .unwrap();
    assert_eq!(
        (r.outcome.stdout.as_str(), r.outcome.exit_code),
        ("still-serving\n", 0)
    );
    assert_eq!(healthz(&w.base_url).await, 200);
    most = most.max(server_sockets(addr.port()));
    assert!(
        most <= LIMIT + 1,
        "the server held {most} connections with a limit of {LIMIT}"
    );

    // Every half-sent request is closed, unanswered, once the header timeout has passed.
    let closed = closed_within(&mut socks, Duration::from_secs(4)).await;
    assert_eq!(
        closed, FLOOD,
        "half-sent requests left open after the timeout"
    );
    // What is left is at most the client's own kept-alive connections.
    assert!(
        settles(|| server_sockets(addr.port()) <= 2).await,
        "{} server sockets",
        server_sockets(addr.port())
    );
}

/// Whether `check` holds within 2 s: the server closes the connections it evicts or times out
/// asynchronously, so a count taken the instant the flood ends may still include a few.
async fn settles(check: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !check() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_holding_every_connection_slot_does_not_lock_out_exec() {
    // A header timeout far longer than the test: only the connection limit acts.
    let (tmp, mut config) = config();
    config.connections = limits(Duration::from_secs(300));
    let w = start_with(tmp, config).await;
    let addr: SocketAddr = w.base_url.trim_start_matches("http://").parse().unwrap();

    let mut socks = half_requests(addr, FLOOD).await;
    assert!(
        settles(|| server_sockets(addr.port()) <= LIMIT + 1).await,
        "{} server sockets",
        server_sockets(addr.port())
    );

    // Every slot is held by a half-sent request, yet real requests are answered at once: each
    // new connection takes the slot of the oldest idle one.
    for i in 0..3 {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            w.client.exec(&ExecRequest::new(format!("echo {i}"))),
        )
        .await
        .expect("exec answered during the flood")
        .unwrap();
        assert_eq!(r.outcome.stdout, format!("{i}\n"));
        assert_eq!(healthz(&w.base_url).await, 200);
    }
    assert!(
        settles(|| server_sockets(addr.port()) <= LIMIT + 1).await,
        "{} server sockets",
        server_sockets(addr.port())
    );

    // The oldest half-sent requests made room; the newest still wait for their header timeout.
    let closed = closed_within(&mut socks, Duration::from_millis(500)).await;
    assert!(
        (FLOOD - LIMIT..FLOOD).contains(&closed),
        "{closed} of {FLOOD} closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tier1_agent_closes_half_sent_requests_and_keeps_answering() {
    let root = tempfile::tempdir().unwrap();
    for dir in ["session", "artifacts", "persistent"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    let agent = Arc::new(Agent::new(AgentConfig::new(root.path())).unwrap());
    let listener = kube_harness_worker::api::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(agent_http::serve_with(
        listener,
        agent,
        kube_harness_worker::api::AuthConfig::with_token(TOKEN).unwrap(),
        limits(Duration::from_secs(1)),
        async {
            let _ = stopped.await;
        },
    ));
    let base_url = format!("http://{addr}");

    let mut socks = half_requests(addr, FLOOD).await;
    assert_eq!(healthz(&base_url).await, 200);
    assert!(
        settles(|| server_sockets(addr.port()) <= LIMIT + 1).await,
        "{} server sockets",
        server_sockets(addr.port())
    );
    assert_eq!(
        closed_within(&mut socks, Duration::from_secs(4)).await,
        FLOOD
    );
    let _ = stop.send(());
}
