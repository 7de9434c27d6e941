//! Request and response bodies of the service (the ledger records themselves are reused as is).

use crate::ledger::{PutOutcome, QueueMessage, TaskRecord, Wakeup};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClaimRequest {
    /// Who claims (for inspection; the lease token is what proves ownership).
    pub owner: String,
    pub lease_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TaskClaimResponse {
    /// The claimed task, or null when none is claimable.
    pub task: Option<TaskRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatRequest {
    pub token: String,
    pub lease_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CompleteRequest {
    pub token: String,
    #[serde(default)]
    pub result: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FailRequest {
    pub token: String,
    pub error: String,
    /// Retry after this delay if attempts remain; absent means fail for good.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ParkRequest {
    #[serde(default)]
    pub payload: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ResumeRequest {
    #[serde(default)]
    pub input: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WakeupClaimResponse {
    pub wakeup: Option<Wakeup>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenRequest {
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CancelResponse {
    pub cancelled: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DequeueRequest {
    pub consumer: String,
    pub visibility_timeout_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DequeueResponse {
    pub message: Option<QueueMessage>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AckRequest {
    pub receipt: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AckResponse {
    pub acked: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PutResultRequest {
    pub value: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PutResultResponse {
    pub outcome: PutOutcome,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DueQuery {
    #[serde(default = "default_limit")]
    pub limit: usize,
}

fn default_limit() -> usize {
    100
}
