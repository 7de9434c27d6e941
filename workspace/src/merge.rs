//! The worker side of the return trip: a change archive from the higher tier applied to the
//! tracked mounts' backing paths.
//!
//! Two phases. First the whole archive is read through the same gate as `unpack` and staged (file
//! contents in memory up to a budget, beyond it as blobs in a private scratch directory; nothing
//! in the workspace touched): any
//! unsafe entry, size overrun or manifest mismatch rejects the archive and nothing is applied.
//! Then each change is checked against the mount table and the base snapshot and applied with
//! no-follow primitives: files and symlinks are written under a temporary name and renamed over
//! the old one, so a reader never sees half a file.
//!
//! Per-change outcomes: a change under a read-only mount or prefix, or to a runtime-owned name,
//! is rejected and reported. Conflict rule: the base snapshot is the worker's state at handoff;
//! if the worker's current state of a changed path (kind, mode, content) differs from the base,
//! the path changed on both sides and the change is reported as a `Conflict` without touching
//! the worker's copy. A path whose current state already equals the incoming one (the archive
//! was applied before) is neither applied nor a conflict.

use super::entry::{Entry, EntryKind};
use super::error::WorkspaceError;
use super::manifest::{bounded_left_out, ArchiveKind, Limits};
use super::paths::Exclude;
use super::reader::{read_archive, Sink};
use super::safe_fs::{self, WalkError};
use super::snapshot::{hash_reader, ChangeKind, FileChange, Snapshot};
use super::spec::{Mount, WorkspaceSpec};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Options of `apply`.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// Runtime-owned names the higher tier may not write (reported as `RuntimeOwned`).
    pub exclude: Exclude,
    pub limits: Limits,
    /// Where incoming content beyond `memory_staging_bytes` is staged before it is applied
    /// (default: the system temp dir).
    pub scratch_dir: Option<PathBuf>,
    /// Incoming file content up to this many bytes in total is staged in memory; the rest goes
    /// to `scratch_dir`.
    pub memory_staging_bytes: u64,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            exclude: Exclude::default(),
            limits: Limits::default(),
            scratch_dir: None,
            memory_staging_bytes: 64 << 20,
        }
    }
}

/// Why one change was not applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "reason")]
pub enum RejectReason {
    /// Read-only mount, read-only prefix, or a mount that is not tracked.
    ReadOnly,
    /// An excluded, runtime-owned name.
    RuntimeOwned,
    /// A mount root cannot be deleted or replaced by a non-directory.
    MountRoot,
    /// The path changed on the worker since the handoff as well.
    Conflict {
        base: Option<Entry>,
        current: Option<Entry>,
    },
    /// A directory to delete still has children the higher tier did not delete (or that were
    /// themselves rejected).
    NotEmpty,
    /// The parent directory is gone or is no longer a directory.
    ParentMissing,
}

/// A change that was reported instead of applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    pub harness_path: PathBuf,
    pub change: ChangeKind,
    #[serde(flatten)]
    pub reason: RejectReason,
}

/// Outcome of `apply`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Applied changes, sorted by path: one `harness.file.*` event each.
    pub applied: Vec<FileChange>,
    pub rejected: Vec<Rejected>,
    /// Paths whose current state already matched the incoming change.
    pub already_applied: Vec<PathBuf>,
    /// What the sender left out of the archive, one line each with the harness path and why
    /// (a symlink pointing out of the workspace, a special file, a name that is not UTF-8): not
    /// merged, and to be reported (the manifest's `leftOut`, bounded again here).
    pub left_out: Vec<String>,
}

/// One incoming object (content staged as a blob for files).
struct Incoming {
    rel: PathBuf,
    kind: EntryKind,
    mode: u32,
    mtime: u64,
    size: u64,
    sha256: Option<String>,
    target: Option<String>,
    blob: Option<Blob>,
}

/// Staged content of an incoming file.
enum Blob {
    Memory(Vec<u8>),
    Disk(PathBuf),
}

