//! Snapshots of the tracked mounts and the diff between two of them, which is what
//! `harness.file.created/modified/deleted` events are made of.
//!
//! Hashing choice: every regular file carries a SHA-256 of its content (SHA-NI makes it ~1.5 GB/s),
//! so "modified" means the bytes or the mode changed, never just a touched mtime. To stay fast
//! when called around every command, `snapshot_since` reuses the previous snapshot's hash for a
//! file whose stat identity (size, mtime, ctime, inode, device, mode) is unchanged, as git's index
//! does; only touched files are read. A file whose timestamps fall within `RACY_MARGIN_NS` of the
//! previous snapshot's start is re-read anyway: before Linux 6.13's multigrain timestamps, file
//! timestamps come from a coarse clock (one tick, at most 10 ms at HZ=100), so a write right
//! after hashing could leave every stat field equal. 20 ms is two ticks at the slowest HZ;
//! filesystems with coarser timestamps (FAT, some network filesystems) are not supported.

use super::error::WorkspaceError;
use super::paths::Exclude;
use super::safe_fs;
use super::spec::WorkspaceSpec;
use super::walk::{walk, Item};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Stat identity is trusted only for files last changed this long before the snapshot began.
pub const RACY_MARGIN_NS: i64 = 20_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
}

/// One object in a snapshot. `mode` is the permission bits (`0o777`); setuid/setgid/sticky are
/// neither tracked nor carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub kind: EntryKind,
    pub size: u64,
    pub mode: u32,
    pub mtime_ns: i64,
    /// Hex SHA-256 of a regular file's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A symlink's target, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Stat identity used to reuse hashes; not part of content equality.
    #[serde(default)]
    pub ctime_ns: i64,
    #[serde(default)]
    pub ino: u64,
    #[serde(default)]
    pub dev: u64,
}

impl Entry {
    /// Same kind, mode and content (bytes for files, target for symlinks). Directory mtimes are
    /// ignored: they change whenever a child does, and the child has its own event.
    pub fn same_content(&self, other: &Entry) -> bool {
        self.kind == other.kind
            && self.mode == other.mode
            && match self.kind {
                EntryKind::Dir => true,
                EntryKind::Symlink => self.target == other.target,
                EntryKind::File => match (&self.sha256, &other.sha256) {
                    (Some(a), Some(b)) => self.size == other.size && a == b,
                    _ => self.same_stat(other),
                },
            }
    }

    fn same_stat(&self, other: &Entry) -> bool {
        (
            self.size,
            self.mtime_ns,
            self.ctime_ns,
            self.ino,
            self.dev,
            self.mode,
        ) == (
            other.size,
            other.mtime_ns,
            other.ctime_ns,
            other.ino,
            other.dev,
            other.mode,
        )
    }

    pub(crate) fn from_meta(meta: &std::fs::Metadata) -> Option<Entry> {
        let ft = meta.file_type();
        let kind = if ft.is_file() {
            EntryKind::File
        } else if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_symlink() {
            EntryKind::Symlink
        } else {
            return None;
        };
        Some(Entry {
            kind,
            size: if kind == EntryKind::Dir {
                0
            } else {
                meta.len()
            },
            mode: if kind == EntryKind::Symlink {
                0o777
            } else {
                meta.permissions().mode() & 0o777
            },
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            sha256: None,
            target: None,
            ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
            ino: meta.ino(),
            dev: meta.dev(),
        })
    }
}

/// The tracked mounts at one moment, keyed by harness path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub entries: BTreeMap<PathBuf, Entry>,
    /// Wall clock (ns since the epoch) when the snapshot began; see `RACY_MARGIN_NS`.
    pub taken_at_ns: i64,
    /// What the walk skipped (non-UTF-8 names, sockets, fifos, devices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Snapshot {
    pub fn get(&self, harness_path: &Path) -> Option<&Entry> {
        self.entries.get(harness_path)
    }

    /// Whether `e`'s cached hash can be trusted for a file whose stat is now `now`.
    pub(crate) fn reusable(&self, harness: &Path, now: &Entry) -> Option<&Entry> {
        let prev = self.entries.get(harness)?;
        self.trusts(prev, now).then_some(prev)
    }

    /// Whether this snapshot's `prev` entry (same path) still describes a file now `now`.
    fn trusts(&self, prev: &Entry, now: &Entry) -> bool {
        let settled = prev.mtime_ns.max(prev.ctime_ns) < self.taken_at_ns - RACY_MARGIN_NS;
        prev.kind == EntryKind::File && prev.sha256.is_some() && settled && prev.same_stat(now)
    }
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Snapshot of every tracked mount, hashing every file.
pub fn snapshot(spec: &WorkspaceSpec) -> Result<Snapshot, WorkspaceError> {
    snapshot_with(spec, &Exclude::default(), None)
}

