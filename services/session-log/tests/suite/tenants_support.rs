//! Helpers of the tenant attack tests: a session log over loopback with chosen connection limits,
//! clients that connect from an address of their own (the whole of 127.0.0.0/8 is loopback, so
//! each tenant is a distinct source), raw requests that stop half-way, and latency figures.
#![allow(dead_code)]

use super::common::TOKEN;
use kube_harness_service_kit::{bind, serve_with, AuthConfig, ConnectionLimits};
use kube_harness_session_log::scope;
use kube_harness_session_log::server::{app, ServerConfig};
use kube_harness_session_log::store::{FileStore, FileStoreOptions, RealFs};
use kube_harness_session_log::Store;
use prometheus_client::registry::Registry;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;

/// A session log served by `serve_with` on 127.0.0.1 with `limits`, over a file store.
pub struct Tenanted {
    pub addr: SocketAddr,
    pub store: Store,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Tenanted {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Tenanted {
    pub async fn start(limits: ConnectionLimits) -> Tenanted {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(
            dir.path().join("log.ndjson"),
            FileStoreOptions::default(),
            Arc::new(RealFs),
        )
        .await
        .unwrap();
        let store = Store::File(Arc::new(store));
        let router = app(
            store.clone(),
            ServerConfig::new(AuthConfig::with_token(TOKEN).unwrap()),
            Registry::default(),
        );
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(serve_with(listener, router, limits, async {
            let _ = stopped.await;
        }));
        Tenanted {
            addr,
            store,
            stop: Some(stop),
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// The loopback address of tenant `n` (127.0.0.`n`).
pub fn tenant_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

/// A scoped token for session `ns:uid`, as the operator mints them.
pub fn scoped(session: &str) -> String {
    scope::mint(TOKEN, session).unwrap()
}

/// An HTTP client whose connections come from `ip`.
pub fn client_from(ip: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A TCP connection to `addr` from `ip`.
pub async fn connect_from(ip: IpAddr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(ip, 0))?;
    socket.connect(addr).await
}

/// The head of an append to `run` with `token`, announcing a body of `length` bytes.
pub fn append_head(run: &str, token: &str, length: usize) -> String {
    format!(
        "POST /v1/runs/{run}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// A connection from `ip` that has sent the head of an append and `{` of its body.
pub async fn dripping_append(
    ip: IpAddr,
    addr: SocketAddr,
    run: &str,
    token: &str,
) -> std::io::Result<TcpStream> {
    let mut s = connect_from(ip, addr).await?;
    s.write_all(append_head(run, token, 4096).as_bytes())
        .await?;
    s.write_all(b"{").await?;
    Ok(s)
}

/// Sends one more body byte (a space: still valid JSON so far).
pub async fn drip(s: &mut TcpStream) -> bool {
    s.write_all(b" ").await.is_ok()
}

/// The status of the response `s` holds within `wait`, `None` if nothing came (or it closed).
pub async fn status_within(s: &mut TcpStream, wait: Duration) -> Option<(u16, String)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
        if got.windows(4).any(|w| w == b"\r\n\r\n") {
            // Give the (small) body a moment to follow the head.
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await
            {
                got.extend_from_slice(&buf[..n]);
            }
            break;
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, text))
}

/// p50 and p95 of `samples`, in ms.
pub fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    (at(0.5), at(0.95))
}

/// One append then one read of `run` by `client` with `token`: both latencies, or what failed.
pub async fn append_and_read(
    client: &reqwest::Client,
    base: &str,
    run: &str,
    token: &str,
    n: usize,
) -> Result<(Duration, Duration), String> {
    let started = Instant::now();
    let r = client
        .post(format!("{base}/v1/runs/{run}/events"))
        .bearer_auth(token)
        .json(&serde_json::json!({"appendIdempotencyKey": format!("k{n}"), "type": "t", "payload": {"n": n}}))
        .send()
        .await
        .map_err(|e| format!("append {n}: {e}"))?;
    if r.status() != 200 {
        return Err(format!(
            "append {n}: {} {}",
            r.status(),
            r.text().await.unwrap_or_default()
        ));
    }
    let appended = started.elapsed();
    let started = Instant::now();
    let r = client
        .get(format!("{base}/v1/runs/{run}/events?after={n}&limit=10"))
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| format!("read {n}: {e}"))?;
    if r.status() != 200 {
        return Err(format!("read {n}: {}", r.status()));
    }
    r.bytes().await.map_err(|e| format!("read {n}: {e}"))?;
    Ok((appended, started.elapsed()))
}