impl Incoming {
    fn matches(&self, e: &Entry) -> bool {
        e.kind == self.kind
            && e.mode == self.mode
            && match self.kind {
                EntryKind::Dir => true,
                EntryKind::Symlink => e.target == self.target,
                EntryKind::File => {
                    e.size == self.size && e.sha256.is_some() && e.sha256 == self.sha256
                }
            }
    }
}

/// Stages file content in memory up to a budget, then as numbered blobs in a private scratch
/// directory created on first use.
struct BlobSink {
    scratch_parent: PathBuf,
    scratch: Option<tempfile::TempDir>,
    memory_left: u64,
    items: Vec<Incoming>,
}

impl BlobSink {
    fn stage(&mut self, content: &mut dyn Read) -> Result<Blob, WorkspaceError> {
        if self.memory_left > 0 {
            let mut buf = Vec::new();
            content
                .take(self.memory_left.saturating_add(1))
                .read_to_end(&mut buf)
                .map_err(|e| WorkspaceError::io("<archive>", e))?;
            if let Some(left) = self.memory_left.checked_sub(buf.len() as u64) {
                self.memory_left = left;
                return Ok(Blob::Memory(buf));
            }
            self.memory_left = 0;
            let path = self.blob_path()?;
            let mut f = File::create_new(&path).map_err(|e| WorkspaceError::io(&path, e))?;
            std::io::Write::write_all(&mut f, &buf).map_err(|e| WorkspaceError::io(&path, e))?;
            io::copy(content, &mut f).map_err(|e| WorkspaceError::io(&path, e))?;
            return Ok(Blob::Disk(path));
        }
        let path = self.blob_path()?;
        let mut f = File::create_new(&path).map_err(|e| WorkspaceError::io(&path, e))?;
        io::copy(content, &mut f).map_err(|e| WorkspaceError::io(&path, e))?;
        Ok(Blob::Disk(path))
    }

    fn blob_path(&mut self) -> Result<PathBuf, WorkspaceError> {
        let n = self.items.len();
        let dir = match &self.scratch {
            Some(dir) => dir,
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("kube-harness-apply-")
                    .tempdir_in(&self.scratch_parent)
                    .map_err(|e| WorkspaceError::io(&self.scratch_parent, e))?;
                self.scratch.insert(dir)
            }
        };
        Ok(dir.path().join(n.to_string()))
    }
}

impl Sink for BlobSink {
    fn begin(&mut self, _mounts: &[PathBuf]) -> Result<(), WorkspaceError> {
        Ok(())
    }

    fn dir(&mut self, rel: &Path, mode: u32) -> Result<(), WorkspaceError> {
        self.items.push(Incoming {
            rel: rel.into(),
            kind: EntryKind::Dir,
            mode,
            mtime: 0,
            size: 0,
            sha256: None,
            target: None,
            blob: None,
        });
        Ok(())
    }

    fn file(
        &mut self,
        rel: &Path,
        mode: u32,
        mtime: u64,
        content: &mut dyn Read,
    ) -> Result<(), WorkspaceError> {
        let blob = self.stage(content)?;
        self.items.push(Incoming {
            rel: rel.into(),
            kind: EntryKind::File,
            mode,
            mtime,
            size: 0,
            sha256: None,
            target: None,
            blob: Some(blob),
        });
        Ok(())
    }

    fn file_done(&mut self, _rel: &Path, size: u64, sha256: &str) -> Result<(), WorkspaceError> {
        let Some(last) = self.items.last_mut() else {
            return Err(internal("file_done without a file"));
        };
        last.size = size;
        last.sha256 = Some(sha256.to_owned());
        Ok(())
    }

    fn symlink(&mut self, rel: &Path, target: &str) -> Result<(), WorkspaceError> {
        self.items.push(Incoming {
            rel: rel.into(),
            kind: EntryKind::Symlink,
            mode: 0o777,
            mtime: 0,
            size: target.len() as u64,
            sha256: None,
            target: Some(target.to_owned()),
            blob: None,
        });
        Ok(())
    }
}

