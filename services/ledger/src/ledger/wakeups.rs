//! Wakeup ledger: schedule at a time, list due, claim each due wakeup under a lease, complete.
//!
//! `root/wakeups/<id>` (generated ids sort by due time); completed wakeups move to
//! `root/wakeups-done/<id>`. A claim whose lease expires makes the wakeup due again.

use super::error::{LedgerError, LedgerResult};
use super::lease::Lease;
use super::space::{check_duration, check_name, new_token, read, sortable_id, write, Space};
use crate::clock::Millis;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewWakeup {
    /// Caller-chosen id (idempotent scheduling); generated and due-ordered when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub due_at: Millis,
    #[serde(default)]
    pub payload: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WakeupState {
    Scheduled,
    Claimed,
    Done,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Wakeup {
    pub id: String,
    pub due_at: Millis,
    pub payload: Value,
    pub state: WakeupState,
    pub lease: Option<Lease>,
    /// Claims made so far (more than one only after lost leases).
    pub claims: u32,
    pub created_at: Millis,
}

impl Wakeup {
    fn is_due(&self, now: Millis) -> bool {
        match self.state {
            WakeupState::Scheduled => self.due_at <= now,
            WakeupState::Claimed => self.lease.as_ref().is_none_or(|l| l.expires_at <= now),
            WakeupState::Done => false,
        }
    }
}

#[async_trait]
pub trait WakeupLedger: Send + Sync {
    async fn schedule(&self, new: NewWakeup) -> LedgerResult<Wakeup>;
    /// Due wakeups (scheduled and due, or claimed with an expired lease), by due time, at most `limit`.
    async fn list_due(&self, limit: usize) -> LedgerResult<Vec<Wakeup>>;
    /// Claims the earliest due wakeup for `lease_ms`, or `None`.
    async fn claim_due(&self, owner: &str, lease_ms: u64) -> LedgerResult<Option<Wakeup>>;
    /// Marks a claimed wakeup done; fails with `LeaseLost` if the lease expired or moved on.
    async fn complete(&self, id: &str, token: &str) -> LedgerResult<Wakeup>;
    /// Removes a wakeup that is not done; `false` if there was none.
    async fn cancel(&self, id: &str) -> LedgerResult<bool>;
    async fn get(&self, id: &str) -> LedgerResult<Option<Wakeup>>;
}

pub(crate) struct DurableWakeups {
    pub space: Space,
}

const OPEN: &str = "wakeups";
const DONE: &str = "wakeups-done";

impl DurableWakeups {
    async fn due(&self, now: Millis) -> LedgerResult<Vec<Wakeup>> {
        let dir = self.space.root.join(OPEN)?;
        let mut due = Vec::new();
        for id in self.space.list(&dir).await? {
            if let Some(w) = read::<Wakeup>(self.space.store.as_ref(), &dir.join(&id)?).await? {
                if w.is_due(now) {
                    due.push(w);
                }
            }
        }
        due.sort_by(|a, b| (a.due_at, &a.id).cmp(&(b.due_at, &b.id)));
        Ok(due)
    }
}

#[async_trait]
impl WakeupLedger for DurableWakeups {
    async fn schedule(&self, new: NewWakeup) -> LedgerResult<Wakeup> {
        let now = self.space.now();
        let explicit = new.id.is_some();
        let id = new.id.clone().unwrap_or_else(|| sortable_id(new.due_at));
        let key = self.space.key(OPEN, &[&id])?;
        let record = Wakeup {
            id: id.clone(),
            due_at: new.due_at,
            payload: new.payload,
            state: WakeupState::Scheduled,
            lease: None,
            claims: 0,
            created_at: now,
        };
        let space = self.space.clone();
        self.space
            .locked(&key, move |store, key| async move {
                if explicit {
                    let existing = match read::<Wakeup>(store.as_ref(), &key).await? {
                        Some(w) => Some(w),
                        None => read::<Wakeup>(store.as_ref(), &space.key(DONE, &[&id])?).await?,
                    };
                    if let Some(w) = existing {
                        if w.due_at == record.due_at && w.payload == record.payload {
                            return Ok(w);
                        }
                        return Err(LedgerError::Conflict(format!(
                            "wakeup {id} exists with other content"
                        )));
                    }
                }
                write(store.as_ref(), &key, &record).await?;
                Ok(record)
            })
            .await
    }

    async fn list_due(&self, limit: usize) -> LedgerResult<Vec<Wakeup>> {
        let mut due = self.due(self.space.now()).await?;
        due.truncate(limit);
        Ok(due)
    }

    async fn claim_due(&self, owner: &str, lease_ms: u64) -> LedgerResult<Option<Wakeup>> {
        check_name("owner", owner)?;
        check_duration("lease_ms", lease_ms, false)?;
        for candidate in self.due(self.space.now()).await? {
            let key = self.space.key(OPEN, &[&candidate.id])?;
            let space = self.space.clone();
            let owner = owner.to_string();
            let claimed = self
                .space
                .locked(&key, move |store, key| async move {
                    let now = space.now();
                    let Some(mut w) = read::<Wakeup>(store.as_ref(), &key).await? else {
                        return Ok(None);
                    };
                    if !w.is_due(now) {
                        return Ok(None);
                    }
                    w.state = WakeupState::Claimed;
                    w.claims += 1;
                    w.lease = Some(Lease {
                        token: new_token(),
                        owner,
                        expires_at: now + lease_ms,
                    });
                    write(store.as_ref(), &key, &w).await?;
                    Ok(Some(w))
                })
                .await?;
            if claimed.is_some() {
                return Ok(claimed);
            }
        }
        Ok(None)
    }

    async fn complete(&self, id: &str, token: &str) -> LedgerResult<Wakeup> {
        let key = self.space.key(OPEN, &[id])?;
        let done_key = self.space.key(DONE, &[id])?;
        let space = self.space.clone();
        let (id, token) = (id.to_string(), token.to_string());
        self.space
            .locked(&key, move |store, key| async move {
                let now = space.now();
                let Some(mut w) = read::<Wakeup>(store.as_ref(), &key).await? else {
                    if read::<Wakeup>(store.as_ref(), &done_key).await?.is_some() {
                        return Err(LedgerError::LeaseLost(format!("wakeup {id} already done")));
                    }
                    return Err(LedgerError::NotFound(format!("wakeup {id}")));
                };
                let held = w.state == WakeupState::Claimed
                    && w.lease
                        .as_ref()
                        .is_some_and(|l| l.token == token && now < l.expires_at);
                if !held {
                    return Err(LedgerError::LeaseLost(format!(
                        "wakeup {id} is not held under this lease"
                    )));
                }
                w.state = WakeupState::Done;
                w.lease = None;
                write(store.as_ref(), &done_key, &w).await?;
                store.remove(&key).await?;
                Ok(w)
            })
            .await
    }

    async fn cancel(&self, id: &str) -> LedgerResult<bool> {
        let key = self.space.key(OPEN, &[id])?;
        self.space
            .locked(&key, move |store, key| async move {
                Ok(store.remove(&key).await?)
            })
            .await
    }

    async fn get(&self, id: &str) -> LedgerResult<Option<Wakeup>> {
        let store = self.space.store.as_ref();
        if let Some(w) = read(store, &self.space.key(OPEN, &[id])?).await? {
            return Ok(Some(w));
        }
        read(store, &self.space.key(DONE, &[id])?).await
    }
}
