//! Talking to a pod the operator has just changed: connect fast, and try a new connection when
//! one does not connect at once.
//!
//! Measured (issue 31, the warm start's tail): 1 to 3 of 20 warm starts took about 1,050 ms, and
//! the operator's debug log put the whole second in one request to the adopted pod, the adoption
//! itself (`POST /v1/adopt`, 1,007 ms) or the confirming status read, each on a new connection
//! made right after the pod was relabelled for its session. A second is the kernel's first SYN
//! retransmission: the first SYN was dropped while the network policy enforcer caught up with the
//! pod's new labels. A connection that has not connected after [`CONNECT_TRY`] is given up and a
//! new one tried at once; nothing was sent on it, so this is safe for any request.

use backon::{ConstantBuilder, Retryable};
use std::future::Future;
use std::time::Duration;

/// How long one connection attempt to a pod may take: a pod answers a SYN in well under a
/// millisecond on its node and a few across nodes, so this only cuts short a dropped SYN's
/// one-second retransmission wait.
pub const CONNECT_TRY: Duration = Duration::from_millis(150);

/// A reqwest client for pods: [`CONNECT_TRY`] per connection attempt, `timeout` per request.
pub fn client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TRY)
        .timeout(timeout)
        .build()
}

/// `call` again while it fails to connect (`connecting(&error)`), up to `within` in all.
pub async fn retry_connect<T, E, Fut>(
    within: Duration,
    call: impl FnMut() -> Fut,
    connecting: impl Fn(&E) -> bool,
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + within;
    call.retry(
        ConstantBuilder::default()
            .with_delay(Duration::from_millis(10))
            .without_max_times(),
    )
    .sleep(tokio::time::sleep)
    .when(connecting)
    .adjust(move |_, delay| delay.filter(|_| tokio::time::Instant::now() < deadline))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port nothing listens on refuses at once: the calls are repeated until `within`, then
    /// the last error comes back; an answer ends the retries.
    #[tokio::test]
    async fn connect_failures_are_retried_within_the_bound_and_answers_are_not() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let http = client(Duration::from_secs(2)).unwrap();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let started = std::time::Instant::now();
        let result = retry_connect(
            Duration::from_millis(300),
            || {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                http.get(format!("http://{addr}/")).send()
            },
            reqwest::Error::is_connect,
        )
        .await;
        assert!(result.unwrap_err().is_connect());
        assert!(calls.load(std::sync::atomic::Ordering::SeqCst) > 2);
        assert!(started.elapsed() < Duration::from_secs(2));

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut head = [0u8; 1024];
            let _ = conn.read(&mut head).await;
            let _ = conn
                .write_all(b"HTTP/1.1 500 x\r\ncontent-length: 0\r\n\r\n")
                .await;
            let _ = conn.read(&mut head).await;
        });
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let answer = retry_connect(
            Duration::from_secs(2),
            || {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                http.get(format!("http://{addr}/")).send()
            },
            reqwest::Error::is_connect,
        )
        .await
        .unwrap();
        assert_eq!(answer.status(), 500);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