fn internal(what: &str) -> WorkspaceError {
    WorkspaceError::io("<merge>", io::Error::other(format!("internal: {what}")))
}

/// The worker's current state of one path.
enum Current {
    Absent,
    Present(Entry),
    /// A parent is a symlink or a file, or the object is a socket/fifo/device.
    Blocked,
}

/// Applies a change archive made by `changes_since` to `spec`'s tracked mounts. `base` is the
/// snapshot `pack` returned at handoff.
pub fn apply<R: Read>(
    spec: &WorkspaceSpec,
    input: R,
    base: &Snapshot,
    opts: &ApplyOptions,
) -> Result<ApplyReport, WorkspaceError> {
    let known: Vec<PathBuf> = spec
        .tracked()
        .filter_map(|m| m.harness_path.strip_prefix("/").ok().map(Path::to_path_buf))
        .collect();
    let mut sink = BlobSink {
        scratch_parent: opts.scratch_dir.clone().unwrap_or_else(std::env::temp_dir),
        scratch: None,
        memory_left: opts.memory_staging_bytes,
        items: Vec::new(),
    };
    let verified = read_archive(input, &known, ArchiveKind::Changes, &opts.limits, &mut sink)?;
    let mut applier = Applier {
        spec,
        base,
        opts,
        roots: HashMap::new(),
        parent_cache: None,
        report: ApplyReport::default(),
        tmp_seq: 0,
    };
    applier.run(verified.deleted, sink.items)?;
    let mut report = applier.report;
    report
        .applied
        .sort_by(|a, b| a.harness_path.cmp(&b.harness_path));
    report.left_out = bounded_left_out(&verified.manifest.left_out);
    Ok(report)
}

struct Applier<'a> {
    spec: &'a WorkspaceSpec,
    base: &'a Snapshot,
    opts: &'a ApplyOptions,
    /// Open backing roots by mount harness path.
    roots: HashMap<PathBuf, OwnedFd>,
    /// The last parent directory opened (changes come sorted, so siblings share it). Dropped
    /// whenever a directory is removed, so it never points at a directory no longer in the tree.
    parent_cache: Option<(PathBuf, Rc<OwnedFd>)>,
    report: ApplyReport,
    tmp_seq: u64,
}

/// A change that passed the policy and conflict checks.
struct Planned {
    harness: PathBuf,
    mount: Mount,
    /// Path relative to the mount's backing directory ("" for the mount root).
    rel: PathBuf,
    current: Option<Entry>,
}

impl<'a> Applier<'a> {
    fn run(
        &mut self,
        deleted: Vec<(PathBuf, EntryKind)>,
        items: Vec<Incoming>,
    ) -> Result<(), WorkspaceError> {
        // Decide everything against the state before any write.
        let mut deletions = Vec::new();
        for (rel, _) in deleted {
            if let Some(p) = self.check(&rel, None)? {
                deletions.push(p);
            }
        }
        let mut upserts = Vec::new();
        for item in items {
            if let Some(p) = self.check(&item.rel, Some(&item))? {
                upserts.push((p, item));
            }
        }
        deletions.sort_by(|a, b| b.harness.cmp(&a.harness));
        for p in deletions {
            self.delete(p)?;
        }
        let mut chmods = Vec::new();
        for (p, item) in upserts {
            self.upsert(p, item, &mut chmods)?;
        }
        chmods.sort_by(|a: &(Planned, u32), b| b.0.harness.cmp(&a.0.harness));
        for (p, mode) in chmods {
            let root = self.root(&p.mount)?;
            let res = match p.rel.parent() {
                None => safe_fs::chmod_fd(root, mode),
                Some(parent) => match safe_fs::open_dir_beneath(root, parent) {
                    Ok(dir) => match p.rel.file_name() {
                        Some(name) => safe_fs::chmod_dir_at(&dir, name, mode),
                        None => Ok(()),
                    },
                    Err(WalkError::Io(e)) => Err(e),
                    Err(_) => Ok(()),
                },
            };
            res.map_err(|e| WorkspaceError::io(&p.harness, e))?;
        }
        Ok(())
    }

