//! The single writer thread: group commit for the file store.
//!
//! Appends queue on a channel. The writer takes everything queued, assigns sequences, writes the
//! records with one `write` and makes them durable with one `fdatasync`; only then does it publish
//! them to readers and answer each caller. While it syncs, the next batch queues up, so the number
//! of appends per sync grows with concurrency.
//!
//! If a write or sync fails the store is poisoned: that batch and every later append fail until
//! the process restarts and re-verifies the file. An fsync is never retried and then acknowledged
//! (after a failed fsync the kernel may have dropped the dirty pages: PostgreSQL's fsyncgate).

use super::record;
use super::shared::Shared;
use crate::model::{PreparedEvent, RunId, StoredEvent};
use crate::store::index::{same_or_conflict, Decision};
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

pub struct Job {
    pub run: RunId,
    pub event: PreparedEvent,
    pub reply: oneshot::Sender<Result<AppendOutcome, StoreError>>,
}

pub struct Writer {
    pub shared: Arc<Shared>,
    pub file: File,
    pub sync: bool,
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
        let mut planned: Vec<StoredEvent> = Vec::new();
        let mut pending_per_run: HashMap<String, usize> = HashMap::new();
        let mut pending_keys: HashMap<(String, String), usize> = HashMap::new();
        // (reply, index into planned, created)
        let mut waiters = Vec::new();
        let mut buf = Vec::new();
        {
            let index = self.shared.index.read().unwrap_or_else(|e| e.into_inner());
            for job in batch {
                let pending_key = (job.run.as_str().to_string(), job.event.key.clone());
                if let Some(&i) = pending_keys.get(&pending_key) {
                    // Same key twice in one batch: the second waits for the first's sync.
                    match same_or_conflict(&job.run, &planned[i], &job.event) {
                        Ok(_) => waiters.push((job.reply, i, false)),
                        Err(e) => {
                            let _ = job.reply.send(Err(e));
                        }
                    }
                    continue;
                }
                let pending = pending_per_run.get(job.run.as_str()).copied().unwrap_or(0);
                match index.decide(&job.run, &job.event, pending) {
                    Err(e) => {
                        let _ = job.reply.send(Err(e));
                    }
                    Ok(Decision::Existing(event)) => {
                        let _ = job.reply.send(Ok(AppendOutcome {
                            event,
                            created: false,
                        }));
                    }
                    Ok(Decision::New(sequence)) => {
                        let stored = job.event.to_stored(&job.run, sequence);
                        match record::encode(&stored) {
                            Ok(line) => buf.extend_from_slice(&line),
                            Err(e) => {
                                let _ = job.reply.send(Err(StoreError::Internal(e)));
                                continue;
                            }
                        }
                        pending_keys.insert(pending_key, planned.len());
                        *pending_per_run.entry(stored.run_id.clone()).or_default() += 1;
                        waiters.push((job.reply, planned.len(), true));
                        planned.push(stored);
                    }
                }
            }
        }
        if planned.is_empty() {
            return;
        }
        self.shared.batch_sizes.observe(planned.len() as f64);
        if let Err(reason) = self.write_and_sync(&buf) {
            let reason = self.shared.poison(reason);
            for (reply, _, _) in waiters {
                let _ = reply.send(Err(StoreError::Poisoned(reason.clone())));
            }
            return;
        }
        {
            let mut index = self.shared.index.write().unwrap_or_else(|e| e.into_inner());
            for event in &planned {
                index.insert(event.clone());
            }
        }
        for (reply, i, created) in waiters {
            let _ = reply.send(Ok(AppendOutcome {
                event: planned[i].clone(),
                created,
            }));
        }
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
