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

use super::entry::{Entry, EntryKind};
use super::error::WorkspaceError;
use super::paths::Exclude;
use super::safe_fs;
use super::spec::WorkspaceSpec;
use super::walk::{walk, Item, Visitor};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Stat identity is trusted only for files last changed this long before the snapshot began.
pub const RACY_MARGIN_NS: i64 = 20_000_000;

/// How much file content one snapshot may read to hash it. File sizes are the guest's to set
/// (`truncate -s 1T f` costs nothing to make and hours to hash), so the reads are bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashBudget {
    /// Files larger than this are not hashed.
    pub max_file: u64,
    /// Bytes read in all, per snapshot.
    pub max_total: u64,
    /// Past the budget: `false` leaves the file without a hash (compared by stat identity:
    /// size, mtime, ctime, inode, which a write always changes); `true` fails the snapshot with
    /// [`WorkspaceError::TooLarge`] before reading (a handoff needs every file's digest).
    pub refuse: bool,
}

impl HashBudget {
    /// For file events around each command: 64 MiB a file, 512 MiB a snapshot.
    pub const EVENTS: HashBudget = HashBudget {
        max_file: 64 << 20,
        max_total: 512 << 20,
        refuse: false,
    };

    /// Stat only: nothing is read (sizes are checked against an archive's limits this way
    /// before any content is hashed).
    pub const STAT_ONLY: HashBudget = HashBudget {
        max_file: 0,
        max_total: 0,
        refuse: false,
    };

    /// For an archive: every file hashed, within the archive's own limits.
    pub fn archive(limits: &super::manifest::Limits) -> HashBudget {
        HashBudget {
            max_file: limits.max_entry_bytes,
            max_total: limits.max_total_bytes,
            refuse: true,
        }
    }
}

/// The tracked mounts at one moment, keyed by harness path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub entries: BTreeMap<PathBuf, Entry>,
    /// Wall clock (ns since the epoch) when the snapshot began; see `RACY_MARGIN_NS`.
    pub taken_at_ns: i64,
    /// What the walk skipped (non-UTF-8 names, sockets, fifos, devices, unreadable paths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Paths that could not be read (permission denied): files compared by their metadata only,
    /// directories whose contents were not walked (what an earlier snapshot saw under them is
    /// kept). For file events only; an archive's snapshot fails on them instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<PathBuf>,
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
        let settled =
            prev.mtime_ns.max(prev.ctime_ns) < self.taken_at_ns.saturating_sub(RACY_MARGIN_NS);
        prev.kind == EntryKind::File && prev.sha256.is_some() && settled && prev.same_stat(now)
    }
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Snapshot of every tracked mount for file events, hashing files within [`HashBudget::EVENTS`].
pub fn snapshot(spec: &WorkspaceSpec) -> Result<Snapshot, WorkspaceError> {
    snapshot_with(spec, &Exclude::default(), None, HashBudget::EVENTS)
}

/// Snapshot reusing `prev`'s hashes for files whose stat identity did not change.
pub fn snapshot_since(spec: &WorkspaceSpec, prev: &Snapshot) -> Result<Snapshot, WorkspaceError> {
    snapshot_with(spec, &Exclude::default(), Some(prev), HashBudget::EVENTS)
}

/// The general form: excluded names skipped, `prev` (if any) used as a hash cache, content read
/// within `budget`.
pub fn snapshot_with(
    spec: &WorkspaceSpec,
    exclude: &Exclude,
    prev: Option<&Snapshot>,
    budget: HashBudget,
) -> Result<Snapshot, WorkspaceError> {
    let taken_at_ns = now_ns();
    let mut v = Snapshotter {
        prev,
        cursor: prev.map(|p| p.entries.iter().peekable()),
        last: None,
        entries: Vec::new(),
        warnings: Vec::new(),
        unreadable: Vec::new(),
        budget,
        read: 0,
    };
    let mut warnings = walk(spec, exclude, &mut v)?;
    warnings.append(&mut v.warnings);
    Ok(Snapshot {
        entries: v.entries.into_iter().collect(),
        taken_at_ns,
        warnings,
        unreadable: v.unreadable,
    })
}

/// Builds the entries as the walk visits them.
struct Snapshotter<'p> {
    prev: Option<&'p Snapshot>,
    /// Both the walk and `prev` are in harness-path order: cached entries are looked up by
    /// merging instead of a tree search per file (a search only when nested mounts break the
    /// order).
    cursor: Option<std::iter::Peekable<std::collections::btree_map::Iter<'p, PathBuf, Entry>>>,
    last: Option<PathBuf>,
    entries: Vec<(PathBuf, Entry)>,
    warnings: Vec<String>,
    unreadable: Vec<PathBuf>,
    budget: HashBudget,
    /// Bytes hashed so far (at their stat size, counted before reading).
    read: u64,
}

impl<'p> Snapshotter<'p> {
    fn cached(&mut self, harness: &Path) -> Option<&'p Entry> {
        let prev = self.prev?;
        if self.last.as_deref().is_some_and(|l| harness < l) {
            return prev.entries.get(harness);
        }
        self.last = Some(harness.to_path_buf());
        let it = self.cursor.as_mut()?;
        while it.peek().is_some_and(|(k, _)| k.as_path() < harness) {
            it.next();
        }
        it.peek()
            .filter(|(k, _)| k.as_path() == harness)
            .map(|(_, e)| *e)
    }
}

