//! In-memory store: the development default. Everything is lost when the process exits (the
//! server says so at start-up). Its memory is its data: it holds every event, so what bounds its
//! memory is the byte quotas per session and namespace (`quota.rs`), the same as the other stores
//! apply to their disk; run it with quotas that fit its memory limit.

use super::index::{check_existing, Decision, Index, Kept};
use super::quota::{Quotas, Usage};
use super::types::{AppendOutcome, StoreError};
use crate::canonical::canonical_bytes;
use crate::model::{PreparedEvent, RunId, StoredEvent};
use std::sync::Mutex;

/// A stored event and the bytes of its canonical JSON (what it costs against quotas).
#[derive(Clone)]
struct Held {
    event: StoredEvent,
    bytes: u64,
}

impl Kept for Held {
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[derive(Default)]
pub struct MemoryStore {
    index: Mutex<Index<Held>>,
    quotas: Quotas,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_quotas(quotas: Quotas) -> Self {
        Self {
            index: Mutex::default(),
            quotas,
        }
    }

    pub fn append(&self, run: &RunId, event: PreparedEvent) -> Result<AppendOutcome, StoreError> {
        let mut index = self.lock()?;
        match index.decide(run, &event, 0)? {
            Decision::Existing(sequence) => {
                let held = index.kept(run, sequence).ok_or_else(|| {
                    StoreError::Internal(format!("memory store lost {run} at {sequence}"))
                })?;
                Ok(AppendOutcome {
                    event: check_existing(run, held.event.clone(), &event)?,
                    created: false,
                })
            }
            Decision::New(sequence) => {
                let stored = event.to_stored(run, sequence);
                let bytes = canonical_bytes(&stored)
                    .map_err(StoreError::Internal)?
                    .len() as u64;
                index
                    .usage
                    .admit(&Usage::default(), &self.quotas, run.as_str(), bytes)?;
                let held = Held {
                    event: stored.clone(),
                    bytes,
                };
                index.insert(run.as_str(), sequence, &event.key, held);
                Ok(AppendOutcome {
                    event: stored,
                    created: true,
                })
            }
        }
    }

    pub fn read(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
        max_bytes: u64,
    ) -> Result<(Vec<StoredEvent>, bool), StoreError> {
        let (page, more) = self.lock()?.page(run, after, limit, max_bytes)?;
        Ok((page.into_iter().map(|h| h.event).collect(), more))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Index<Held>>, StoreError> {
        self.index
            .lock()
            .map_err(|_| StoreError::Internal("memory store lock poisoned".into()))
    }
}
