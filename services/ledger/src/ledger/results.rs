//! Result ledger: put once, get. Same content again is an idempotent success; other content under
//! the same key is a conflict (as with idempotency keys: never silently replace an answer).

use super::error::{LedgerError, LedgerResult};
use super::space::{read, write, Space};
use crate::clock::Millis;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PutOutcome {
    /// This call stored the value.
    Created,
    /// The same value was already stored.
    AlreadyStored,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StoredResult {
    pub key: String,
    pub value: Value,
    pub stored_at: Millis,
}

#[async_trait]
pub trait ResultLedger: Send + Sync {
    async fn put(&self, key: &str, value: Value) -> LedgerResult<PutOutcome>;
    async fn get(&self, key: &str) -> LedgerResult<Option<StoredResult>>;
}

pub(crate) struct DurableResults {
    pub space: Space,
}

const DIR: &str = "results";

#[async_trait]
impl ResultLedger for DurableResults {
    async fn put(&self, key: &str, value: Value) -> LedgerResult<PutOutcome> {
        let doc = self.space.key(DIR, &[key])?;
        let record = StoredResult {
            key: key.to_string(),
            value,
            stored_at: self.space.now(),
        };
        self.space
            .locked(&doc, move |store, doc| async move {
                match read::<StoredResult>(store.as_ref(), &doc).await? {
                    Some(existing) if existing.value == record.value => {
                        Ok(PutOutcome::AlreadyStored)
                    }
                    Some(_) => Err(LedgerError::Conflict(format!(
                        "result {} is already stored with other content",
                        record.key
                    ))),
                    None => {
                        write(store.as_ref(), &doc, &record).await?;
                        Ok(PutOutcome::Created)
                    }
                }
            })
            .await
    }

    async fn get(&self, key: &str) -> LedgerResult<Option<StoredResult>> {
        read(self.space.store.as_ref(), &self.space.key(DIR, &[key])?).await
    }
}
