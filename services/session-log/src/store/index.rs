//! The per-run index every local store decides appends with: for each run what the store keeps of
//! each event (`E`, at position `sequence - 1`) and, per key, a 128-bit hash of the key with its
//! sequence. The memory store keeps the event itself (its memory is its data); the file store only
//! where the event's record is on disk, so that its memory does not grow with event sizes (issue
//! 30), and per event costs about 50 bytes whatever its key (up to 200 characters) and digest: a
//! key found here is confirmed, and its digest compared, against the stored event. Bytes per
//! session and namespace are counted here too, for the quotas.

use super::quota::Usage;
use super::types::StoreError;
use crate::model::{PreparedEvent, RunId, StoredEvent};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// What a store keeps per event; `bytes` is what the event costs against quotas and page bounds.
pub trait Kept: Clone {
    fn bytes(&self) -> u64;
}

/// What the index keeps of a key: the first 128 bits of its SHA-256. Two keys of one run with the
/// same hash are not expected before 2^64 keys; [`check_existing`] would still refuse to answer one
/// with the other's event.
pub type KeyHash = u128;

pub fn key_hash(key: &str) -> KeyHash {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    KeyHash::from_le_bytes(first)
}

pub struct RunLog<E> {
    /// Event `n` (sequence `n + 1`).
    pub events: Vec<E>,
    /// Key hash -> sequence.
    pub by_key: HashMap<KeyHash, u64>,
    /// Set when loading found this run damaged: reads and appends are refused.
    pub corrupt: Option<String>,
}

impl<E> Default for RunLog<E> {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            by_key: HashMap::new(),
            corrupt: None,
        }
    }
}

/// What an append of a prepared event resolves to against the committed state.
pub enum Decision {
    /// Stored at this sequence: the caller loads the event and answers with [`check_existing`].
    Existing(u64),
    /// Not stored yet: append it at this sequence.
    New(u64),
}

pub struct Index<E> {
    pub runs: HashMap<String, RunLog<E>>,
    /// Set when a damaged record could not be attributed to a run: nothing can be trusted.
    pub store_corrupt: Option<String>,
    /// Bytes stored per session and namespace.
    pub usage: Usage,
}

impl<E> Default for Index<E> {
    fn default() -> Self {
        Self {
            runs: HashMap::new(),
            store_corrupt: None,
            usage: Usage::default(),
        }
    }
}

impl<E: Kept> Index<E> {
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
        if let Some(&sequence) = log.by_key.get(&key_hash(&event.key)) {
            return Ok(Decision::Existing(sequence));
        }
        Ok(Decision::New(log.events.len() as u64 + 1 + pending as u64))
    }

    /// Adds a committed event. It must follow the run's last sequence.
    pub fn insert(&mut self, run: &str, sequence: u64, key: &str, kept: E) {
        self.usage.add(run, kept.bytes());
        if !self.runs.contains_key(run) {
            self.runs.insert(run.to_string(), RunLog::default());
        }
        let Some(log) = self.runs.get_mut(run) else {
            return;
        };
        debug_assert_eq!(sequence, log.events.len() as u64 + 1);
        log.by_key.insert(key_hash(key), sequence);
        log.events.push(kept);
    }

    /// What is kept of event `sequence` of `run`.
    pub fn kept(&self, run: &RunId, sequence: u64) -> Option<&E> {
        let i = usize::try_from(sequence.checked_sub(1)?).ok()?;
        self.runs.get(run.as_str())?.events.get(i)
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

    /// The kept events of one page: sequences after `after`, at most `limit` of them and, past
    /// the first, no more than `max_bytes` in all; and whether more follow.
    pub fn page(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
        max_bytes: u64,
    ) -> Result<(Vec<E>, bool), StoreError> {
        self.check_readable(run)?;
        let Some(log) = self.runs.get(run.as_str()) else {
            return Ok((Vec::new(), false));
        };
        let start = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(log.events.len());
        let mut page = Vec::new();
        let mut bytes = 0;
        for kept in &log.events[start..] {
            if page.len() == limit || (!page.is_empty() && bytes + kept.bytes() > max_bytes) {
                break;
            }
            bytes += kept.bytes();
            page.push(kept.clone());
        }
        let more = start + page.len() < log.events.len();
        Ok((page, more))
    }
}

/// The answer to a retried key from the event stored under it: the event when the digest is the
/// same, else a conflict.
pub fn check_existing(
    run: &RunId,
    stored: StoredEvent,
    event: &PreparedEvent,
) -> Result<StoredEvent, StoreError> {
    if stored.append_idempotency_key != event.key {
        return Err(StoreError::Internal(format!(
            "run {run}: keys {:?} and {:?} have the same hash",
            stored.append_idempotency_key, event.key
        )));
    }
    same_or_conflict(run, stored.sequence, &stored.digest, event)?;
    Ok(stored)
}

/// The idempotency rule: same key and digest is the original event (at `sequence`); another
/// digest conflicts.
pub fn same_or_conflict(
    run: &RunId,
    sequence: u64,
    stored_digest: &str,
    event: &PreparedEvent,
) -> Result<(), StoreError> {
    if stored_digest == event.digest {
        Ok(())
    } else {
        Err(StoreError::Conflict {
            run: run.to_string(),
            key: event.key.clone(),
            sequence,
            stored_digest: stored_digest.to_string(),
            request_digest: event.digest.clone(),
        })
    }
}
