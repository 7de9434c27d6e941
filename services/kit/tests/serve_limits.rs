//! The connection bounds of `serve_with`, over real TCP on loopback: which timeout applies when
//! (the header read timeout to a head in progress, the idle timeout to a kept-alive connection
//! between requests, neither to a request being answered), that a connection answering a
//! request is never closed to make room, and what shutdown does to each kind of connection.

use axum::routing::{get, post};
use axum::Router;
use kube_harness_service_kit::body::{read_request, BodyHead};
use kube_harness_service_kit::{serve_with, ConnectionLimits};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const REQUEST: &[u8] = b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<std::io::Result<()>>,
}

async fn start(header: Duration, idle: Duration, max: usize) -> Server {
    let router = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(2500)).await;
                "slow"
            }),
        )
        .route("/echo", post(echo));
    let listener = kube_harness_service_kit::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let limits = ConnectionLimits {
        header_read_timeout: header,
        idle_timeout: idle,
        max_connections: max,
        ..ConnectionLimits::default()
    };
    let served = tokio::spawn(serve_with(listener, router, limits, async {
        let _ = stopped.await;
    }));
    Server {
        addr,
        stop: Some(stop),
        served,
    }
}

/// `POST /echo`: reads the body whole through the kit, then takes 2.5 s to answer its length.
async fn echo(head: BodyHead, body: axum::body::Body) -> String {
    match read_request(&head, body, 1 << 20).await {
        Ok(bytes) => {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            format!("got {}", bytes.len())
        }
        Err(e) => e.to_string(),
    }
}

/// A connection that has sent `POST /echo` declaring `declared` bytes, and `sent` of them.
async fn posting(addr: SocketAddr, declared: usize, sent: usize) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!("POST /echo HTTP/1.1\r\nHost: x\r\ncontent-length: {declared}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&vec![b'x'; sent]).await.unwrap();
    s
}

/// Reads one response (whole, these are small) and returns it.
async fn response(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("a response")
            .unwrap();
        assert!(n > 0, "closed before the response: {got:?}");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap()
                .parse()
                .unwrap();
            if body.len() >= length {
                return text;
            }
        }
    }
}

