//! The five-method `DurableJsonStore`: the only thing a storage backend implements. All ledger logic
//! is written once over it (see `crate::ledger`), so a new backend never re-implements a ledger.

mod file;
mod memory;
mod postgres;

pub use file::FileStore;
pub use memory::MemoryStore;
pub use postgres::{PostgresStore, PostgresStoreOptions};

use crate::key::{Key, KeyError};
use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::Value;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// Largest accepted document, serialized as compact JSON. Ledger records are small; a payload that
/// needs more belongs in an artifact store, not in a coordination ledger.
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    InvalidKey(#[from] KeyError),
    #[error("document {key} is {size} bytes, above the {limit}-byte limit")]
    TooLarge {
        key: String,
        size: usize,
        limit: usize,
    },
    #[error("document {key} is not valid JSON: {detail}")]
    Corrupt { key: String, detail: String },
    #[error("storage I/O failed: {0}")]
    Io(String),
    #[error("database failed: {0}")]
    Database(String),
    /// The lock body chose to roll back (its own error is reported by the caller).
    #[error("lock body aborted")]
    Aborted,
}

/// A view of the store handed to a lock body. For PostgreSQL it runs on the transaction that holds
/// the advisory lock (so the body's writes commit atomically with the lock's release); for the
/// other backends it is the store itself.
pub type LockedStore = Arc<dyn DurableJsonStore>;

/// The body run while a lock is held. Returning `Err` rolls back where the backend can (PostgreSQL).
pub type LockBody<'a> =
    Box<dyn FnOnce(LockedStore) -> BoxFuture<'a, Result<(), StoreError>> + Send + 'a>;

/// Five primitives a backend provides. Keys are validated `Key`s; documents are JSON values of at
/// most `MAX_DOCUMENT_BYTES`.
#[async_trait]
pub trait DurableJsonStore: Send + Sync + 'static {
    /// The document at `key`, or `None` if there is none.
    async fn read_json(&self, key: &Key) -> Result<Option<Value>, StoreError>;
    /// Replaces the document at `key` atomically: a reader sees the old or the new value, never a
    /// mix, and once this returns the value survives a crash of this process (and, for the file
    /// backend, of the machine).
    async fn write_json(&self, key: &Key, value: &Value) -> Result<(), StoreError>;
    /// Removes the document at `key`; `true` if there was one.
    async fn remove(&self, key: &Key) -> Result<bool, StoreError>;
    /// Sorted, de-duplicated names of the documents and sub-directories directly under `prefix`
    /// (the whole store when `None`).
    async fn list_dir(&self, prefix: Option<&Key>) -> Result<Vec<String>, StoreError>;
    /// Runs `body` while holding an exclusive lock named `key`, across every process sharing the
    /// store (within this instance for the memory backend). Locks are not re-entrant: a body must
    /// not lock the same key again. A holder that dies releases its lock (kernel for `flock`,
    /// server for PostgreSQL when the connection drops).
    async fn with_lock(&self, key: &Key, body: LockBody<'_>) -> Result<(), StoreError>;
}

/// Typed convenience over `with_lock`: runs `f` under the lock and returns its own result. A body
/// error rolls back (where supported) and is returned as is.
pub async fn locked<T, E, F, Fut>(store: &dyn DurableJsonStore, key: &Key, f: F) -> Result<T, E>
where
    F: FnOnce(LockedStore) -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Send,
    E: From<StoreError> + Send,
{
    let slot: Arc<Mutex<Option<Result<T, E>>>> = Arc::new(Mutex::new(None));
    let inner = slot.clone();
    let outcome = store
        .with_lock(
            key,
            Box::new(move |view| {
                Box::pin(async move {
                    let result = f(view).await;
                    let ok = result.is_ok();
                    *inner.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
                    if ok {
                        Ok(())
                    } else {
                        Err(StoreError::Aborted)
                    }
                })
            }),
        )
        .await;
    let body_result = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    match (outcome, body_result) {
        (Ok(()), Some(result)) => result,
        (Err(StoreError::Aborted), Some(Err(err))) => Err(err),
        (Err(err), _) => Err(err.into()),
        (Ok(()), None) => Err(StoreError::Io("lock body did not run".into()).into()),
    }
}

/// Serializes a document and enforces the size limit, so every backend rejects the same inputs.
pub(crate) fn encode_document(key: &Key, value: &Value) -> Result<Vec<u8>, StoreError> {
    let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Corrupt {
        key: key.to_string(),
        detail: e.to_string(),
    })?;
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(StoreError::TooLarge {
            key: key.to_string(),
            size: bytes.len(),
            limit: MAX_DOCUMENT_BYTES,
        });
    }
    Ok(bytes)
}

/// First segment of `full` below `prefix` (which must end with `/`), for `list_dir` over flat key
/// spaces (memory, PostgreSQL).
pub(crate) fn child_name<'k>(full: &'k str, prefix: &str) -> Option<&'k str> {
    let rest = full.strip_prefix(prefix)?;
    rest.split('/').next().filter(|s| !s.is_empty())
}

/// The `[lower, upper)` range of flat keys strictly under `prefix`: `p/` up to `p0` (`0` follows
/// `/` in byte order).
pub(crate) fn prefix_range(prefix: Option<&Key>) -> (String, Option<String>) {
    match prefix {
        None => (String::new(), None),
        Some(p) => (format!("{}/", p.as_str()), Some(format!("{}0", p.as_str()))),
    }
}
