//! Attack: hold the session log's port with connections that never finish a request (issue 12,
//! B13). The session log is shared by every session's worker, and a worker that cannot append
//! fails closed (503 session-log-unavailable), so a flood of half-sent requests that exhausts its
//! descriptors denies service to every session.
//!
//! The real server binary runs as a child process with `--max-connections 64`; the test opens 200
//! connections that each send `GET /healthz HTTP/1.1\r\nHost: x\r\n` and stop, and checks that the
//! server's open descriptors stay within the limit, that authenticated appends and `/healthz` are
//! answered while the flood holds every slot, and that every half-sent request is closed, never
//! answered, after the header read timeout.

use kube_harness_session_log::client::NewEvent;
use kube_harness_session_log::{ClientOptions, SessionLogClient};
use serde_json::json;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SERVER: &str = env!("CARGO_BIN_EXE_kh-session-log-test-server");
const TOKEN: &str = "attack-token-0123";
const LIMIT: usize = 64;
const FLOOD: usize = 200;
const HALF_REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";

struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    async fn start(header_read_timeout_secs: u64) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, TOKEN).unwrap();
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = Command::new(SERVER)
            .args([
                "--store",
                "memory",
                "--listen",
                &addr.to_string(),
                "--token-file",
            ])
            .arg(&token_file)
            .args(["--max-connections", &LIMIT.to_string()])
            .args([
                "--header-read-timeout",
                &header_read_timeout_secs.to_string(),
            ])
            .env("KUBE_HARNESS_LOG", "error")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let server = Server {
            child,
            addr,
            _dir: dir,
        };
        for _ in 0..200 {
            if server.healthz().await == Some(200) {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the session log did not come up");
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn healthz(&self) -> Option<u16> {
        let r = reqwest::get(format!("{}/healthz", self.url())).await.ok()?;
        Some(r.status().as_u16())
    }

    /// The server's open descriptors.
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }

    fn client(&self) -> SessionLogClient {
        SessionLogClient::new(
            self.url(),
            Some(TOKEN.into()),
            ClientOptions {
                timeout: Duration::from_secs(10),
                ..ClientOptions::default()
            },
        )
        .unwrap()
    }
}

async fn half_requests(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut socks = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(HALF_REQUEST).await.unwrap();
        socks.push(s);
    }
    socks
}

/// How many of `socks` the server closes within `wait`; it must answer none of them.
async fn closed_within(socks: Vec<TcpStream>, wait: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + wait;
    let reads: Vec<_> = socks
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut buf = [0u8; 256];
                match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
                    Err(_) => false,
                    Ok(Ok(0)) | Ok(Err(_)) => true,
                    Ok(Ok(n)) => panic!(
                        "the server answered a half-sent request: {:?}",
                        String::from_utf8_lossy(&buf[..n])
                    ),
                }
            })
        })
        .collect();
    let mut closed = 0;
    for read in reads {
        closed += usize::from(read.await.unwrap());
    }
    closed
}

async fn append(client: &SessionLogClient, n: u32) {
    let event = NewEvent::with_key(
        format!("k{n}"),
        "test.event",
        json!({"n": n}).as_object().unwrap().clone(),
    );
    let appended = tokio::time::timeout(Duration::from_secs(10), client.append("run-a", &event))
        .await
        .expect("the append is answered during the flood")
        .unwrap();
    assert_eq!(appended.event.append_idempotency_key, format!("k{n}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed_after_the_header_timeout_and_appends_go_on() {
    let server = Server::start(1).await;
    let client = server.client();
    append(&client, 0).await;
    let baseline = server.fds();

    let socks = half_requests(server.addr, FLOOD).await;
    let mut most = server.fds();
    append(&client, 1).await;
    assert_eq!(server.healthz().await, Some(200));
    most = most.max(server.fds());
    // The client's own connection is one of the LIMIT; +1 for the one being accepted.
    assert!(
        most <= baseline + LIMIT + 1,
        "the server held {most} descriptors ({baseline} before the flood, limit {LIMIT})"
    );

    assert_eq!(
        closed_within(socks, Duration::from_secs(4)).await,
        FLOOD,
        "half-sent requests left open after the header timeout"
    );
    assert!(
        settles(|| server.fds() <= baseline + 2).await,
        "{} fds",
        server.fds()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_holding_every_connection_slot_does_not_lock_out_appends() {
    // A header timeout far longer than the test: only the connection limit acts.
    let server = Server::start(300).await;
    let client = server.client();
    append(&client, 0).await;
    let baseline = server.fds();

    let socks = half_requests(server.addr, FLOOD).await;
    for n in 1..4 {
        append(&client, n).await;
        assert_eq!(server.healthz().await, Some(200));
    }
    assert!(
        settles(|| server.fds() <= baseline + LIMIT + 1).await,
        "{} fds",
        server.fds()
    );
    let closed = closed_within(socks, Duration::from_millis(500)).await;
    assert!(
        (FLOOD - LIMIT..FLOOD).contains(&closed),
        "{closed} of {FLOOD} closed"
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
