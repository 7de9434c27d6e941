//! Workflow queues: enqueue, dequeue with a visibility timeout, acknowledge, dead-letter after N
//! deliveries.
//!
//! `root/queues/<queue>/<id>` (generated ids sort by enqueue time); acknowledged messages are
//! removed; a visible message that was already delivered `max_deliveries` times moves to
//! `root/queues-dead/<queue>/<id>` instead of being delivered again.

use super::error::{LedgerError, LedgerResult};
use super::space::{check_duration, check_name, new_token, read, sortable_id, write, Space};
use crate::clock::Millis;
use crate::key::validate_segment;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const DEFAULT_MAX_DELIVERIES: u32 = 5;
pub const MAX_DELIVERIES_LIMIT: u32 = 1000;

fn default_max_deliveries() -> u32 {
    DEFAULT_MAX_DELIVERIES
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EnqueueRequest {
    #[serde(default)]
    pub payload: Value,
    /// Invisible until `now + delay_ms`.
    #[serde(default)]
    pub delay_ms: u64,
    /// Deliveries allowed before the message is dead-lettered.
    #[serde(default = "default_max_deliveries")]
    pub max_deliveries: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    Ready,
    InFlight,
    DeadLettered,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueueMessage {
    pub queue: String,
    pub id: String,
    pub payload: Value,
    pub state: MessageState,
    pub deliveries: u32,
    pub max_deliveries: u32,
    /// Not deliverable before this time (enqueue delay or visibility timeout).
    pub visible_at: Millis,
    /// Receipt of the current delivery; `ack` must present it.
    pub receipt: Option<String>,
    pub consumer: Option<String>,
    pub enqueued_at: Millis,
}

#[async_trait]
pub trait WorkflowQueues: Send + Sync {
    async fn enqueue(&self, queue: &str, request: EnqueueRequest) -> LedgerResult<QueueMessage>;
    /// Delivers the oldest visible message, hidden from others for `visibility_timeout_ms`.
    async fn dequeue(
        &self,
        queue: &str,
        consumer: &str,
        visibility_timeout_ms: u64,
    ) -> LedgerResult<Option<QueueMessage>>;
    /// Acknowledges (removes) a delivered message. The receipt must be the latest one and its
    /// visibility timeout not yet over; otherwise `LeaseLost` (it may be delivered again).
    async fn ack(&self, queue: &str, message_id: &str, receipt: &str) -> LedgerResult<()>;
    /// Messages still in the queue (ready or in flight), by id.
    async fn list(&self, queue: &str) -> LedgerResult<Vec<QueueMessage>>;
    async fn dead_letters(&self, queue: &str) -> LedgerResult<Vec<QueueMessage>>;
}

pub(crate) struct DurableQueues {
    pub space: Space,
}

const LIVE: &str = "queues";
const DEAD: &str = "queues-dead";

impl DurableQueues {
    async fn read_all(&self, dir: &str, queue: &str) -> LedgerResult<Vec<QueueMessage>> {
        let dir = self.space.key(dir, &[queue])?;
        let mut out = Vec::new();
        for id in self.space.list(&dir).await? {
            if let Some(m) =
                read::<QueueMessage>(self.space.store.as_ref(), &dir.join(&id)?).await?
            {
                out.push(m);
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl WorkflowQueues for DurableQueues {
    async fn enqueue(&self, queue: &str, request: EnqueueRequest) -> LedgerResult<QueueMessage> {
        validate_segment(queue)?;
        check_duration("delay_ms", request.delay_ms, true)?;
        if request.max_deliveries == 0 || request.max_deliveries > MAX_DELIVERIES_LIMIT {
            return Err(LedgerError::InvalidInput(format!(
                "max_deliveries must be between 1 and {MAX_DELIVERIES_LIMIT}"
            )));
        }
        let now = self.space.now();
        let id = sortable_id(now);
        let message = QueueMessage {
            queue: queue.to_string(),
            id: id.clone(),
            payload: request.payload,
            state: MessageState::Ready,
            deliveries: 0,
            max_deliveries: request.max_deliveries,
            visible_at: now + request.delay_ms,
            receipt: None,
            consumer: None,
            enqueued_at: now,
        };
        // A fresh id is written by nobody else, so no lock is needed.
        write(
            self.space.store.as_ref(),
            &self.space.key(LIVE, &[queue, &id])?,
            &message,
        )
        .await?;
        Ok(message)
    }

    async fn dequeue(
        &self,
        queue: &str,
        consumer: &str,
        visibility_timeout_ms: u64,
    ) -> LedgerResult<Option<QueueMessage>> {
        check_name("consumer", consumer)?;
        check_duration("visibility_timeout_ms", visibility_timeout_ms, false)?;
        let dir = self.space.key(LIVE, &[queue])?;
        for id in self.space.list(&dir).await? {
            let key = dir.join(&id)?;
            let Some(peek) = read::<QueueMessage>(self.space.store.as_ref(), &key).await? else {
                continue;
            };
            if peek.visible_at > self.space.now() {
                continue;
            }
            let space = self.space.clone();
            let consumer = consumer.to_string();
            let delivered = self
                .space
                .locked(&key, move |store, key| async move {
                    let now = space.now();
                    let Some(mut m) = read::<QueueMessage>(store.as_ref(), &key).await? else {
                        return Ok(None);
                    };
                    if m.visible_at > now {
                        return Ok(None);
                    }
                    if m.deliveries >= m.max_deliveries {
                        m.state = MessageState::DeadLettered;
                        m.receipt = None;
                        write(store.as_ref(), &space.key(DEAD, &[&m.queue, &m.id])?, &m).await?;
                        store.remove(&key).await?;
                        return Ok(None);
                    }
                    m.state = MessageState::InFlight;
                    m.deliveries += 1;
                    m.receipt = Some(new_token());
                    m.consumer = Some(consumer);
                    m.visible_at = now + visibility_timeout_ms;
                    write(store.as_ref(), &key, &m).await?;
                    Ok(Some(m))
                })
                .await?;
            if delivered.is_some() {
                return Ok(delivered);
            }
        }
        Ok(None)
    }

    async fn ack(&self, queue: &str, message_id: &str, receipt: &str) -> LedgerResult<()> {
        let key = self.space.key(LIVE, &[queue, message_id])?;
        let space = self.space.clone();
        let receipt = receipt.to_string();
        self.space
            .locked(&key, move |store, key| async move {
                let Some(m) = read::<QueueMessage>(store.as_ref(), &key).await? else {
                    return Err(LedgerError::NotFound(format!(
                        "message {key} (acknowledged or dead-lettered)"
                    )));
                };
                let current = m.state == MessageState::InFlight
                    && m.receipt.as_deref() == Some(receipt.as_str())
                    && space.now() < m.visible_at;
                if !current {
                    return Err(LedgerError::LeaseLost(format!(
                        "receipt for message {} expired or was superseded",
                        m.id
                    )));
                }
                store.remove(&key).await?;
                Ok(())
            })
            .await
    }

    async fn list(&self, queue: &str) -> LedgerResult<Vec<QueueMessage>> {
        self.read_all(LIVE, queue).await
    }

    async fn dead_letters(&self, queue: &str) -> LedgerResult<Vec<QueueMessage>> {
        self.read_all(DEAD, queue).await
    }
}