    fn reject(&mut self, harness: &Path, incoming: Option<&Incoming>, reason: RejectReason) {
        let change = match incoming {
            None => ChangeKind::Deleted,
            Some(_) if self.base.get(harness).is_some() => ChangeKind::Modified,
            Some(_) => ChangeKind::Created,
        };
        self.report.rejected.push(Rejected {
            harness_path: harness.to_path_buf(),
            change,
            reason,
        });
    }

    /// Policy and conflict checks; `Some` when the change should be applied.
    fn check(
        &mut self,
        rel: &Path,
        incoming: Option<&Incoming>,
    ) -> Result<Option<Planned>, WorkspaceError> {
        let harness = Path::new("/").join(rel);
        let Some(mount) = self.spec.mount_for(&harness).filter(|m| m.tracked).cloned() else {
            self.reject(&harness, incoming, RejectReason::ReadOnly);
            return Ok(None);
        };
        if self.opts.exclude.matches(&harness) {
            self.reject(&harness, incoming, RejectReason::RuntimeOwned);
            return Ok(None);
        }
        let Ok(in_mount) = harness.strip_prefix(&mount.harness_path) else {
            self.reject(&harness, incoming, RejectReason::ReadOnly);
            return Ok(None);
        };
        let in_mount = in_mount.to_path_buf();
        if in_mount.as_os_str().is_empty() && incoming.is_none_or(|i| i.kind != EntryKind::Dir) {
            self.reject(&harness, incoming, RejectReason::MountRoot);
            return Ok(None);
        }
        if !self.spec.is_writable(&harness) {
            self.reject(&harness, incoming, RejectReason::ReadOnly);
            return Ok(None);
        }
        let current = self.current(&mount, &harness, &in_mount)?;
        let base = self.base.get(&harness);
        let unchanged = match (&current, base) {
            (Current::Absent, None) => true,
            (Current::Present(c), Some(b)) => b.same_content(c),
            _ => false,
        };
        if !unchanged {
            let done = match (&current, incoming) {
                (Current::Absent, None) => true,
                (Current::Present(c), Some(i)) => i.matches(c),
                _ => false,
            };
            if done {
                self.report.already_applied.push(harness);
            } else {
                let current = match current {
                    Current::Present(e) => Some(e),
                    _ => None,
                };
                self.reject(
                    &harness,
                    incoming,
                    RejectReason::Conflict {
                        base: base.cloned(),
                        current,
                    },
                );
            }
            return Ok(None);
        }
        let current = match current {
            Current::Present(e) => Some(e),
            _ => None,
        };
        Ok(Some(Planned {
            harness,
            mount,
            rel: in_mount,
            current,
        }))
    }

    fn root(&mut self, mount: &Mount) -> Result<&OwnedFd, WorkspaceError> {
        if !self.roots.contains_key(&mount.harness_path) {
            let path = &mount.backing_path;
            std::fs::create_dir_all(path).map_err(|e| WorkspaceError::io(path, e))?;
            let fd = safe_fs::open_root(path).map_err(|e| WorkspaceError::io(path, e))?;
            self.roots.insert(mount.harness_path.clone(), fd);
        }
        Ok(&self.roots[&mount.harness_path])
    }