impl Visitor for Snapshotter<'_> {
    fn visit(&mut self, item: Item<'_>) -> Result<(), WorkspaceError> {
        let cache = self.cached(item.harness);
        match describe(&item, self.prev.zip(cache), &self.budget, &mut self.read)? {
            Described::Entry(e) => self.entries.push((item.harness.to_path_buf(), e)),
            Described::Unreadable(e) => {
                self.unreadable.push(item.harness.to_path_buf());
                self.warnings.push(format!(
                    "{}: cannot be read (permission denied), compared by its metadata only",
                    item.harness.display()
                ));
                self.entries.push((item.harness.to_path_buf(), e));
            }
            Described::Vanished => {}
            Described::Special => self.warnings.push(format!(
                "{}: not a file, directory or symlink, skipped",
                item.harness.display()
            )),
        }
        Ok(())
    }

    /// For file events (a budget that does not refuse), a directory a command made unreadable
    /// keeps what the previous snapshot saw under it (its state is unknown, so nothing under it
    /// is reported changed) and is named in the warnings; an archive's walk still fails on it.
    fn unreadable_dir(&mut self, harness: &Path) -> bool {
        if self.budget.refuse {
            return false;
        }
        self.unreadable.push(harness.to_path_buf());
        self.warnings.push(format!(
            "{}: cannot be read (permission denied), its contents not tracked",
            harness.display()
        ));
        if let Some(prev) = self.prev {
            let under = prev
                .entries
                .range(harness.to_path_buf()..)
                .skip_while(|(k, _)| k.as_path() == harness)
                .take_while(|(k, _)| k.starts_with(harness));
            self.entries
                .extend(under.map(|(k, e)| (k.clone(), e.clone())));
        }
        true
    }
}

pub(crate) enum Described {
    Entry(Entry),
    /// A file that could not be opened (permission denied), for file events only: its entry
    /// without a hash, compared by its stat identity.
    Unreadable(Entry),
    Vanished,
    Special,
}

/// Stat + content identity of one walked item (hash reused from `prev` when allowed). Content is
/// read relative to the item's directory, never through a symlink.
pub(crate) fn describe(
    item: &Item<'_>,
    cache: Option<(&Snapshot, &Entry)>,
    budget: &HashBudget,
    read: &mut u64,
) -> Result<Described, WorkspaceError> {
    let Some(mut e) = Entry::from_stat(item.stat) else {
        return Ok(Described::Special);
    };
    let Some(name) = item.name else {
        return Ok(Described::Entry(e)); // a mount root (a directory)
    };
    let io = |err| WorkspaceError::io(item.harness, err);
    match e.kind {
        EntryKind::Dir => {}
        EntryKind::Symlink => match safe_fs::read_link_at(item.dir, name) {
            Ok(t) => e.target = Some(t.to_string_lossy().into_owned()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Described::Vanished)
            }
            Err(err) => return Err(io(err)),
        },
        EntryKind::File => {
            let within =
                e.size <= budget.max_file && read.saturating_add(e.size) <= budget.max_total;
            if let Some((_, p)) = cache.filter(|(snap, p)| snap.trusts(p, &e)) {
                e.sha256 = p.sha256.clone();
            } else if !within && !budget.refuse {
                // Compared by stat identity instead (Entry::same_content).
            } else if !within {
                let limit = if e.size > budget.max_file {
                    budget.max_file
                } else {
                    budget.max_total
                };
                return Err(WorkspaceError::TooLarge {
                    what: "a file",
                    size: e.size,
                    limit,
                });
            } else {
                *read = read.saturating_add(e.size);
                // Never more than the budget, even from a file that grows while it is read.
                let cap = budget.max_file.saturating_add(1);
                match safe_fs::open_regular_at(item.dir, name)
                    .and_then(|f| hash_reader(&mut f.take(cap)))
                {
                    Ok((_, len)) if len > budget.max_file => {
                        if budget.refuse {
                            return Err(WorkspaceError::TooLarge {
                                what: "a file",
                                size: len,
                                limit: budget.max_file,
                            });
                        }
                    }
                    Ok((hash, len)) => {
                        e.sha256 = Some(hash);
                        e.size = len;
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                        return Ok(Described::Vanished)
                    }
                    // Replaced by a symlink or a special file since the walk saw it.
                    Err(err)
                        if err.kind() == std::io::ErrorKind::InvalidInput
                            || err.raw_os_error()
                                == Some(rustix::io::Errno::LOOP.raw_os_error()) =>
                    {
                        return Ok(Described::Vanished)
                    }
                    // A command's `chmod 000` in an unprivileged worker: file events compare it
                    // by its stat identity; an archive (which needs its bytes) fails.
                    Err(err)
                        if err.kind() == std::io::ErrorKind::PermissionDenied && !budget.refuse =>
                    {
                        return Ok(Described::Unreadable(e))
                    }
                    Err(err) => return Err(io(err)),
                }
            }
        }
    }
    Ok(Described::Entry(e))
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
        h.update(buf.get(..n).unwrap_or_default());
        len = len.saturating_add(n as u64);
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
