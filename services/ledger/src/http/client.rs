//! Rust client of the ledger service. It implements the same five ledger traits as the durable
//! ledgers, so a harness process swaps `create_durable_orchestration_services(...)` for
//! `LedgerClient::new(...).services()` and nothing else changes.

use super::api::*;
use crate::key::validate_segment;
use crate::ledger::*;
use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct LedgerClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// Percent-encodes a path segment (everything but unreserved characters).
fn enc(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Ids are validated before they are put in a URL: `..` would be normalised away by the URL
/// parser and address another route instead of being refused.
fn seg(segment: &str) -> LedgerResult<String> {
    validate_segment(segment)?;
    Ok(enc(segment))
}

impl LedgerClient {
    /// `base` like `http://127.0.0.1:8080`; `token` is the bearer token (None for an
    /// `--insecure-no-auth` server).
    pub fn new(base: &str, token: Option<String>) -> LedgerResult<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| LedgerError::Transport(e.to_string()))?;
        Ok(LedgerClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            token,
        })
    }

    /// The client as the ledger contract.
    pub fn services(self) -> OrchestrationServices {
        let c = Arc::new(self);
        OrchestrationServices {
            tasks: c.clone(),
            continuations: c.clone(),
            wakeups: c.clone(),
            queues: c.clone(),
            results: c,
        }
    }

    async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> LedgerResult<(StatusCode, T)> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| LedgerError::Transport(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| LedgerError::Transport(e.to_string()))?;
        if status.is_success() {
            let value = serde_json::from_slice(&bytes)
                .map_err(|e| LedgerError::Transport(format!("bad response body: {e}")))?;
            return Ok((status, value));
        }
        match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => Err(LedgerError::from_wire(status.as_u16(), body)),
            Err(_) => Err(LedgerError::Transport(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ))),
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> LedgerResult<T> {
        Ok(self.call::<(), T>(Method::GET, path, None).await?.1)
    }

    /// GET that maps 404 to `None`.
    async fn get_opt<T: DeserializeOwned>(&self, path: &str) -> LedgerResult<Option<T>> {
        match self.get(path).await {
            Ok(v) => Ok(Some(v)),
            Err(LedgerError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> LedgerResult<T> {
        Ok(self.call(method, path, Some(body)).await?.1)
    }
}

#[async_trait]
impl TaskLedger for LedgerClient {
    async fn create(&self, new: NewTask) -> LedgerResult<TaskRecord> {
        if let Some(id) = &new.id {
            validate_segment(id)?;
        }
        self.send(Method::POST, "/v1/tasks", &new).await
    }
    async fn get(&self, id: &str) -> LedgerResult<Option<TaskRecord>> {
        self.get_opt(&format!("/v1/tasks/{}", seg(id)?)).await
    }
    async fn list(&self) -> LedgerResult<Vec<TaskRecord>> {
        LedgerClient::get(self, "/v1/tasks").await
    }
    async fn claim(&self, owner: &str, lease_ms: u64) -> LedgerResult<Option<TaskRecord>> {
        let req = ClaimRequest {
            owner: owner.to_string(),
            lease_ms,
        };
        let resp: TaskClaimResponse = self.send(Method::POST, "/v1/task-claims", &req).await?;
        Ok(resp.task)
    }
    async fn heartbeat(&self, id: &str, token: &str, lease_ms: u64) -> LedgerResult<TaskRecord> {
        let req = HeartbeatRequest {
            token: token.to_string(),
            lease_ms,
        };
        self.send(
            Method::POST,
            &format!("/v1/tasks/{}/heartbeat", seg(id)?),
            &req,
        )
        .await
    }
    async fn complete(&self, id: &str, token: &str, result: Value) -> LedgerResult<TaskRecord> {
        let req = CompleteRequest {
            token: token.to_string(),
            result,
        };
        self.send(
            Method::POST,
            &format!("/v1/tasks/{}/complete", seg(id)?),
            &req,
        )
        .await
    }
    async fn fail(
        &self,
        id: &str,
        token: &str,
        error: &str,
        retry_after_ms: Option<u64>,
    ) -> LedgerResult<TaskRecord> {
        let req = FailRequest {
            token: token.to_string(),
            error: error.to_string(),
            retry_after_ms,
        };
        self.send(Method::POST, &format!("/v1/tasks/{}/fail", seg(id)?), &req)
            .await
    }
}

#[async_trait]
impl ContinuationLedger for LedgerClient {
    async fn park(&self, session_id: &str, id: &str, payload: Value) -> LedgerResult<Continuation> {
        let path = format!("/v1/continuations/{}/{}", seg(session_id)?, seg(id)?);
        self.send(Method::PUT, &path, &ParkRequest { payload })
            .await
    }
    async fn resume(&self, session_id: &str, id: &str, input: Value) -> LedgerResult<Continuation> {
        let path = format!("/v1/continuations/{}/{}/resume", seg(session_id)?, seg(id)?);
        self.send(Method::POST, &path, &ResumeRequest { input })
            .await
    }
    async fn get(&self, session_id: &str, id: &str) -> LedgerResult<Option<Continuation>> {
        self.get_opt(&format!(
            "/v1/continuations/{}/{}",
            seg(session_id)?,
            seg(id)?
        ))
        .await
    }
    async fn list_parked(&self, session_id: &str) -> LedgerResult<Vec<Continuation>> {
        LedgerClient::get(self, &format!("/v1/continuations/{}", seg(session_id)?)).await
    }
}

#[async_trait]
impl WakeupLedger for LedgerClient {
    async fn schedule(&self, new: NewWakeup) -> LedgerResult<Wakeup> {
        if let Some(id) = &new.id {
            validate_segment(id)?;
        }
        self.send(Method::POST, "/v1/wakeups", &new).await
    }
    async fn list_due(&self, limit: usize) -> LedgerResult<Vec<Wakeup>> {
        LedgerClient::get(self, &format!("/v1/due-wakeups?limit={limit}")).await
    }
    async fn claim_due(&self, owner: &str, lease_ms: u64) -> LedgerResult<Option<Wakeup>> {
        let req = ClaimRequest {
            owner: owner.to_string(),
            lease_ms,
        };
        let resp: WakeupClaimResponse = self.send(Method::POST, "/v1/wakeup-claims", &req).await?;
        Ok(resp.wakeup)
    }
    async fn complete(&self, id: &str, token: &str) -> LedgerResult<Wakeup> {
        let req = TokenRequest {
            token: token.to_string(),
        };
        self.send(
            Method::POST,
            &format!("/v1/wakeups/{}/complete", seg(id)?),
            &req,
        )
        .await
    }
    async fn cancel(&self, id: &str) -> LedgerResult<bool> {
        let path = format!("/v1/wakeups/{}", seg(id)?);
        let resp: CancelResponse = self.call::<(), _>(Method::DELETE, &path, None).await?.1;
        Ok(resp.cancelled)
    }
    async fn get(&self, id: &str) -> LedgerResult<Option<Wakeup>> {
        self.get_opt(&format!("/v1/wakeups/{}", seg(id)?)).await
    }
}

#[async_trait]
impl WorkflowQueues for LedgerClient {
    async fn enqueue(&self, queue: &str, request: EnqueueRequest) -> LedgerResult<QueueMessage> {
        self.send(
            Method::POST,
            &format!("/v1/queues/{}/messages", seg(queue)?),
            &request,
        )
        .await
    }
    async fn dequeue(
        &self,
        queue: &str,
        consumer: &str,
        visibility_timeout_ms: u64,
    ) -> LedgerResult<Option<QueueMessage>> {
        let req = DequeueRequest {
            consumer: consumer.to_string(),
            visibility_timeout_ms,
        };
        let resp: DequeueResponse = self
            .send(
                Method::POST,
                &format!("/v1/queues/{}/deliveries", seg(queue)?),
                &req,
            )
            .await?;
        Ok(resp.message)
    }
    async fn ack(&self, queue: &str, message_id: &str, receipt: &str) -> LedgerResult<()> {
        let path = format!(
            "/v1/queues/{}/messages/{}/ack",
            seg(queue)?,
            seg(message_id)?
        );
        let _: AckResponse = self
            .send(
                Method::POST,
                &path,
                &AckRequest {
                    receipt: receipt.to_string(),
                },
            )
            .await?;
        Ok(())
    }
    async fn list(&self, queue: &str) -> LedgerResult<Vec<QueueMessage>> {
        LedgerClient::get(self, &format!("/v1/queues/{}/messages", seg(queue)?)).await
    }
    async fn dead_letters(&self, queue: &str) -> LedgerResult<Vec<QueueMessage>> {
        LedgerClient::get(self, &format!("/v1/queues/{}/dead-letters", seg(queue)?)).await
    }
}

#[async_trait]
impl ResultLedger for LedgerClient {
    async fn put(&self, key: &str, value: Value) -> LedgerResult<PutOutcome> {
        let resp: PutResultResponse = self
            .send(
                Method::PUT,
                &format!("/v1/results/{}", seg(key)?),
                &PutResultRequest { value },
            )
            .await?;
        Ok(resp.outcome)
    }
    async fn get(&self, key: &str) -> LedgerResult<Option<StoredResult>> {
        self.get_opt(&format!("/v1/results/{}", seg(key)?)).await
    }
}
