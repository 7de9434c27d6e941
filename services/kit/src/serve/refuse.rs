//! Refusing a connection from an address that holds its share and has none to give up (all of
//! its connections are answering requests): a canned 429 with `Retry-After`, so that its client
//! knows to come back, then the connection is closed. Off the accept loop, and bounded: at most
//! [`MAX_LINGERING`] refusals at once, each at most [`LINGER`] long; past that, the connection is
//! closed unanswered.

use crate::clients::RETRY_AFTER_SECS;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Refusals answered at once; more are closed unanswered (a flood of new connections costs no
/// more descriptors than this).
pub(super) const MAX_LINGERING: usize = 64;
/// How long a refusal waits to write its answer and read what the client sent meanwhile
/// (closing over unread bytes would reset the connection before the client reads the 429).
pub(super) const LINGER: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct Refusals {
    lingering: Arc<AtomicUsize>,
}

impl Refusals {
    pub(super) fn refuse(&self, mut stream: TcpStream, source: IpAddr) {
        if self.lingering.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
            self.lingering.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let lingering = self.lingering.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(LINGER, answer(&mut stream, source)).await;
            lingering.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

async fn answer(stream: &mut TcpStream, source: IpAddr) {
    let body = format!(
        "{{\"error\":{{\"code\":\"too-many-connections\",\"message\":\"{source} holds its share of this server's connections (--max-connections-per-source), all answering requests; retry after {RETRY_AFTER_SECS} s\"}}}}"
    );
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: {RETRY_AFTER_SECS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    if stream.write_all(head.as_bytes()).await.is_err()
        || stream.write_all(body.as_bytes()).await.is_err()
        || stream.shutdown().await.is_err()
    {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut left: usize = 64 << 10;
    while left > 0 {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}