    /// The worker's current state of `harness` (content hashed unless the base's hash is reusable).
    fn current(
        &mut self,
        mount: &Mount,
        harness: &Path,
        rel: &Path,
    ) -> Result<Current, WorkspaceError> {
        if !mount.backing_path.exists() {
            return Ok(Current::Absent);
        }
        let (dir, name): (Rc<OwnedFd>, &OsStr) = match safe_fs::split_last(rel) {
            None => {
                let meta = std::fs::metadata(&mount.backing_path)
                    .map_err(|e| WorkspaceError::io(harness, e))?;
                return Ok(Entry::from_meta(&meta).map_or(Current::Blocked, Current::Present));
            }
            Some((parent, name)) => match self.open_parent(mount, parent)? {
                Ok(fd) => (fd, name),
                // Under a file that this change set may be replacing with a directory.
                Err(WalkError::Missing) | Err(WalkError::NotDir) => return Ok(Current::Absent),
                Err(WalkError::Blocked) => return Ok(Current::Blocked),
                Err(WalkError::Io(e)) => return Err(WorkspaceError::io(harness, e)),
            },
        };
        let mut entry = match safe_fs::entry_at(&dir, name) {
            Ok(None) => return Ok(Current::Absent),
            Ok(Some(e)) => e,
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Ok(Current::Blocked),
            Err(e) => return Err(WorkspaceError::io(harness, e)),
        };
        if entry.kind == EntryKind::File {
            if let Some(b) = self.base.reusable(harness, &entry) {
                entry.sha256 = b.sha256.clone();
            } else {
                let mut f = safe_fs::open_regular_at(&dir, name)
                    .map_err(|e| WorkspaceError::io(harness, e))?;
                let (sha, len) = hash_reader(&mut f).map_err(|e| WorkspaceError::io(harness, e))?;
                entry.sha256 = Some(sha);
                entry.size = len;
            }
        }
        Ok(Current::Present(entry))
    }

    /// `parent` (relative to `mount`'s backing root) opened without following symlinks, cached.
    fn open_parent(
        &mut self,
        mount: &Mount,
        parent: &Path,
    ) -> Result<Result<Rc<OwnedFd>, WalkError>, WorkspaceError> {
        let key = mount.harness_path.join(parent);
        if let Some((k, fd)) = &self.parent_cache {
            if *k == key {
                return Ok(Ok(fd.clone()));
            }
        }
        let root = self.root(mount)?;
        Ok(safe_fs::open_dir_beneath(root, parent).map(|fd| {
            let fd = Rc::new(fd);
            self.parent_cache = Some((key, fd.clone()));
            fd
        }))
    }

    /// The parent directory of a non-root planned change, opened without following symlinks.
    fn parent_of(
        &mut self,
        p: &Planned,
        incoming: Option<&Incoming>,
    ) -> Result<Option<Rc<OwnedFd>>, WorkspaceError> {
        let Some((parent, _)) = safe_fs::split_last(&p.rel) else {
            return Err(internal("a mount root has no parent"));
        };
        match self.open_parent(&p.mount, parent)? {
            Ok(fd) => Ok(Some(fd)),
            Err(WalkError::Io(e)) => Err(WorkspaceError::io(&p.harness, e)),
            Err(_) => {
                self.reject(&p.harness, incoming, RejectReason::ParentMissing);
                Ok(None)
            }
        }
    }

    fn delete(&mut self, p: Planned) -> Result<(), WorkspaceError> {
        let Some(current) = p.current.clone() else {
            self.report.already_applied.push(p.harness);
            return Ok(());
        };
        let Some(dir) = self.parent_of(&p, None)? else {
            return Ok(());
        };
        let Some(name) = p.rel.file_name() else {
            return Err(internal("a mount root cannot be deleted"));
        };
        let is_dir = current.kind == EntryKind::Dir;
        match safe_fs::unlink_at(&dir, name, is_dir) {
            Ok(()) => {
                if is_dir {
                    self.parent_cache = None;
                }
                self.report
                    .applied
                    .push(FileChange::new(&p.harness, ChangeKind::Deleted, &current))
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTEMPTY.raw_os_error()) => {
                self.reject(&p.harness, None, RejectReason::NotEmpty)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.report.already_applied.push(p.harness)
            }
            Err(e) => return Err(WorkspaceError::io(&p.harness, e)),
        }
        Ok(())
    }

