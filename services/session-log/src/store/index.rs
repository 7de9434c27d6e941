//! The in-memory per-run index used by the memory store and (as its read cache) the file store.

use super::types::StoreError;
use crate::model::{PreparedEvent, RunId, StoredEvent};
use std::collections::HashMap;

#[derive(Default)]
pub struct RunLog {
    pub events: Vec<StoredEvent>,
    /// key -> index into `events`.
    pub by_key: HashMap<String, usize>,
    /// Set when loading found this run damaged: reads and appends are refused.
    pub corrupt: Option<String>,
}

/// What an append of a prepared event resolves to against the committed state.
pub enum Decision {
    /// Already stored with the same digest.
    Existing(StoredEvent),
    /// Not stored yet: append it at this sequence.
    New(u64),
}

#[derive(Default)]
pub struct Index {
    pub runs: HashMap<String, RunLog>,
    /// Set when a damaged record could not be attributed to a run: nothing can be trusted.
    pub store_corrupt: Option<String>,
}

impl Index {
    /// Decides an append against committed state plus `pending` events of the same run (those
    /// planned in the current batch but not yet committed).
    pub fn decide(
        &self,
        run: &RunId,
        event: &PreparedEvent,
        pending: usize,
    ) -> Result<Decision, StoreError> {
        self.check_readable(run)?;
        let Some(log) = self.runs.get(run.as_str()) else {
            return Ok(Decision::New(1 + pending as u64));
        };
        if let Some(&i) = log.by_key.get(&event.key) {
            let stored = &log.events[i];
            return same_or_conflict(run, stored, event).map(Decision::Existing);
        }
        Ok(Decision::New(log.events.len() as u64 + 1 + pending as u64))
    }

    /// Adds committed events. They must follow the run's last sequence.
    pub fn insert(&mut self, event: StoredEvent) {
        let log = self.runs.entry(event.run_id.clone()).or_default();
        debug_assert_eq!(event.sequence, log.events.len() as u64 + 1);
        log.by_key
            .insert(event.append_idempotency_key.clone(), log.events.len());
        log.events.push(event);
    }

    pub fn check_readable(&self, run: &RunId) -> Result<(), StoreError> {
        if let Some(reason) = &self.store_corrupt {
            return Err(StoreError::RunCorrupt {
                run: run.to_string(),
                reason: reason.clone(),
            });
        }
        if let Some(reason) = self.runs.get(run.as_str()).and_then(|l| l.corrupt.as_ref()) {
            return Err(StoreError::RunCorrupt {
                run: run.to_string(),
                reason: reason.clone(),
            });
        }
        Ok(())
    }

    pub fn read(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<StoredEvent>, bool), StoreError> {
        self.check_readable(run)?;
        let Some(log) = self.runs.get(run.as_str()) else {
            return Ok((Vec::new(), false));
        };
        let start = (after as usize).min(log.events.len());
        let end = start.saturating_add(limit).min(log.events.len());
        Ok((log.events[start..end].to_vec(), end < log.events.len()))
    }
}

/// The idempotency rule: same key and digest returns the original; another digest conflicts.
pub fn same_or_conflict(
    run: &RunId,
    stored: &StoredEvent,
    event: &PreparedEvent,
) -> Result<StoredEvent, StoreError> {
    if stored.digest == event.digest {
        Ok(stored.clone())
    } else {
        Err(StoreError::Conflict {
            run: run.to_string(),
            key: event.key.clone(),
            sequence: stored.sequence,
            stored_digest: stored.digest.clone(),
            request_digest: event.digest.clone(),
        })
    }
}
