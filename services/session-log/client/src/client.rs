//! Rust client of `lh.remote-session.v1`.
//!
//! An append's idempotency key is fixed before the first attempt (it is part of [`NewEvent`]), and
//! the body is serialized once: every retry sends the exact same bytes, so a response lost after
//! commit is answered by the server with the original event. Retries cover what may be transient
//! (connection errors, timeouts, 429, 5xx); other 4xx are the caller's mistake and are returned at
//! once. An append that did not commit returns an error: nothing is dropped silently.

use crate::model::{StoredEvent, MAX_READ_LIMIT};
use backon::{ExponentialBuilder, Retryable};
use kube_harness_protocol::error::ErrorBody;
use rand::Rng;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;

/// Retry and timeout policy.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Attempts per append, the first included (default 3).
    pub max_append_attempts: u32,
    /// Timeout of each attempt (default 30 s).
    pub timeout: Duration,
    /// First backoff; doubles per attempt, with ±50 % jitter (default 100 ms).
    pub backoff: Duration,
    /// Backoff ceiling (default 2 s).
    pub max_backoff: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            max_append_attempts: 3,
            timeout: Duration::from_secs(30),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

/// An event to append, with its idempotency key already chosen.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewEvent {
    pub append_idempotency_key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurrence_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: String,
    pub payload: Map<String, Value>,
}

impl NewEvent {
    /// A new event with a fresh random key. Keep the value to retry it later with the same key.
    pub fn new(event_type: impl Into<String>, payload: Map<String, Value>) -> Self {
        Self::with_key(uuid::Uuid::new_v4().to_string(), event_type, payload)
    }

    pub fn with_key(
        key: impl Into<String>,
        event_type: impl Into<String>,
        payload: Map<String, Value>,
    ) -> Self {
        Self {
            append_idempotency_key: key.into(),
            occurrence_id: None,
            event_type: event_type.into(),
            payload,
        }
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused the request (4xx other than 429); retrying would not help.
    #[error("session log refused the request ({status} {code}): {message}")]
    Rejected {
        status: u16,
        code: String,
        message: String,
    },
    /// Every attempt failed with a retryable error; the append may or may not have committed
    /// (retry later with the same key to find out).
    #[error("session log call failed after {attempts} attempt(s): {last}")]
    Exhausted { attempts: u32, last: String },
    #[error("invalid session log response: {0}")]
    Decode(String),
    #[error("cannot build the request: {0}")]
    Request(String),
}

impl ClientError {
    /// The server's error code, when it answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Rejected { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// The answer to an append.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Appended {
    pub sequence: u64,
    pub event: StoredEvent,
}

/// One page of a run's events.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Page {
    pub events: Vec<StoredEvent>,
    /// Pass as `after` to get the next page; `None` at the end.
    pub next: Option<u64>,
}

#[derive(Clone)]
pub struct SessionLogClient {
    http: reqwest::Client,
    base_url: String,
    token: Option<String>,
    options: ClientOptions,
}

impl SessionLogClient {
    /// `base_url` like `http://session-log:8787`; `token` as given to the server's `--token-file`.
    pub fn new(
        base_url: impl Into<String>,
        token: Option<String>,
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .timeout(options.timeout)
            .build()
            .map_err(|e| ClientError::Request(e.to_string()))?;
        Ok(Self {
            http,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            token,
            options,
        })
    }

    /// Appends `event` to `run`, retrying per [`ClientOptions`]; returns only once committed.
    pub async fn append(&self, run: &str, event: &NewEvent) -> Result<Appended, ClientError> {
        let body = serde_json::to_vec(event).map_err(|e| ClientError::Request(e.to_string()))?;
        let url = format!("{}/v1/runs/{}/events", self.base_url, encode_segment(run));
        let attempt = || {
            let request = self
                .http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
            self.attempt(request, retryable)
        };
        self.with_retries(run, "append", attempt).await
    }

    /// One page of `run`'s events after sequence `after`.
    pub async fn read(&self, run: &str, after: u64, limit: usize) -> Result<Page, ClientError> {
        let url = format!(
            "{}/v1/runs/{}/events?after={after}&limit={limit}",
            self.base_url,
            encode_segment(run)
        );
        // A 500 on read is a damaged run (run-corrupt): retrying cannot fix it.
        let again = |s: StatusCode| retryable(s) && s != StatusCode::INTERNAL_SERVER_ERROR;
        let attempt = || self.attempt(self.http.get(&url), again);
        self.with_retries(run, "read", attempt).await
    }

    /// One request with the token: its JSON answer on 200; [`Attempt::Again`] on a transport
    /// failure or a status `again` says may pass; else the refusal, for good.
    async fn attempt<T: serde::de::DeserializeOwned>(
        &self,
        mut request: reqwest::RequestBuilder,
        again: impl Fn(StatusCode) -> bool,
    ) -> Result<T, Attempt> {
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| Attempt::Again(format!("transport: {e}")))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Attempt::Again(format!("reading response: {e}")))?;
        match status {
            StatusCode::OK => serde_json::from_slice(&bytes)
                .map_err(|e| Attempt::Done(ClientError::Decode(e.to_string()))),
            s if again(s) => Err(Attempt::Again(format!(
                "{s}: {}",
                String::from_utf8_lossy(&bytes)
            ))),
            s => Err(Attempt::Done(rejected(s, &bytes))),
        }
    }

    /// Runs `attempt` up to `max_append_attempts` times (the first included) while it fails with
    /// [`Attempt::Again`], sleeping between attempts: `backoff` doubling up to `max_backoff`, each
    /// sleep with ±50 % jitter.
    async fn with_retries<T, F, Fut>(
        &self,
        run: &str,
        what: &str,
        attempt: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Attempt>>,
    {
        let attempts = self.options.max_append_attempts.max(1);
        let policy = ExponentialBuilder::default()
            .with_min_delay(self.options.backoff)
            .with_max_delay(self.options.max_backoff)
            .with_factor(2.0)
            .with_max_times(attempts as usize - 1);
        attempt
            .retry(policy)
            .sleep(tokio::time::sleep)
            .when(|e| matches!(e, Attempt::Again(_)))
            .adjust(|_, delay| delay.map(|d| d.mul_f64(rand::thread_rng().gen_range(0.5..1.5))))
            .notify(|e, delay| {
                if let Attempt::Again(last) = e {
                    tracing::debug!(
                        run,
                        "session log {what} failed, retrying in {delay:?}: {last}"
                    );
                }
            })
            .await
            .map_err(|e| match e {
                Attempt::Again(last) => ClientError::Exhausted { attempts, last },
                Attempt::Done(e) => e,
            })
    }

    /// Every event of `run`, following pages to the end.
    pub async fn read_all(&self, run: &str) -> Result<Vec<StoredEvent>, ClientError> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let page = self.read(run, after, MAX_READ_LIMIT).await?;
            all.extend(page.events);
            match page.next {
                Some(next) => after = next,
                None => return Ok(all),
            }
        }
    }
}

/// How one attempt failed: worth another ([`ClientError::Exhausted`] with it after the last), or
/// final.
enum Attempt {
    Again(String),
    Done(ClientError),
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

fn rejected(status: StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(b) => ClientError::Rejected {
            status: status.as_u16(),
            code: b.error.code,
            message: b.error.message,
        },
        Err(_) => ClientError::Rejected {
            status: status.as_u16(),
            code: String::new(),
            message: String::from_utf8_lossy(bytes).into_owned(),
        },
    }
}

/// Percent-encodes a path segment, so a bad run id reaches the server (and is refused there)
/// instead of changing the URL's path.
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
