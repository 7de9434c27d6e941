//! File backend: one JSON file per document under a root directory; the local host's default.
//!
//! Writes go to a temp file in the same directory, are fsynced, renamed over the target and the
//! directory is fsynced, so a crash leaves the old or the new document, never a torn one. Locks are
//! `flock` on a per-key lock file: they hold across processes and vanish when the holder dies.
//! Names starting with `.` (temp and lock files) are never valid key segments, so they cannot
//! collide with documents.

use super::{encode_document, DurableJsonStore, LockBody, StoreError};
use crate::key::Key;
use async_trait::async_trait;
use fs4::fs_std::FileExt;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct FileStore {
    root: Arc<PathBuf>,
}

impl FileStore {
    /// Opens (creating if needed) a store rooted at `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| io_err(&root, e))?;
        Ok(FileStore {
            root: Arc::new(root),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn doc_path(&self, key: &Key) -> PathBuf {
        let mut path = self.root.to_path_buf();
        if let Some(parent) = key.parent() {
            path.extend(parent.segments());
        }
        path.push(format!("{}.json", key.name()));
        path
    }

    fn dir_path(&self, key: Option<&Key>) -> PathBuf {
        let mut path = self.root.to_path_buf();
        if let Some(key) = key {
            path.extend(key.segments());
        }
        path
    }

    fn lock_path(&self, key: &Key) -> PathBuf {
        let mut path = self.dir_path(key.parent().as_ref());
        path.push(format!(".{}.lock", key.name()));
        path
    }

    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| StoreError::Io(format!("blocking task failed: {e}")))?
    }
}

fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(format!("{}: {e}", path.display()))
}

/// Creates `dir` and any missing ancestors below the store root, fsyncing each parent so the new
/// directory entries are durable before a document is written into them.
fn ensure_dir(root: &Path, dir: &Path) -> Result<(), StoreError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut cur = dir;
    while !cur.is_dir() && cur != root {
        missing.push(cur.to_path_buf());
        match cur.parent() {
            Some(p) => cur = p,
            None => break,
        }
    }
    for d in missing.iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(d, e)),
        }
        if let Some(parent) = d.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err(dir, e))
}

fn write_atomic(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(root);
    ensure_dir(root, dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("doc");
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| io_err(&tmp, e))?;
        file.write_all(bytes).map_err(|e| io_err(&tmp, e))?;
        // fsync failures are never retried: the page cache may have dropped the dirty pages
        // (fsyncgate), so the write fails closed.
        file.sync_all().map_err(|e| io_err(&tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| io_err(path, e))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[async_trait]
impl DurableJsonStore for FileStore {
    async fn read_json(&self, key: &Key) -> Result<Option<Value>, StoreError> {
        let path = self.doc_path(key);
        let key = key.clone();
        Self::blocking(move || match fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        key: key.to_string(),
                        detail: e.to_string(),
                    })
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path, e)),
        })
        .await
    }

    async fn write_json(&self, key: &Key, value: &Value) -> Result<(), StoreError> {
        let bytes = encode_document(key, value)?;
        let path = self.doc_path(key);
        let root = self.root.clone();
        Self::blocking(move || write_atomic(&root, &path, &bytes)).await
    }

    async fn remove(&self, key: &Key) -> Result<bool, StoreError> {
        let path = self.doc_path(key);
        Self::blocking(move || match fs::remove_file(&path) {
            Ok(()) => {
                if let Some(dir) = path.parent() {
                    sync_dir(dir)?;
                }
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(&path, e)),
        })
        .await
    }

    async fn list_dir(&self, prefix: Option<&Key>) -> Result<Vec<String>, StoreError> {
        let dir = self.dir_path(prefix);
        Self::blocking(move || {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e)
                    if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory =>
                {
                    return Ok(Vec::new())
                }
                Err(e) => return Err(io_err(&dir, e)),
            };
            let mut names = BTreeSet::new();
            for entry in entries {
                let entry = entry.map_err(|e| io_err(&dir, e))?;
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if name.starts_with('.') {
                    continue;
                }
                let is_dir = entry.file_type().map_err(|e| io_err(&dir, e))?.is_dir();
                if is_dir {
                    names.insert(name);
                } else if let Some(doc) = name.strip_suffix(".json") {
                    names.insert(doc.to_string());
                }
            }
            Ok(names.into_iter().collect())
        })
        .await
    }

    async fn with_lock(&self, key: &Key, body: LockBody<'_>) -> Result<(), StoreError> {
        let lock_path = self.lock_path(key);
        let root = self.root.clone();
        // flock blocks a thread while waiting; the tokio blocking pool absorbs that. Lock files are
        // kept after use: deleting one while another process waits on it would split the lock.
        let lock_file = Self::blocking(move || {
            if let Some(dir) = lock_path.parent() {
                ensure_dir(&root, dir)?;
            }
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&lock_path)
                .map_err(|e| io_err(&lock_path, e))?;
            file.lock_exclusive().map_err(|e| io_err(&lock_path, e))?;
            Ok(file)
        })
        .await?;
        let result = body(Arc::new(self.clone())).await;
        // Closing the descriptor releases the flock.
        drop(lock_file);
        result
    }
}
