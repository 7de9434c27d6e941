//! The worker's client of the operator's tier API (docs/tier1.md): open, look at and end the
//! sandbox of one turn. Every call is idempotent on the operator's side, so a failure that may
//! be passing (connection refused while a replica restarts, a 5xx) is marked retryable and the
//! caller retries within its own deadline; a definite refusal is not.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use backon::{ExponentialBuilder, Retryable};
use kube_harness_protocol::tier1::{OpenSandbox, Sandbox};
use kube_harness_service_kit::body;
use reqwest::StatusCode;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TierApiError {
    /// May pass: retry (connection errors, timeouts, 5xx other than 503).
    #[error("{0}")]
    Retryable(String),
    /// The operator does not know this turn's sandbox (GET after an operator lost track of a
    /// pending one): open it again.
    #[error("{0}")]
    NotFound(String),
    /// A definite answer not to go on: 401, 404 on open, 409, 400, or 503 (an uncertain claim,
    /// which the worker refuses rather than guess).
    #[error("{0}")]
    Refused(String),
}

/// The tier API of one session.
#[derive(Clone)]
pub struct TierApi {
    http: reqwest::Client,
    base: String,
    token: String,
    /// Largest answer read (JSON; the operator's are a few hundred bytes).
    max_answer: usize,
}

impl TierApi {
    /// `base_url` is the operator Service (`http://<release>-operator.<ns>:8081`); `token` is the
    /// session's worker token.
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        namespace: &str,
        session: &str,
        token: &str,
    ) -> Self {
        TierApi {
            http,
            base: format!(
                "{}/v1/namespaces/{namespace}/sessions/{session}/sandboxes",
                base_url.trim_end_matches('/')
            ),
            token: token.to_string(),
            max_answer: super::pod_config::DEFAULT_MAX_ANSWER_BYTES,
        }
    }

    /// Caps what is read of an answer (an answer over it is an unreadable answer).
    pub fn with_max_answer_bytes(mut self, limit: usize) -> Self {
        self.max_answer = limit;
        self
    }

    pub async fn open(
        &self,
        turn: &str,
        bytes: u64,
        timeout: Duration,
    ) -> Result<Sandbox, TierApiError> {
        let req = self.http.post(&self.base).json(&OpenSandbox {
            turn: turn.to_string(),
            workspace_bytes: bytes,
        });
        self.sandbox(req, timeout, "opening the Tier-1 sandbox", false)
            .await
    }

    pub async fn get(&self, turn: &str, timeout: Duration) -> Result<Sandbox, TierApiError> {
        let req = self.http.get(format!("{}/{turn}", self.base));
        self.sandbox(req, timeout, "looking at the Tier-1 sandbox", true)
            .await
    }

    /// Ends the sandbox; a few attempts, as a leftover pod costs until the operator's own
    /// garbage collection finds it.
    pub async fn delete(&self, turn: &str) -> Result<(), TierApiError> {
        let attempt = || async {
            let sent = self
                .http
                .delete(format!("{}/{turn}", self.base))
                .bearer_auth(&self.token)
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() || r.status() == StatusCode::NOT_FOUND => Ok(()),
                Ok(r) if r.status().is_server_error() => Err(TierApiError::Retryable(format!(
                    "{} {}",
                    r.status(),
                    error_text(r).await
                ))),
                Ok(r) => Err(TierApiError::Refused(format!(
                    "{} {}",
                    r.status(),
                    error_text(r).await
                ))),
                Err(e) => Err(TierApiError::Retryable(e.to_string())),
            }
        };
        // Four attempts, 0.5, 1 and 2 s apart.
        let policy = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(500))
            .with_factor(2.0)
            .with_max_times(3);
        attempt
            .retry(policy)
            .sleep(tokio::time::sleep)
            .when(|e| matches!(e, TierApiError::Retryable(_)))
            .await
    }

    async fn sandbox(
        &self,
        req: reqwest::RequestBuilder,
        timeout: Duration,
        what: &str,
        not_found_retries: bool,
    ) -> Result<Sandbox, TierApiError> {
        let sent = req
            .bearer_auth(&self.token)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| {
                TierApiError::Retryable(format!("{what}: the operator did not answer: {e}"))
            })?;
        let status = sent.status();
        if status.is_success() {
            return body::json::<Sandbox>(sent, self.max_answer)
                .await
                .map_err(|e| {
                    TierApiError::Retryable(format!(
                        "{what}: unreadable answer from the operator: {e}"
                    ))
                });
        }
        let text = error_text(sent).await;
        let message = format!("{what}: the operator answered {status}: {text}");
        Err(match status {
            StatusCode::SERVICE_UNAVAILABLE => TierApiError::Refused(format!(
                "{what}: the operator could not tell whether a sandbox was claimed (503: {text}); refusing rather than guessing"
            )),
            StatusCode::NOT_FOUND if not_found_retries => TierApiError::NotFound(message),
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
                TierApiError::Retryable(message)
            }
            _ => TierApiError::Refused(message),
        })
    }
}

/// The `error.message` of a JSON error body, else the body as text (shortened; no more than
/// 64 KiB of it is read).
async fn error_text(r: reqwest::Response) -> String {
    let body = body::text_prefix(r, super::pod_config::ERROR_TEXT_BYTES).await;
    let parsed: Option<serde_json::Value> = serde_json::from_str(&body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or_else(|| v["error"].as_str())
            .or_else(|| v["message"].as_str())
            .map(str::to_string)
    });
    let mut text = message.unwrap_or(body);
    if text.len() > 512 {
        let end = (0..=512)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(end);
    }
    text
}
