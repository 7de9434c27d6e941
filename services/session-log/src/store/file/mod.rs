//! File store: one NDJSON file holding every run, a single-process reference backend.
//!
//! Layout: `PATH` is the data file; each line is one self-checking record (see [`record`]). An
//! exclusive `flock` on it keeps a second server off the same file. At start the whole file is
//! verified and indexed, streamed one record at a time; a torn final fragment is truncated;
//! damaged runs are refused for replay. The index keeps per event its sequence, key, digest and
//! the position of its record, never its body: reads load their page's records from the file and
//! verify them ([`reader`]), so memory does not grow with event sizes, and a reload after a crash
//! needs no more than the index (issue 30). Appends go through one writer thread that
//! group-commits them (see [`writer`]); past a session's or namespace's byte quota
//! (`store/quota.rs`) an append is refused and nothing is written.
//!
//! Durability with `sync` on (the default): the file and its parent directory are fsynced at start
//! (so a newly created file survives a crash), and every append is acknowledged only after the
//! `fdatasync` that covers it. If any of these fails, the store refuses to start or poisons itself
//! (fail closed).

pub mod fs;
mod reader;
mod record;
mod recovery;
mod shared;
mod writer;

use super::quota::Quotas;
use super::types::{new_batch_histogram, AppendOutcome, StoreError};
use crate::model::{PreparedEvent, RunId, StoredEvent};
use anyhow::{bail, Context};
use fs::SyncFs;
use prometheus_client::metrics::histogram::Histogram;
use shared::Shared;
use std::fs::{File, OpenOptions};
use std::io::BufReader;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};

/// File store settings.
#[derive(Clone)]
pub struct FileStoreOptions {
    /// fsync before acknowledging (default true). `false` gives up crash durability.
    pub sync: bool,
    pub batch_sizes: Histogram,
    /// Byte quotas per session and namespace.
    pub quotas: Quotas,
}

impl Default for FileStoreOptions {
    fn default() -> Self {
        Self {
            sync: true,
            batch_sizes: new_batch_histogram(),
            quotas: Quotas::default(),
        }
    }
}

