//! In-memory store: the development default. Everything is lost when the process exits (the
//! server says so at start-up).

use super::index::{Decision, Index};
use super::types::{AppendOutcome, StoreError};
use crate::model::{PreparedEvent, RunId, StoredEvent};
use std::sync::Mutex;

#[derive(Default)]
pub struct MemoryStore {
    index: Mutex<Index>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn append(&self, run: &RunId, event: PreparedEvent) -> Result<AppendOutcome, StoreError> {
        let mut index = self.lock()?;
        match index.decide(run, &event, 0)? {
            Decision::Existing(event) => Ok(AppendOutcome {
                event,
                created: false,
            }),
            Decision::New(sequence) => {
                let stored = event.to_stored(run, sequence);
                index.insert(stored.clone());
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
    ) -> Result<(Vec<StoredEvent>, bool), StoreError> {
        self.lock()?.read(run, after, limit)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Index>, StoreError> {
        self.index
            .lock()
            .map_err(|_| StoreError::Internal("memory store lock poisoned".into()))
    }
}
