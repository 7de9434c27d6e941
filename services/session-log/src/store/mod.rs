//! The stores behind the session log, with one contract (checked by `tests/suite/conformance.rs`):
//!
//! - per run, sequences start at 1 and have no gaps; concurrent appends to one run serialize;
//! - an append returns only after its event is durable in the store (for the file store with
//!   `sync` on: after `fdatasync`; for PostgreSQL: after COMMIT);
//! - a key seen before with the same digest returns the original event and writes nothing; with
//!   another digest it is a [`StoreError::Conflict`];
//! - a read of a run whose stored records are damaged fails with [`StoreError::RunCorrupt`]
//!   rather than returning a partial history;
//! - a read page holds at most [`MAX_READ_LIMIT`] events and, past its first event, at most
//!   [`MAX_PAGE_BYTES`] of them, so that what a read costs does not grow with the run (issue 30);
//! - an append that would take its session or namespace past its byte quota ([`Quotas`]) is
//!   refused with [`StoreError::QuotaExceeded`] and writes nothing; a retried key already stored
//!   is still answered.

mod file;
mod index;
mod memory;
mod postgres;
mod quota;
mod types;

pub use file::fs::{FaultFs, FsOp, RealFs, SyncFs};
pub use file::{FileStore, FileStoreOptions};
pub use memory::MemoryStore;
pub use postgres::PostgresStore;
pub use quota::{Quotas, DEFAULT_MAX_NAMESPACE_BYTES, DEFAULT_MAX_SESSION_BYTES, MIN_EVENT_BYTES};
pub use types::{new_batch_histogram, AppendOutcome, StoreError};

use crate::model::{PreparedEvent, RunId, StoredEvent};
use kube_harness_service_kit::StoreSpec;
use prometheus_client::metrics::histogram::Histogram;
use std::sync::Arc;

/// Most events a read page holds (the wire's limit, defined with the model).
pub use crate::model::MAX_READ_LIMIT;
/// Most bytes of events (their stored JSON) a read page holds past its first event: a page of
/// 1,000 events of the largest payload would otherwise be 256 MB in memory, per read.
pub const MAX_PAGE_BYTES: u64 = 4 * 1024 * 1024;

/// Settings shared by the stores.
#[derive(Clone)]
pub struct StoreOptions {
    /// File store: fsync before acknowledging (default true).
    pub sync: bool,
    /// Records how many appends shared one commit (fsync or transaction).
    pub batch_sizes: Histogram,
    /// Byte quotas per session and namespace.
    pub quotas: Quotas,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            sync: true,
            batch_sizes: new_batch_histogram(),
            quotas: Quotas::default(),
        }
    }
}

/// One of the three stores.
#[derive(Clone)]
pub enum Store {
    Memory(Arc<MemoryStore>),
    File(Arc<FileStore>),
    Postgres(Arc<PostgresStore>),
}

impl Store {
    /// Opens the store a `--store` spec names. Fails (so the server refuses to start) when the
    /// store cannot guarantee what it promises, e.g. fsync fails on the file store's disk.
    pub async fn open(spec: &StoreSpec, options: StoreOptions) -> anyhow::Result<Store> {
        Ok(match spec {
            StoreSpec::Memory => {
                tracing::warn!(
                    "session log store: MEMORY. Events live only in this process and are lost when it exits; use --store file:PATH or postgres:URL for anything real"
                );
                Store::Memory(Arc::new(MemoryStore::with_quotas(options.quotas)))
            }
            StoreSpec::File(path) => {
                let opts = FileStoreOptions {
                    sync: options.sync,
                    batch_sizes: options.batch_sizes.clone(),
                    quotas: options.quotas,
                };
                let store = FileStore::open(path.clone(), opts, Arc::new(RealFs)).await?;
                Store::File(Arc::new(store))
            }
            StoreSpec::Postgres(url) => {
                if !options.sync {
                    tracing::warn!("--sync=false has no effect on the PostgreSQL store (it commits transactions)");
                }
                Store::Postgres(Arc::new(
                    PostgresStore::connect(url, options.batch_sizes, options.quotas).await?,
                ))
            }
        })
    }

    /// Short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::File(_) => "file",
            Store::Postgres(_) => "postgres",
        }
    }

    /// Why the store refuses appends until restarted (a file store poisoned by a failed write
    /// or fsync), if it does.
    pub fn failure(&self) -> Option<String> {
        match self {
            Store::File(s) => s.poisoned(),
            Store::Memory(_) | Store::Postgres(_) => None,
        }
    }

    /// Appends `event` to `run` (see the module docs for the contract).
    pub async fn append(
        &self,
        run: &RunId,
        event: PreparedEvent,
    ) -> Result<AppendOutcome, StoreError> {
        match self {
            Store::Memory(s) => s.append(run, event),
            Store::File(s) => s.append(run, event).await,
            Store::Postgres(s) => s.append(run, event).await,
        }
    }

    /// Events of `run` with sequence > `after`, at most `limit` (capped at [`MAX_READ_LIMIT`])
    /// and [`MAX_PAGE_BYTES`] (past the first), in order, and whether more follow.
    pub async fn read(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<StoredEvent>, bool), StoreError> {
        let limit = limit.clamp(1, MAX_READ_LIMIT);
        let (events, more) = match self {
            Store::Memory(s) => s.read(run, after, limit, MAX_PAGE_BYTES),
            Store::File(s) => s.read(run, after, limit, MAX_PAGE_BYTES).await,
            Store::Postgres(s) => s.read(run, after, limit, MAX_PAGE_BYTES).await,
        }?;
        // Belt and braces for every store: a page is contiguous from `after + 1`, or the run's
        // history is damaged and must not be replayed.
        for (i, event) in events.iter().enumerate() {
            let expected = after + 1 + i as u64;
            if event.sequence != expected || event.run_id != run.as_str() {
                return Err(StoreError::RunCorrupt {
                    run: run.to_string(),
                    reason: format!(
                        "sequence gap: expected {expected}, found {} (run {:?})",
                        event.sequence, event.run_id
                    ),
                });
            }
        }
        Ok((events, more))
    }
}
