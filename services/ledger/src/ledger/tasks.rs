//! Task ledger: create, claim with a lease, heartbeat, complete, fail with bounded retries.
//!
//! Each task is one document `root/tasks/<id>`; every state change is a single write under the
//! task's lock, so a crash leaves the previous or the next state. Terminal tasks move to
//! `root/tasks-done/<id>` (written before the open copy is removed) so claim scans stay short.

use super::error::{LedgerError, LedgerResult};
use super::lease::Lease;
use super::space::{check_duration, check_name, new_token, read, sortable_id, write, Space};
use crate::clock::Millis;
use crate::key::Key;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
pub const MAX_ATTEMPTS_LIMIT: u32 = 1000;
/// How many claimable tasks a claim considers; it picks among them at random.
pub const CLAIM_WINDOW: usize = 16;

fn default_max_attempts() -> u32 {
    DEFAULT_MAX_ATTEMPTS
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewTask {
    /// Caller-chosen id (makes `create` idempotent); generated, creation-ordered when absent.
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub payload: Value,
    /// Claims allowed in total, including those lost to expired leases.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Not claimable before `now + delay_ms`.
    #[serde(default)]
    pub delay_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl TaskState {
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Succeeded | TaskState::Failed)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskRecord {
    pub id: String,
    pub payload: Value,
    pub state: TaskState,
    /// Claims made so far.
    pub attempts: u32,
    pub max_attempts: u32,
    /// Earliest time a pending task may be claimed.
    pub available_at: Millis,
    /// Present while running.
    pub lease: Option<Lease>,
    pub result: Option<Value>,
    pub last_error: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl TaskRecord {
    /// Whether `claim` may take this task at `now`.
    fn claimable(&self, now: Millis) -> bool {
        match self.state {
            TaskState::Pending => self.available_at <= now,
            TaskState::Running => self.lease.as_ref().is_none_or(|l| l.expires_at <= now),
            _ => false,
        }
    }

    /// No attempts left: an expired lease now means failure, not another claim.
    fn exhausted(&self) -> bool {
        self.attempts >= self.max_attempts
    }

    fn check_lease(&self, token: &str, now: Millis) -> LedgerResult<()> {
        match (&self.state, &self.lease) {
            (TaskState::Running, Some(lease)) if lease.token == token && now < lease.expires_at => {
                Ok(())
            }
            _ => Err(LedgerError::LeaseLost(format!(
                "task {} is not held under this lease (state {:?})",
                self.id, self.state
            ))),
        }
    }
}

#[async_trait]
pub trait TaskLedger: Send + Sync {
    /// Creates a task. With an explicit id, repeating the same request returns the existing task;
    /// other content under that id is a conflict.
    async fn create(&self, new: NewTask) -> LedgerResult<TaskRecord>;
    async fn get(&self, id: &str) -> LedgerResult<Option<TaskRecord>>;
    /// Open and finished tasks, by id.
    async fn list(&self) -> LedgerResult<Vec<TaskRecord>>;
    /// Claims one of the first `CLAIM_WINDOW` claimable tasks (in id order) for `lease_ms`, or
    /// `None` when nothing is claimable.
    async fn claim(&self, owner: &str, lease_ms: u64) -> LedgerResult<Option<TaskRecord>>;
    /// Extends a held lease to `now + lease_ms`.
    async fn heartbeat(&self, id: &str, token: &str, lease_ms: u64) -> LedgerResult<TaskRecord>;
    async fn complete(&self, id: &str, token: &str, result: Value) -> LedgerResult<TaskRecord>;
    /// Fails the current attempt. With `retry_after_ms` and attempts left the task becomes pending
    /// again after that delay; otherwise it fails for good.
    async fn fail(
        &self,
        id: &str,
        token: &str,
        error: &str,
        retry_after_ms: Option<u64>,
    ) -> LedgerResult<TaskRecord>;
}

pub(crate) struct DurableTasks {
    pub space: Space,
}

const OPEN: &str = "tasks";
const DONE: &str = "tasks-done";

impl DurableTasks {
    /// Writes a terminal task to the archive, then removes the open copy (same lock held).
    async fn finish(
        store: &dyn crate::store::DurableJsonStore,
        space: &Space,
        task: &TaskRecord,
    ) -> LedgerResult<()> {
        let open = space.key(OPEN, &[&task.id])?;
        write(store, &space.key(DONE, &[&task.id])?, task).await?;
        store.remove(&open).await?;
        Ok(())
    }

    /// Up to `CLAIM_WINDOW` claimable tasks, in id order, found by unlocked peeks (held tasks cost
    /// no lock). On the way, tasks whose lease expired on their last attempt are failed, and
    /// finished tasks left in the open directory by a crash are archived.
    async fn claim_window(&self) -> LedgerResult<Vec<Key>> {
        let dir = self.space.root.join(OPEN)?;
        let mut window = Vec::new();
        for id in self.space.list(&dir).await? {
            let key = dir.join(&id)?;
            let Some(peek) = read::<TaskRecord>(self.space.store.as_ref(), &key).await? else {
                continue;
            };
            let now = self.space.now();
            if peek.state.is_terminal() || (peek.claimable(now) && peek.exhausted()) {
                self.retire(key).await?;
            } else if peek.claimable(now) {
                window.push(key);
                if window.len() == CLAIM_WINDOW {
                    break;
                }
            }
        }
        Ok(window)
    }

    /// Under the lock: archives a finished task, or fails one whose last lease expired.
    async fn retire(&self, key: Key) -> LedgerResult<()> {
        let space = self.space.clone();
        self.space
            .locked(&key, move |store, key| async move {
                let now = space.now();
                let Some(mut task) = read::<TaskRecord>(store.as_ref(), &key).await? else {
                    return Ok(());
                };
                if task.claimable(now) && task.exhausted() {
                    task.state = TaskState::Failed;
                    task.last_error = Some(format!(
                        "lease expired on the last of {} attempts",
                        task.max_attempts
                    ));
                    task.lease = None;
                    task.updated_at = now;
                }
                if task.state.is_terminal() {
                    Self::finish(store.as_ref(), &space, &task).await?;
                }
                Ok(())
            })
            .await
    }

    /// Under the lock: claims the task if it is still claimable.
    async fn try_claim(
        &self,
        key: Key,
        owner: &str,
        lease_ms: u64,
    ) -> LedgerResult<Option<TaskRecord>> {
        let space = self.space.clone();
        let owner = owner.to_string();
        self.space
            .locked(&key, move |store, key| async move {
                let now = space.now();
                let Some(mut task) = read::<TaskRecord>(store.as_ref(), &key).await? else {
                    return Ok(None);
                };
                if !task.claimable(now) || task.exhausted() {
                    return Ok(None);
                }
                task.state = TaskState::Running;
                task.attempts += 1;
                task.lease = Some(Lease {
                    token: new_token(),
                    owner,
                    expires_at: now + lease_ms,
                });
                task.updated_at = now;
                write(store.as_ref(), &key, &task).await?;
                Ok(Some(task))
            })
            .await
    }

    /// Applies `change` to a task held under `token`, under the task's lock.
    async fn with_held_task(
        &self,
        id: &str,
        token: &str,
        change: impl FnOnce(&mut TaskRecord, Millis) + Send,
    ) -> LedgerResult<TaskRecord> {
        let key = self.space.key(OPEN, &[id])?;
        let space = self.space.clone();
        let (id, token) = (id.to_string(), token.to_string());
        self.space
            .locked(&key, move |store, key| async move {
                let now = space.now();
                let Some(mut task) = read::<TaskRecord>(store.as_ref(), &key).await? else {
                    return match read::<TaskRecord>(store.as_ref(), &space.key(DONE, &[&id])?)
                        .await?
                    {
                        Some(done) => Err(LedgerError::LeaseLost(format!(
                            "task {id} already finished ({:?})",
                            done.state
                        ))),
                        None => Err(LedgerError::NotFound(format!("task {id}"))),
                    };
                };
                task.check_lease(&token, now)?;
                change(&mut task, now);
                task.updated_at = now;
                if task.state.is_terminal() {
                    Self::finish(store.as_ref(), &space, &task).await?;
                } else {
                    write(store.as_ref(), &key, &task).await?;
                }
                Ok(task)
            })
            .await
    }
}

#[async_trait]
impl TaskLedger for DurableTasks {
    async fn create(&self, new: NewTask) -> LedgerResult<TaskRecord> {
        if new.max_attempts == 0 || new.max_attempts > MAX_ATTEMPTS_LIMIT {
            return Err(LedgerError::InvalidInput(format!(
                "max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}"
            )));
        }
        check_duration("delay_ms", new.delay_ms, true)?;
        let now = self.space.now();
        let explicit = new.id.is_some();
        let id = new.id.clone().unwrap_or_else(|| sortable_id(now));
        let key = self.space.key(OPEN, &[&id])?;
        let record = TaskRecord {
            id: id.clone(),
            payload: new.payload,
            state: TaskState::Pending,
            attempts: 0,
            max_attempts: new.max_attempts,
            available_at: now + new.delay_ms,
            lease: None,
            result: None,
            last_error: None,
            created_at: now,
            updated_at: now,
        };
        let space = self.space.clone();
        self.space
            .locked(&key, move |store, key| async move {
                if explicit {
                    let existing = match read::<TaskRecord>(store.as_ref(), &key).await? {
                        Some(t) => Some(t),
                        None => {
                            read::<TaskRecord>(store.as_ref(), &space.key(DONE, &[&id])?).await?
                        }
                    };
                    if let Some(existing) = existing {
                        if existing.payload == record.payload
                            && existing.max_attempts == record.max_attempts
                        {
                            return Ok(existing);
                        }
                        return Err(LedgerError::Conflict(format!(
                            "task {id} exists with other content"
                        )));
                    }
                }
                write(store.as_ref(), &key, &record).await?;
                Ok(record)
            })
            .await
    }

    async fn get(&self, id: &str) -> LedgerResult<Option<TaskRecord>> {
        let store = self.space.store.as_ref();
        // Open first: the archive copy is written before the open one is removed.
        if let Some(t) = read(store, &self.space.key(OPEN, &[id])?).await? {
            return Ok(Some(t));
        }
        read(store, &self.space.key(DONE, &[id])?).await
    }

    async fn list(&self) -> LedgerResult<Vec<TaskRecord>> {
        let mut out = std::collections::BTreeMap::new();
        for dir in [DONE, OPEN] {
            let dir_key = self.space.root.join(dir)?;
            for id in self.space.list(&dir_key).await? {
                if let Some(t) =
                    read::<TaskRecord>(self.space.store.as_ref(), &dir_key.join(&id)?).await?
                {
                    out.insert(id, t);
                }
            }
        }
        Ok(out.into_values().collect())
    }

    async fn claim(&self, owner: &str, lease_ms: u64) -> LedgerResult<Option<TaskRecord>> {
        check_name("owner", owner)?;
        check_duration("lease_ms", lease_ms, false)?;
        // A candidate can be lost to a concurrent claimant between peek and lock; rescan a few
        // times before answering "nothing claimable".
        for _ in 0..3 {
            let window = self.claim_window().await?;
            if window.is_empty() {
                return Ok(None);
            }
            // Concurrent claimants start at different places in the window instead of all
            // queueing on the lock of the first task (measured: 32 PostgreSQL workers ran ~4x
            // slower than one without this).
            let start = (uuid::Uuid::new_v4().as_u128() % window.len() as u128) as usize;
            for i in 0..window.len() {
                let key = window[(start + i) % window.len()].clone();
                if let Some(task) = self.try_claim(key, owner, lease_ms).await? {
                    return Ok(Some(task));
                }
            }
        }
        Ok(None)
    }

    async fn heartbeat(&self, id: &str, token: &str, lease_ms: u64) -> LedgerResult<TaskRecord> {
        check_duration("lease_ms", lease_ms, false)?;
        self.with_held_task(id, token, move |task, now| {
            if let Some(lease) = task.lease.as_mut() {
                lease.expires_at = now + lease_ms;
            }
        })
        .await
    }

    async fn complete(&self, id: &str, token: &str, result: Value) -> LedgerResult<TaskRecord> {
        self.with_held_task(id, token, move |task, _| {
            task.state = TaskState::Succeeded;
            task.result = Some(result);
            task.lease = None;
        })
        .await
    }

    async fn fail(
        &self,
        id: &str,
        token: &str,
        error: &str,
        retry_after_ms: Option<u64>,
    ) -> LedgerResult<TaskRecord> {
        if let Some(delay) = retry_after_ms {
            check_duration("retry_after_ms", delay, true)?;
        }
        let error = error.to_string();
        self.with_held_task(id, token, move |task, now| {
            task.last_error = Some(error);
            task.lease = None;
            match retry_after_ms {
                Some(delay) if task.attempts < task.max_attempts => {
                    task.state = TaskState::Pending;
                    task.available_at = now + delay;
                }
                _ => task.state = TaskState::Failed,
            }
        })
        .await
    }
}