pub struct FileStore {
    shared: Arc<Shared>,
    /// `None` only while dropping.
    tx: Option<mpsc::Sender<writer::Job>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for FileStore {
    /// Closes the queue and waits for the writer to finish its batch and release the file (and
    /// its lock), so a store reopened right after sees everything and is not locked out.
    fn drop(&mut self) {
        self.tx.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl FileStore {
    /// Opens (or creates) the store at `path`. Refuses when the file is locked by another
    /// process, the parent directory is missing, or (with sync) an fsync fails.
    pub async fn open(
        path: PathBuf,
        options: FileStoreOptions,
        fs: Arc<dyn SyncFs>,
    ) -> anyhow::Result<Self> {
        tokio::task::spawn_blocking(move || Self::open_blocking(path, options, fs))
            .await
            .context("file store open task failed")?
    }

    fn open_blocking(
        path: PathBuf,
        options: FileStoreOptions,
        fs: Arc<dyn SyncFs>,
    ) -> anyhow::Result<Self> {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            bail!(
                "file store {}: directory {} does not exist",
                path.display(),
                parent.display()
            );
        }
        let (file, created) = open_or_create(&path)?;
        lock_exclusive(&file, &path)?;
        let refuse = |what: &str, e: std::io::Error| {
            anyhow::anyhow!(
                "file store {}: {what} failed: {e}; refusing to start because acknowledged appends could not be made durable (fail closed; --sync=false opts out of durability)",
                path.display()
            )
        };
        if options.sync {
            fs.sync_data(&file)
                .map_err(|e| refuse("fdatasync of the data file", e))?;
            fs.sync_dir(&parent)
                .map_err(|e| refuse(&format!("fsync of directory {}", parent.display()), e))?;
        }
        let loaded = recovery::scan(BufReader::with_capacity(1 << 20, &file))
            .with_context(|| format!("cannot read file store {}", path.display()))?;
        let torn = loaded.file_len - loaded.complete_len;
        if torn > 0 {
            tracing::warn!(
                path = %path.display(),
                "truncating a torn final record of {torn} bytes (never acknowledged: it has no newline)"
            );
            file.set_len(loaded.complete_len)
                .with_context(|| format!("cannot truncate torn tail of {}", path.display()))?;
            if options.sync {
                fs.sync_data(&file)
                    .map_err(|e| refuse("fdatasync after truncation", e))?;
            }
        }
        for problem in &loaded.problems {
            tracing::error!(path = %path.display(), "damaged record, replay refused: {problem}");
        }
        let runs = loaded.index.runs.len();
        let events: usize = loaded.index.runs.values().map(|r| r.events.len()).sum();
        let reader = File::open(&path)
            .with_context(|| format!("cannot open file store {} for reading", path.display()))?;
        let end = loaded.complete_len;
        if options.sync {
            tracing::info!(path = %path.display(), created, runs, events, "file store open, sync on (fdatasync before every acknowledgement)");
        } else {
            tracing::warn!(path = %path.display(), created, runs, events, "file store open with --sync=false: appends are acknowledged BEFORE they are durable; a crash or power loss can lose acknowledged events");
        }
        let shared = Arc::new(Shared {
            path,
            fs,
            index: RwLock::new(loaded.index),
            reader,
            quotas: options.quotas,
            poisoned: Mutex::new(None),
            batch_sizes: options.batch_sizes,
        });
        let (tx, rx) = mpsc::channel(writer::MAX_QUEUE);
        let writer = writer::Writer {
            shared: shared.clone(),
            file,
            sync: options.sync,
            end,
        };
        let writer = std::thread::Builder::new()
            .name("session-log-file-writer".into())
            .spawn(move || writer.run(rx))
            .context("cannot start the file store writer thread")?;
        Ok(Self {
            shared,
            tx: Some(tx),
            writer: Some(writer),
        })
    }

    pub async fn append(
        &self,
        run: &RunId,
        event: PreparedEvent,
    ) -> Result<AppendOutcome, StoreError> {
        if let Some(reason) = self.shared.poisoned() {
            return Err(StoreError::Poisoned(reason));
        }
        let (reply, answer) = oneshot::channel();
        let job = writer::Job {
            run: run.clone(),
            event,
            reply,
        };
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("file store closing".into()))?;
        tx.send(job)
            .await
            .map_err(|_| StoreError::Unavailable("file store writer stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Internal("file store writer dropped an append".into()))?
    }

    /// A page of `run` (see `Index::page` for `limit` and `max_bytes`): the positions are taken
    /// under the index lock, the records are then loaded and verified off the async threads.
    pub async fn read(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
        max_bytes: u64,
    ) -> Result<(Vec<StoredEvent>, bool), StoreError> {
        let (positions, more) = self
            .shared
            .index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .page(run, after, limit, max_bytes)?;
        if positions.is_empty() {
            return Ok((Vec::new(), more));
        }
        let shared = self.shared.clone();
        let run = run.clone();
        let events = tokio::task::spawn_blocking(move || {
            reader::load_page(&shared.reader, &run, after + 1, &positions)
        })
        .await
        .map_err(|e| StoreError::Internal(format!("file store read task failed: {e}")))??;
        Ok((events, more))
    }

    /// The reason the store refuses appends, if it was poisoned by a failed write or sync.
    pub fn poisoned(&self) -> Option<String> {
        self.shared.poisoned()
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }
}

fn open_or_create(path: &Path) -> anyhow::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.read(true).append(true);
    match options.clone().create_new(true).open(path) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok((
            options
                .open(path)
                .with_context(|| format!("cannot open file store {}", path.display()))?,
            false,
        )),
        Err(e) => Err(e).with_context(|| format!("cannot create file store {}", path.display())),
    }
}

/// One process per file: a second server on the same file would interleave sequences.
fn lock_exclusive(file: &File, path: &Path) -> anyhow::Result<()> {
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        bail!(
            "file store {} is locked by another process ({err}); the file store serves one process, use postgres:URL for several replicas",
            path.display()
        );
    }
    Ok(())
}