    fn upsert(
        &mut self,
        p: Planned,
        item: Incoming,
        chmods: &mut Vec<(Planned, u32)>,
    ) -> Result<(), WorkspaceError> {
        let change = if p.current.is_some() {
            ChangeKind::Modified
        } else {
            ChangeKind::Created
        };
        let applied = FileChange {
            harness_path: p.harness.clone(),
            change,
            kind: item.kind,
            size: if item.kind == EntryKind::Dir {
                0
            } else {
                item.size
            },
            mode: item.mode,
        };
        if p.rel.as_os_str().is_empty() {
            // The mount root itself: only a mode change can reach here.
            self.report.applied.push(applied);
            chmods.push((p, item.mode));
            return Ok(());
        }
        let Some(dir) = self.parent_of(&p, Some(&item))? else {
            return Ok(());
        };
        let Some(name) = p.rel.file_name().map(OsStr::to_owned) else {
            return Err(internal("a mount root is not replaced"));
        };
        let err = |e: io::Error| WorkspaceError::io(&p.harness, e);
        let was_dir = p.current.as_ref().is_some_and(|c| c.kind == EntryKind::Dir);
        let replaced = match item.kind {
            EntryKind::Dir => {
                if !was_dir {
                    if p.current.is_some() {
                        safe_fs::unlink_at(&dir, &name, false).map_err(err)?;
                    }
                    safe_fs::mkdir_at(&dir, &name, 0o700).map_err(err)?;
                }
                self.report.applied.push(applied);
                chmods.push((p, item.mode));
                return Ok(());
            }
            EntryKind::File => {
                let tmp = self.tmp_name();
                let mut out = safe_fs::create_file_at(&dir, &tmp).map_err(err)?;
                let written = match &item.blob {
                    Some(Blob::Memory(bytes)) => io::Write::write_all(&mut out, bytes),
                    Some(Blob::Disk(path)) => File::open(path)
                        .and_then(|mut b| io::copy(&mut b, &mut out))
                        .map(|_| ()),
                    None => Err(io::Error::other("a file without staged content")),
                };
                let written = written
                    .and_then(|_| safe_fs::chmod_fd(&out, item.mode))
                    // Clamped to 0..=MAX_MTIME_SECS (docs/workspace-handoff.md).
                    .and_then(|_| safe_fs::set_mtime(&out, item.mtime));
                if let Err(e) = written {
                    let _ = safe_fs::unlink_at(&dir, &tmp, false);
                    return Err(err(e));
                }
                self.replace(&dir, &tmp, &name, was_dir, &p, &item)?
            }
            EntryKind::Symlink => {
                let tmp = self.tmp_name();
                let target = item.target.as_deref().unwrap_or_default();
                safe_fs::symlink_at(OsStr::new(target), &dir, &tmp).map_err(err)?;
                self.replace(&dir, &tmp, &name, was_dir, &p, &item)?
            }
        };
        if replaced {
            self.report.applied.push(applied);
        }
        Ok(())
    }

    /// Renames `tmp` over `name` (removing an empty directory there first). False when the
    /// directory was not empty and the change was rejected instead.
    fn replace(
        &mut self,
        dir: &OwnedFd,
        tmp: &OsStr,
        name: &OsStr,
        was_dir: bool,
        p: &Planned,
        item: &Incoming,
    ) -> Result<bool, WorkspaceError> {
        if was_dir {
            self.parent_cache = None;
            if let Err(e) = safe_fs::unlink_at(dir, name, true) {
                let _ = safe_fs::unlink_at(dir, tmp, false);
                if e.raw_os_error() == Some(rustix::io::Errno::NOTEMPTY.raw_os_error()) {
                    self.reject(&p.harness, Some(item), RejectReason::NotEmpty);
                    return Ok(false);
                }
                return Err(WorkspaceError::io(&p.harness, e));
            }
        }
        if let Err(e) = safe_fs::rename_at(dir, tmp, name) {
            let _ = safe_fs::unlink_at(dir, tmp, false);
            return Err(WorkspaceError::io(&p.harness, e));
        }
        Ok(true)
    }

    fn tmp_name(&mut self) -> OsString {
        self.tmp_seq = self.tmp_seq.wrapping_add(1);
        OsString::from(format!(
            ".kube-harness-apply-{}-{}",
            std::process::id(),
            self.tmp_seq
        ))
    }
}