/// Waits up to `wait` for the server to close `s`; how long that took. Nothing may arrive.
async fn closed_after(s: &mut TcpStream, wait: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 256];
    match tokio::time::timeout(wait, s.read(&mut buf)).await {
        Err(_) => None,
        Ok(Ok(0)) | Ok(Err(_)) => Some(started.elapsed()),
        Ok(Ok(n)) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&buf[..n])),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_is_closed_after_the_idle_timeout() {
    let server = start(Duration::from_secs(30), Duration::from_secs(1), 16).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(REQUEST).await.unwrap();
    assert!(response(&mut s).await.ends_with("\r\n\r\nok"));
    let after = closed_after(&mut s, Duration::from_secs(5))
        .await
        .expect("closed by the idle timeout");
    assert!(
        after >= Duration::from_millis(900),
        "closed too early: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_time_between_requests_does_not_count_against_the_header_timeout() {
    let server = start(Duration::from_secs(1), Duration::from_secs(30), 16).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(REQUEST).await.unwrap();
    response(&mut s).await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    s.write_all(REQUEST).await.unwrap();
    assert!(response(&mut s).await.ends_with("\r\n\r\nok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_head_is_closed_at_the_header_timeout() {
    let server = start(Duration::from_secs(1), Duration::from_secs(30), 16).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    // One byte every 100 ms: always active, never done.
    let head = b"GET /ok HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for byte in head {
        if s.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let closed = closed_after(&mut s, Duration::from_secs(1))
        .await
        .map(|_| started.elapsed())
        .expect("closed");
    assert!(
        (Duration::from_millis(900)..Duration::from_millis(2500)).contains(&closed),
        "{closed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_being_answered_outlives_both_timeouts() {
    let server = start(Duration::from_millis(500), Duration::from_millis(500), 16).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(response(&mut s).await.ends_with("\r\n\r\nslow"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_connections_answering_requests_are_never_closed_to_make_room() {
    let server = start(Duration::from_secs(30), Duration::from_secs(30), 2).await;
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        busy.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A third connection waits for a slot; the two slow requests are both answered.
    let started = Instant::now();
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    third.write_all(REQUEST).await.unwrap();
    assert!(response(&mut third).await.ends_with("ok"));
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "the third waited for a slot ({:?})",
        started.elapsed()
    );
    for s in &mut busy {
        assert!(response(s).await.ends_with("slow"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_waiting_connections_at_once_and_finishes_requests() {
    let mut server = start(Duration::from_secs(30), Duration::from_secs(30), 16).await;
    let mut half = TcpStream::connect(server.addr).await.unwrap();
    half.write_all(b"GET /ok HTTP/1.1\r\n").await.unwrap();
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    idle.write_all(REQUEST).await.unwrap();
    response(&mut idle).await;
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let _ = server.stop.take().unwrap().send(());
    let wait = Duration::from_millis(1000);
    assert!(closed_after(&mut half, wait).await.is_some());
    assert!(closed_after(&mut idle, wait).await.is_some());
    assert!(response(&mut slow).await.ends_with("slow"));
    tokio::time::timeout(Duration::from_secs(5), server.served)
        .await
        .expect("serve returns once the last request is answered")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(server.addr).await.is_err());
}

#[test]
fn zero_limits_are_refused() {
    let mut limits = ConnectionLimits::default();
    assert!(limits.validate().is_ok());
    limits.max_connections = 0;
    assert!(limits.validate().is_err());
    let limits = ConnectionLimits {
        idle_timeout: Duration::ZERO,
        ..ConnectionLimits::default()
    };
    assert!(limits.validate().is_err());
}

/// Issue 29: at the limit, a connection still sending its request body (no handler has acted on
/// it) makes room for a new one when no connection is idle or half-sent; connections whose
/// bodies are in, their handlers working, are never closed. Before, a connection was never
/// closed once its head had arrived, so dripped bodies held every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_a_connection_still_sending_its_body_makes_room() {
    let server = start(Duration::from_secs(30), Duration::from_secs(30), 3).await;
    let mut working = [
        posting(server.addr, 10, 10).await,
        posting(server.addr, 10, 10).await,
    ];
    let mut sending = posting(server.addr, 1000, 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut new = TcpStream::connect(server.addr).await.unwrap();
    new.write_all(REQUEST).await.unwrap();
    assert!(response(&mut new).await.ends_with("ok"));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(
        closed_after(&mut sending, Duration::from_secs(1))
            .await
            .is_some(),
        "the connection still sending its body made room"
    );
    for s in &mut working {
        assert!(response(s).await.ends_with("got 10"));
    }
}

/// A connection with no request in flight (a half-sent head) makes room before one still sending
/// a body, which then completes and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_make_room_before_a_body_in_progress() {
    let server = start(Duration::from_secs(30), Duration::from_secs(30), 3).await;
    let mut working = posting(server.addr, 10, 10).await;
    let mut sending = posting(server.addr, 20, 5).await;
    let mut half = TcpStream::connect(server.addr).await.unwrap();
    half.write_all(b"GET /ok HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut new = TcpStream::connect(server.addr).await.unwrap();
    new.write_all(REQUEST).await.unwrap();
    assert!(response(&mut new).await.ends_with("ok"));
    assert!(closed_after(&mut half, Duration::from_secs(1))
        .await
        .is_some());
    sending.write_all(&[b'x'; 15]).await.unwrap();
    assert!(response(&mut sending).await.ends_with("got 20"));
    assert!(response(&mut working).await.ends_with("got 10"));
}

/// Issue 30: an address holds at most its share of connections. Past it, its own idle or
/// half-sent connection makes room; when all of its connections are answering requests, the new
/// one is answered 429 with `Retry-After` and closed, while another address is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_past_its_share_is_refused_while_another_is_served() {
    let router = Router::new().route("/ok", get(|| async { "ok" })).route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            "slow"
        }),
    );
    let listener = kube_harness_service_kit::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = ConnectionLimits {
        max_connections: 64,
        max_connections_per_source: Some(2),
        ..ConnectionLimits::default()
    };
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve_with(listener, router, limits, async {
        let _ = stopped.await;
    }));
    let from = |last: u8| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::from(([127, 0, 0, last], 0)))
            .unwrap();
        socket.connect(addr).await.unwrap()
    };
    // A half-sent connection gives way to the address's next one.
    let mut half = from(2).await;
    half.write_all(b"GET /ok HTTP/1.1\r\n").await.unwrap();
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut s = from(2).await;
        s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        busy.push(s);
    }
    assert!(closed_after(&mut half, Duration::from_secs(2))
        .await
        .is_some());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Both of its connections are answering: the third is refused.
    let mut third = from(2).await;
    third.write_all(REQUEST).await.unwrap();
    let refused = response(&mut third).await;
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    assert!(refused.contains("retry-after: 1"), "{refused}");
    assert!(refused.contains("too-many-connections"), "{refused}");
    // Another address is served at once.
    let mut other = from(3).await;
    other.write_all(REQUEST).await.unwrap();
    assert!(response(&mut other).await.ends_with("\r\n\r\nok"));
    for mut s in busy {
        assert!(response(&mut s).await.ends_with("\r\n\r\nslow"));
    }
}

/// Opens a connection that asks for `/big` (1 MiB) `requests` times in one write and never reads
/// an answer: its writes block once the socket's buffers are full.
async fn not_reading(addr: SocketAddr, requests: usize) -> TcpStream {
    // A small receive buffer, so the server's writes block soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let ask = b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n".repeat(requests);
    s.write_all(&ask).await.unwrap();
    s
}

/// Issue 30: a tenant's pods pipelined requests and never read the answers; every connection
/// stayed busy, none made room, and the liveness probe could not connect. Now a connection whose
/// writes are blocked makes room at the limit, and is closed after the send timeout anyway.
#[tokio::test]
async fn a_client_that_does_not_read_its_answers_makes_room_and_is_closed_after_the_send_timeout() {
    let router = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route("/big", get(|| async { vec![b'x'; 1 << 20] }));
    let listener = kube_harness_service_kit::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = ConnectionLimits {
        max_connections: 4,
        max_connections_per_source: Some(4),
        send_timeout: Duration::from_secs(3),
        ..ConnectionLimits::default()
    };
    tokio::spawn(serve_with(listener, router, limits, std::future::pending()));
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(not_reading(addr, 8).await);
    }
    // Let their writes block.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let mut probe = TcpStream::connect(addr).await.unwrap();
    probe.write_all(REQUEST).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(2), response(&mut probe))
        .await
        .expect("a probe at the limit is answered while the others hold unread answers");
    assert!(answer.ends_with("ok"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The rest are closed once the send timeout has passed: reading then drains what was
    // buffered, and ends (reading earlier would unblock them).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut closed = 0;
    for mut s in held {
        let drained = tokio::time::timeout(Duration::from_secs(8), async {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        if drained.is_ok() {
            closed += 1;
        }
    }
    assert_eq!(closed, 4, "every connection that did not read was closed");
}
