//! The file store's state that its handle (reads) and its writer thread (appends) share. A leaf
//! of file/: mod.rs builds it and starts the writer, writer.rs updates it.

use super::fs::SyncFs;
use crate::store::index::{Index, Kept};
use crate::store::quota::Quotas;
use prometheus_client::metrics::histogram::Histogram;
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

/// Where one event's record (its whole line, newline included) is in the data file: all the
/// index keeps of an event, so memory does not grow with event sizes (reads load the records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    pub offset: u64,
    pub len: u64,
}

impl Kept for Position {
    fn bytes(&self) -> u64 {
        self.len
    }
}

/// State shared by the store handle (readers) and its writer thread.
pub(crate) struct Shared {
    pub(super) path: PathBuf,
    pub(super) fs: Arc<dyn SyncFs>,
    pub(super) index: RwLock<Index<Position>>,
    /// The data file opened for positioned reads (`pread`), shared by every reader.
    pub(super) reader: File,
    pub(super) quotas: Quotas,
    pub(super) poisoned: Mutex<Option<String>>,
    pub(super) batch_sizes: Histogram,
}

impl Shared {
    pub(super) fn poisoned(&self) -> Option<String> {
        self.poisoned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Marks the store failed (first reason wins) and returns the reason in force.
    pub(super) fn poison(&self, reason: String) -> String {
        let mut p = self.poisoned.lock().unwrap_or_else(|e| e.into_inner());
        if p.is_none() {
            tracing::error!("file store POISONED, refusing every append until restart: {reason}");
            *p = Some(reason);
        }
        p.clone().unwrap_or_default()
    }
}
