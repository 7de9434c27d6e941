//! Where a ledger keeps its documents: a root key, a store and a clock, plus typed read/write.

use super::error::{LedgerError, LedgerResult};
use crate::clock::{Clock, Millis};
use crate::key::{validate_segment, Key};
use crate::store::{locked, DurableJsonStore, LockedStore};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Longest accepted lease, visibility timeout or delay: one week. Longer values are almost
/// certainly unit mistakes (seconds vs milliseconds) and would park items for ages.
pub const MAX_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;

#[derive(Clone)]
pub(crate) struct Space {
    pub store: Arc<dyn DurableJsonStore>,
    pub root: Key,
    pub clock: Arc<dyn Clock>,
}

impl Space {
    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// `root/<dir>/<parts...>`, each part validated as a single segment (user ids cannot contain
    /// `/`, `..` or NUL).
    pub fn key(&self, dir: &str, parts: &[&str]) -> LedgerResult<Key> {
        let mut key = self.root.join(dir)?;
        for part in parts {
            validate_segment(part)?;
            key = key.join(part)?;
        }
        Ok(key)
    }

    pub async fn list(&self, dir: &Key) -> LedgerResult<Vec<String>> {
        Ok(self.store.list_dir(Some(dir)).await?)
    }

    pub async fn locked<T, F, Fut>(&self, key: &Key, f: F) -> LedgerResult<T>
    where
        F: FnOnce(LockedStore, Key) -> Fut + Send,
        Fut: Future<Output = LedgerResult<T>> + Send,
        T: Send,
    {
        let owned = key.clone();
        locked(self.store.as_ref(), key, move |store| f(store, owned)).await
    }
}

pub(crate) async fn read<T: DeserializeOwned>(
    store: &dyn DurableJsonStore,
    key: &Key,
) -> LedgerResult<Option<T>> {
    match store.read_json(key).await? {
        None => Ok(None),
        Some(value) => serde_json::from_value(value)
            .map(Some)
            .map_err(|e| LedgerError::Store(format!("record {key} does not parse: {e}"))),
    }
}

pub(crate) async fn write<T: Serialize>(
    store: &dyn DurableJsonStore,
    key: &Key,
    record: &T,
) -> LedgerResult<()> {
    let value = serde_json::to_value(record)
        .map_err(|e| LedgerError::Store(format!("record {key} does not serialize: {e}")))?;
    Ok(store.write_json(key, &value).await?)
}

/// A generated id that sorts by `at` (creation or due time), then by creation order within this
/// process, with a random tail so processes never collide.
pub(crate) fn sortable_id(at: Millis) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tail = uuid::Uuid::new_v4().simple().to_string();
    format!("{at:013}-{n:010}-{}", &tail[..8])
}

pub(crate) fn check_duration(name: &str, ms: u64, allow_zero: bool) -> LedgerResult<()> {
    if (!allow_zero && ms == 0) || ms > MAX_DURATION_MS {
        let low = if allow_zero { 0 } else { 1 };
        return Err(LedgerError::InvalidInput(format!(
            "{name} must be between {low} and {MAX_DURATION_MS} ms, got {ms}"
        )));
    }
    Ok(())
}

pub(crate) fn check_name(what: &str, value: &str) -> LedgerResult<()> {
    if value.is_empty() || value.len() > 256 || value.chars().any(char::is_control) {
        return Err(LedgerError::InvalidInput(format!(
            "{what} must be 1-256 characters without control characters"
        )));
    }
    Ok(())
}

pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
