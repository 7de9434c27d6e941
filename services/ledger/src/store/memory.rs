//! In-memory backend: per process, data and locks live in the store instance. The baseline for
//! benchmarks and the default for tests that do not need durability.

use super::{child_name, encode_document, prefix_range, DurableJsonStore, LockBody, StoreError};
use crate::key::Key;
use async_trait::async_trait;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    docs: RwLock<BTreeMap<String, Value>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock_for(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.inner.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(key.as_str().to_string()).or_default().clone()
    }

    /// Drops the lock entry once nobody holds or waits for it, so the map does not grow forever.
    fn release_lock_entry(&self, key: &Key) {
        let mut locks = self.inner.locks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = locks.get(key.as_str()) {
            if Arc::strong_count(entry) == 1 {
                locks.remove(key.as_str());
            }
        }
    }
}

#[async_trait]
impl DurableJsonStore for MemoryStore {
    async fn read_json(&self, key: &Key) -> Result<Option<Value>, StoreError> {
        let docs = self.inner.docs.read().unwrap_or_else(|p| p.into_inner());
        Ok(docs.get(key.as_str()).cloned())
    }

    async fn write_json(&self, key: &Key, value: &Value) -> Result<(), StoreError> {
        encode_document(key, value)?;
        let mut docs = self.inner.docs.write().unwrap_or_else(|p| p.into_inner());
        docs.insert(key.as_str().to_string(), value.clone());
        Ok(())
    }

    async fn remove(&self, key: &Key) -> Result<bool, StoreError> {
        let mut docs = self.inner.docs.write().unwrap_or_else(|p| p.into_inner());
        Ok(docs.remove(key.as_str()).is_some())
    }

    async fn list_dir(&self, prefix: Option<&Key>) -> Result<Vec<String>, StoreError> {
        let (lower, upper) = prefix_range(prefix);
        let docs = self.inner.docs.read().unwrap_or_else(|p| p.into_inner());
        let mut names = std::collections::BTreeSet::new();
        let range: Box<dyn Iterator<Item = &String>> = match &upper {
            Some(upper) => Box::new(docs.range(lower.clone()..upper.clone()).map(|(k, _)| k)),
            None => Box::new(docs.keys()),
        };
        for key in range {
            if let Some(name) = child_name(key, &lower) {
                names.insert(name.to_string());
            }
        }
        Ok(names.into_iter().collect())
    }

    async fn with_lock(&self, key: &Key, body: LockBody<'_>) -> Result<(), StoreError> {
        let lock = self.lock_for(key);
        let result = {
            let _guard = lock.lock().await;
            body(Arc::new(self.clone())).await
        };
        drop(lock);
        self.release_lock_entry(key);
        result
    }
}
