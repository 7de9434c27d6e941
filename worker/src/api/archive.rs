//! A directory in or out of a session as tar (`PUT` and `GET /v1/archive?path=…`; docs/worker-
//! api.md, "Files"). The tar itself is the workspace crate's, the one implementation of safe tar
//! reading and writing (`workspace::pack_tree`, `workspace::plan_tree`); here is what ties it to
//! a session's mounts and the HTTP answer.
//!
//! Out: the tree below the directory is walked fd-relative without following a symlink
//! (a symlink goes into the archive as a symlink, its target as data), regular files and
//! directories with their modes and times; special files are left out. The tar is produced by a
//! blocking task into a bounded channel, so a large tree streams in constant memory, and a client
//! that goes away stops the walk.
//!
//! In: the body is spooled outside every mount (bounded by `--max-archive-bytes`), then checked
//! whole before anything is written: every entry's path is relative with plain names, its type is
//! a regular file, a directory or a symlink (hard links, devices and fifos are refused), no entry
//! lies below a symlink (one of the archive's, or one already in the session), and nothing would
//! put a file where a directory is or the reverse. Only then, between commands, are the entries
//! placed, each file through a new file renamed over its name, never through a symlink. A refused
//! archive writes nothing.

use super::error::WorkerError;
use super::files::{self, Target};
use axum::body::Bytes;
use kube_harness_workspace::safe_fs::{self, WalkError};
use kube_harness_workspace::{FileChange, TreeError, TreeLimits, TreeOptions};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;
use tokio::sync::mpsc;

/// Entries one archive may hold, in or out (a bound on the work one request can cause).
pub const MAX_ENTRIES: usize = 200_000;
/// Directory depth below the archive's root.
const MAX_DEPTH: usize = 256;
/// Bytes per chunk sent to the client.
const CHUNK: usize = 256 << 10;

fn limits() -> TreeLimits {
    TreeLimits {
        max_entries: MAX_ENTRIES,
        max_depth: MAX_DEPTH,
    }
}

/// Streams the tree below `target` (a directory) as tar into `tx`; runs on a blocking thread.
/// Errors after the first byte cut the stream short (the client sees a truncated tar).
pub fn write_tar(target: &Target, tx: mpsc::Sender<std::io::Result<Bytes>>) {
    let sink = ChannelWriter {
        tx: tx.clone(),
        buf: Vec::with_capacity(CHUNK),
    };
    let result =
        open_dir(target).and_then(|dir| kube_harness_workspace::pack_tree(&dir, sink, limits()));
    if let Err(e) = result {
        let _ = tx.blocking_send(Err(e));
    }
}

fn open_dir(target: &Target) -> std::io::Result<OwnedFd> {
    let root = safe_fs::open_root(&target.mount.backing_path)?;
    safe_fs::open_dir_beneath(&root, &target.rel).map_err(WalkError::into_io)
}

/// A `Write` that sends full chunks to the client; a gone client is a write error.
struct ChannelWriter {
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| std::io::Error::other("the client went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// What an archive upload placed, and what it did not place as the archive asked.
pub struct Extracted {
    pub changes: Vec<FileChange>,
    /// One line per entry whose mode was not set as the archive has it (setuid, setgid and
    /// sticky bits are never set, a directory stays open to its owner, an existing directory
    /// keeps its mode), at most 100 and then a count.
    pub warnings: Vec<String>,
}

/// Checks a spooled archive against itself and the session's tree below `target`, then places
/// it (blocking: run it off the async threads; the caller holds the session). Returns the changes
/// and the modes it could not keep.
pub fn extract(
    target: &Target,
    mut spool: std::fs::File,
    writable: impl Fn(&Path) -> bool,
) -> Result<Extracted, WorkerError> {
    let opts = TreeOptions {
        limits: limits(),
        harness_root: target.harness.clone(),
        temp_name: files::temp_name,
    };
    let plan = kube_harness_workspace::plan_tree(&mut spool, &opts).map_err(refused)?;
    // The target directory is writable (checked before the body was read), but a read-only
    // prefix may lie below it: every entry is checked, and one there refuses the whole archive.
    if let Some(rel) = plan
        .paths()
        .find(|rel| !writable(&target.harness.join(rel)))
    {
        return Err(WorkerError::ReadOnly(format!(
            "{} is read-only in this session",
            target.harness.join(rel).display()
        )));
    }
    let created = files::missing_dirs(target, &target.rel)?;
    let root = safe_fs::open_root(&target.mount.backing_path).map_err(|e| {
        WorkerError::Io(format!(
            "opening its mount under {}: {e}",
            target.harness.display()
        ))
    })?;
    let base = plan.open_base(&root, &target.rel).map_err(refused)?;
    // Checked against what is there before anything is written.
    if let Err(e) = plan.check(&base) {
        files::remove_created(target, &created);
        return Err(refused(e));
    }
    let placed = plan.place(&base, &mut spool).map_err(refused)?;
    Ok(Extracted {
        changes: placed.changes,
        warnings: placed.warnings,
    })
}

/// The answer to an archive the workspace did not unpack.
fn refused(e: TreeError) -> WorkerError {
    match e {
        TreeError::BadArchive(why) => WorkerError::BadArchive(why),
        TreeError::Symlink(message) => WorkerError::BadPath(message),
        TreeError::Conflict(message) => WorkerError::KindConflict(message),
        TreeError::Io(message) => WorkerError::Io(message),
    }
}
