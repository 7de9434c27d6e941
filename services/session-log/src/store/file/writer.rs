//! The single writer thread: group commit for the file store.
//!
//! Appends queue on a channel. The writer takes everything queued, assigns sequences, writes the
//! records with one `write` and makes them durable with one `fdatasync`; only then does it publish
//! them to readers and answer each caller. While it syncs, the next batch queues up, so the number
//! of appends per sync grows with concurrency. An append that would take its session or namespace
//! past its byte quota is refused while planning, before anything is written; a retried key is
//! answered from its record on disk (the index keeps no events).
//!
//! If a write or sync fails the store is poisoned: that batch and every later append fail until
//! the process restarts and re-verifies the file. An fsync is never retried and then acknowledged
//! (after a failed fsync the kernel may have dropped the dirty pages: PostgreSQL's fsyncgate).

use super::shared::{Position, Shared};
use super::{reader, record};
use crate::model::{PreparedEvent, RunId, StoredEvent};
use crate::store::index::{check_existing, same_or_conflict, Decision};
use crate::store::quota::Usage;
use crate::store::types::{AppendOutcome, StoreError};
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Appends waiting for the writer before callers are held back (bounds memory: at most this many
/// payloads of up to the payload limit are queued).
pub const MAX_QUEUE: usize = 1024;

/// Most appends written by one sync.
const MAX_BATCH: usize = 1024;

type Reply = oneshot::Sender<Result<AppendOutcome, StoreError>>;

pub struct Job {
    pub run: RunId,
    pub event: PreparedEvent,
    pub reply: Reply,
}

pub struct Writer {
    pub shared: Arc<Shared>,
    pub file: File,
    pub sync: bool,
    /// Length of the data file: where the next record goes.
    pub end: u64,
}

/// One batch being planned: its new events (with where their records will be), the bytes they
/// add per session and namespace, and who waits for what.
#[derive(Default)]
struct Plan {
    events: Vec<(StoredEvent, Position)>,
    per_run: HashMap<String, usize>,
    keys: HashMap<(String, String), usize>,
    usage: Usage,
    /// (reply, index into `events`, created)
    waiters: Vec<(Reply, usize, bool)>,
    /// Retries of keys stored before this batch: answered from their records on disk.
    existing: Vec<(Job, u64, Position)>,
    buf: Vec<u8>,
}

impl Writer {
    pub fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        while let Some(first) = rx.blocking_recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
    }

    fn commit(&mut self, batch: Vec<Job>) {
        if let Some(reason) = self.shared.poisoned() {
            for job in batch {
                let _ = job.reply.send(Err(StoreError::Poisoned(reason.clone())));
            }
            return;
        }
        let mut plan = Plan::default();
        {
            let index = self.shared.index.read().unwrap_or_else(|e| e.into_inner());
            for job in batch {
                self.plan(&index, &mut plan, job);
            }
        }
        for (job, sequence, at) in plan.existing {
            let answer = reader::load(&self.shared.reader, &job.run, sequence, at)
                .and_then(|stored| check_existing(&job.run, stored, &job.event))
                .map(|event| AppendOutcome {
                    event,
                    created: false,
                });
            let _ = job.reply.send(answer);
        }
        if plan.events.is_empty() {
            return;
        }
        self.shared.batch_sizes.observe(plan.events.len() as f64);
        if let Err(reason) = self.write_and_sync(&plan.buf) {
            let reason = self.shared.poison(reason);
            for (reply, _, _) in plan.waiters {
                let _ = reply.send(Err(StoreError::Poisoned(reason.clone())));
            }
            return;
        }
        self.end += plan.buf.len() as u64;
        {
            let mut index = self.shared.index.write().unwrap_or_else(|e| e.into_inner());
            for (event, at) in &plan.events {
                index.insert(
                    &event.run_id,
                    event.sequence,
                    &event.append_idempotency_key,
                    *at,
                );
            }
        }
        for (reply, i, created) in plan.waiters {
            let _ = reply.send(Ok(AppendOutcome {
                event: plan.events[i].0.clone(),
                created,
            }));
        }
    }

    /// Decides one job against the index and what this batch already planned.
    fn plan(&self, index: &crate::store::index::Index<Position>, plan: &mut Plan, job: Job) {
        let pending_key = (job.run.as_str().to_string(), job.event.key.clone());
        if let Some(&i) = plan.keys.get(&pending_key) {
            // Same key twice in one batch: the second waits for the first's sync.
            let first = &plan.events[i].0;
            match same_or_conflict(&job.run, first.sequence, &first.digest, &job.event) {
                Ok(()) => plan.waiters.push((job.reply, i, false)),
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                }
            }
            return;
        }
        let pending = plan.per_run.get(job.run.as_str()).copied().unwrap_or(0);
        let sequence = match index.decide(&job.run, &job.event, pending) {
            Err(e) => {
                let _ = job.reply.send(Err(e));
                return;
            }
            Ok(Decision::Existing(sequence)) => {
                match index.kept(&job.run, sequence) {
                    Some(&at) => plan.existing.push((job, sequence, at)),
                    None => {
                        let _ = job.reply.send(Err(StoreError::Internal(format!(
                            "file store index lost {} at {sequence}",
                            job.run
                        ))));
                    }
                }
                return;
            }
            Ok(Decision::New(sequence)) => sequence,
        };
        let stored = job.event.to_stored(&job.run, sequence);
        let line = match record::encode(&stored) {
            Ok(line) => line,
            Err(e) => {
                let _ = job.reply.send(Err(StoreError::Internal(e)));
                return;
            }
        };
        let len = line.len() as u64;
        let quotas = &self.shared.quotas;
        if let Err(e) = index
            .usage
            .admit(&plan.usage, quotas, job.run.as_str(), len)
        {
            let _ = job.reply.send(Err(e));
            return;
        }
        let at = Position {
            offset: self.end + plan.buf.len() as u64,
            len,
        };
        plan.buf.extend_from_slice(&line);
        plan.usage.add(job.run.as_str(), len);
        plan.keys.insert(pending_key, plan.events.len());
        *plan.per_run.entry(stored.run_id.clone()).or_default() += 1;
        plan.waiters.push((job.reply, plan.events.len(), true));
        plan.events.push((stored, at));
    }

    fn write_and_sync(&mut self, buf: &[u8]) -> Result<(), String> {
        let path = self.shared.path.display();
        self.shared
            .fs
            .write_all(&mut self.file, buf)
            .map_err(|e| format!("write of {} bytes to {path} failed: {e}", buf.len()))?;
        if self.sync {
            self.shared
                .fs
                .sync_data(&self.file)
                .map_err(|e| format!("fdatasync of {path} failed: {e}"))?;
        }
        Ok(())
    }
}
