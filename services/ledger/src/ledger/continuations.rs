//! Continuation ledger: park a continuation for a session, resume it exactly once.
//!
//! `root/continuations/<session>/<id>`; resuming flips the state under the lock and keeps the
//! record, so a second resume is told "already resumed" rather than "not found".

use super::error::{LedgerError, LedgerResult};
use super::space::{read, write, Space};
use crate::clock::Millis;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContinuationState {
    Parked,
    Resumed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Continuation {
    pub session_id: String,
    pub id: String,
    pub payload: Value,
    pub state: ContinuationState,
    pub parked_at: Millis,
    pub resumed_at: Option<Millis>,
    /// What the resumer passed in; handed back to the one successful resumer.
    pub resume_input: Option<Value>,
}

#[async_trait]
pub trait ContinuationLedger: Send + Sync {
    /// Parks `payload` under (session, id). Parking the same payload again is a no-op returning the
    /// record; other content, or parking after a resume, is a conflict.
    async fn park(&self, session_id: &str, id: &str, payload: Value) -> LedgerResult<Continuation>;
    /// Resumes exactly once: the first caller gets the record, later callers `AlreadyResumed`.
    async fn resume(&self, session_id: &str, id: &str, input: Value) -> LedgerResult<Continuation>;
    async fn get(&self, session_id: &str, id: &str) -> LedgerResult<Option<Continuation>>;
    /// Still-parked continuations of a session, by id.
    async fn list_parked(&self, session_id: &str) -> LedgerResult<Vec<Continuation>>;
}

pub(crate) struct DurableContinuations {
    pub space: Space,
}

const DIR: &str = "continuations";

#[async_trait]
impl ContinuationLedger for DurableContinuations {
    async fn park(&self, session_id: &str, id: &str, payload: Value) -> LedgerResult<Continuation> {
        let key = self.space.key(DIR, &[session_id, id])?;
        let record = Continuation {
            session_id: session_id.to_string(),
            id: id.to_string(),
            payload,
            state: ContinuationState::Parked,
            parked_at: self.space.now(),
            resumed_at: None,
            resume_input: None,
        };
        self.space
            .locked(&key, move |store, key| async move {
                if let Some(existing) = read::<Continuation>(store.as_ref(), &key).await? {
                    return match existing.state {
                        ContinuationState::Parked if existing.payload == record.payload => {
                            Ok(existing)
                        }
                        ContinuationState::Parked => Err(LedgerError::Conflict(format!(
                            "continuation {}/{} is parked with other content",
                            record.session_id, record.id
                        ))),
                        ContinuationState::Resumed => Err(LedgerError::Conflict(format!(
                            "continuation {}/{} was already resumed",
                            record.session_id, record.id
                        ))),
                    };
                }
                write(store.as_ref(), &key, &record).await?;
                Ok(record)
            })
            .await
    }

    async fn resume(&self, session_id: &str, id: &str, input: Value) -> LedgerResult<Continuation> {
        let key = self.space.key(DIR, &[session_id, id])?;
        let space = self.space.clone();
        self.space
            .locked(&key, move |store, key| async move {
                let Some(mut c) = read::<Continuation>(store.as_ref(), &key).await? else {
                    return Err(LedgerError::NotFound(format!("continuation {key}")));
                };
                if c.state == ContinuationState::Resumed {
                    return Err(LedgerError::AlreadyResumed(format!(
                        "continuation {}/{}",
                        c.session_id, c.id
                    )));
                }
                c.state = ContinuationState::Resumed;
                c.resumed_at = Some(space.now());
                c.resume_input = Some(input);
                write(store.as_ref(), &key, &c).await?;
                Ok(c)
            })
            .await
    }

    async fn get(&self, session_id: &str, id: &str) -> LedgerResult<Option<Continuation>> {
        read(
            self.space.store.as_ref(),
            &self.space.key(DIR, &[session_id, id])?,
        )
        .await
    }

    async fn list_parked(&self, session_id: &str) -> LedgerResult<Vec<Continuation>> {
        let dir = self.space.key(DIR, &[session_id])?;
        let mut out = Vec::new();
        for id in self.space.list(&dir).await? {
            if let Some(c) =
                read::<Continuation>(self.space.store.as_ref(), &dir.join(&id)?).await?
            {
                if c.state == ContinuationState::Parked {
                    out.push(c);
                }
            }
        }
        Ok(out)
    }
}