/// Snapshot reusing `prev`'s hashes for files whose stat identity did not change.
pub fn snapshot_since(spec: &WorkspaceSpec, prev: &Snapshot) -> Result<Snapshot, WorkspaceError> {
    snapshot_with(spec, &Exclude::default(), Some(prev))
}

/// The general form: excluded names skipped, `prev` (if any) used as a hash cache.
pub fn snapshot_with(
    spec: &WorkspaceSpec,
    exclude: &Exclude,
    prev: Option<&Snapshot>,
) -> Result<Snapshot, WorkspaceError> {
    let taken_at_ns = now_ns();
    let (items, mut warnings) = walk(spec, exclude)?;
    // Both the walk and `prev` are in harness-path order: look cached entries up by merging
    // instead of a tree search per file, and build the map from sorted input.
    let mut cached = prev.map(|p| p.entries.iter().peekable());
    let mut entries = Vec::with_capacity(items.len());
    for item in items {
        let mut cache = None;
        if let (Some(it), Some(p)) = (cached.as_mut(), prev) {
            while it
                .peek()
                .is_some_and(|(k, _)| k.as_path() < item.harness.as_path())
            {
                it.next();
            }
            if let Some((_, e)) = it.peek().filter(|(k, _)| **k == item.harness) {
                cache = Some((p, *e));
            }
        }
        match describe(&item, cache)? {
            Described::Entry(e) => entries.push((item.harness, e)),
            Described::Vanished => {}
            Described::Special => warnings.push(format!(
                "{}: not a file, directory or symlink, skipped",
                item.harness.display()
            )),
        }
    }
    Ok(Snapshot {
        entries: entries.into_iter().collect(),
        taken_at_ns,
        warnings,
    })
}

pub(crate) enum Described {
    Entry(Entry),
    Vanished,
    Special,
}

/// Stat + content identity of one walked item (hash reused from `prev` when allowed).
pub(crate) fn describe(
    item: &Item,
    cache: Option<(&Snapshot, &Entry)>,
) -> Result<Described, WorkspaceError> {
    let Some(mut e) = Entry::from_meta(&item.meta) else {
        return Ok(Described::Special);
    };
    match e.kind {
        EntryKind::Dir => {}
        EntryKind::Symlink => match std::fs::read_link(&item.abs) {
            Ok(t) => e.target = Some(t.to_string_lossy().into_owned()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Described::Vanished)
            }
            Err(err) => return Err(WorkspaceError::io(&item.abs, err)),
        },
        EntryKind::File => {
            if let Some((_, p)) = cache.filter(|(snap, p)| snap.trusts(p, &e)) {
                e.sha256 = p.sha256.clone();
            } else {
                match hash_file(&item.abs) {
                    Ok((hash, len)) => {
                        e.sha256 = Some(hash);
                        e.size = len;
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                        return Ok(Described::Vanished)
                    }
                    Err(err) => return Err(WorkspaceError::io(&item.abs, err)),
                }
            }
        }
    }
    Ok(Described::Entry(e))
}

/// SHA-256 (hex) and length of a regular file, opened without following symlinks.
pub(crate) fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut f = safe_fs::open_regular(path)?;
    hash_reader(&mut f)
}

pub(crate) fn hash_reader(r: &mut dyn Read) -> std::io::Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
        len += n as u64;
    }
    Ok((hex::encode(h.finalize()), len))
}

/// What happened to one path between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
}

/// One `harness.file.*` event's worth of information. For `Deleted`, kind/size/mode are the
/// object's last known state; otherwise its new state. A kind change (file replaced by a
/// directory) is `Modified` with the new kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    pub harness_path: PathBuf,
    pub change: ChangeKind,
    pub kind: EntryKind,
    pub size: u64,
    pub mode: u32,
}

impl FileChange {
    pub(crate) fn new(path: &Path, change: ChangeKind, e: &Entry) -> FileChange {
        FileChange {
            harness_path: path.to_path_buf(),
            change,
            kind: e.kind,
            size: e.size,
            mode: e.mode,
        }
    }
}

/// Changes from `before` to `after`, sorted by harness path (parents before children).
pub fn diff(before: &Snapshot, after: &Snapshot) -> Vec<FileChange> {
    let mut out = Vec::new();
    let mut a = before.entries.iter().peekable();
    let mut b = after.entries.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((pa, ea)), Some((pb, eb))) if pa == pb => {
                if !ea.same_content(eb) {
                    out.push(FileChange::new(pb, ChangeKind::Modified, eb));
                }
                a.next();
                b.next();
            }
            (Some((pa, ea)), Some((pb, _))) if pa < pb => {
                out.push(FileChange::new(pa, ChangeKind::Deleted, ea));
                a.next();
            }
            (Some((pa, ea)), None) => {
                out.push(FileChange::new(pa, ChangeKind::Deleted, ea));
                a.next();
            }
            (_, Some((pb, eb))) => {
                out.push(FileChange::new(pb, ChangeKind::Created, eb));
                b.next();
            }
        }
    }
    out
}
