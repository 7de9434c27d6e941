//! The receiving side of the handoff: a full archive unpacked into a target root laid out as
//! harness paths (`<root>/session/...`).
//!
//! All-or-nothing: entries are written into `<root>/.kube-harness-staging/` with no-follow
//! primitives (see `safe_fs`), directory modes are applied last (so a read-only directory does
//! not block its own children), and only after the manifest's count, bytes and digest check out
//! are the mount directories renamed into `<root>`. A rejected archive leaves `<root>` exactly as
//! it was (empty, or absent if we created it); nothing is ever written outside `<root>`.
//!
//! The receiving side of a directory's plain tar (the worker's `PUT /v1/archive`) is `tree`.

use super::entry::{Entry, EntryKind};
use super::error::{EntryRejection, WorkspaceError};
use super::manifest::{ArchiveKind, Limits};
use super::paths::harness_path;
use super::reader::{read_archive, Sink};
use super::safe_fs::{self, WalkError};
use super::snapshot::{now_ns, Snapshot};
use super::spec::WorkspaceSpec;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

mod tree;

pub use tree::{plan_tree, TreeError, TreeOptions, TreePlan, TreeUnpacked};

/// Scratch directory inside the target while an archive is being unpacked.
pub const STAGING_NAME: &str = ".kube-harness-staging";

/// Options of the receiving side.
#[derive(Debug, Clone)]
pub struct UnpackOptions {
    /// Harness paths of the mounts this receiver accepts (`/session`, ...).
    pub mounts: Vec<PathBuf>,
    pub limits: Limits,
}

impl UnpackOptions {
    /// Accept the tracked mounts of `spec`, default limits.
    pub fn for_spec(spec: &WorkspaceSpec) -> Self {
        UnpackOptions {
            mounts: spec.tracked().map(|m| m.harness_path.clone()).collect(),
            limits: Limits::default(),
        }
    }
}

/// What an unpack produced.
#[derive(Debug, Clone)]
pub struct UnpackReport {
    pub entries: u64,
    pub total_bytes: u64,
    pub digest: String,
    /// Snapshot of the unpacked tree (hashes computed while writing): the higher tier's base for
    /// `changes_since`.
    pub snapshot: Snapshot,
}

/// `spec` with every tracked mount's backing path moved under `root` as its harness path
/// (`/session` -> `<root>/session`): the higher tier's view after `unpack` into `root`.
pub fn rehome(spec: &WorkspaceSpec, root: &Path) -> WorkspaceSpec {
    let mut out = spec.clone();
    for m in out.mounts.iter_mut().filter(|m| m.tracked) {
        m.backing_path = root.join(m.harness_path.strip_prefix("/").unwrap_or(&m.harness_path));
    }
    out
}

/// Unpacks a full archive into `target` (an empty or absent directory).
pub fn unpack<R: Read>(
    input: R,
    target: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackReport, WorkspaceError> {
    let known: Vec<PathBuf> = opts
        .mounts
        .iter()
        .map(|m| m.strip_prefix("/").map(Path::to_path_buf))
        .collect::<Result<_, _>>()
        .map_err(|_| WorkspaceError::Target {
            path: target.into(),
            reason: "mount paths must be absolute".into(),
        })?;
    if known.iter().any(|m| m.starts_with(STAGING_NAME)) {
        return Err(WorkspaceError::Target {
            path: target.into(),
            reason: format!("a mount is named {STAGING_NAME}"),
        });
    }
    let created = prepare_target(target)?;
    let result = unpack_into(input, target, &known, &opts.limits);
    if result.is_err() {
        // What the archive wrote: no symlink followed, any mode it set (leftovers::remove).
        let _ = crate::leftovers::remove(&target.join(STAGING_NAME));
        if created {
            let _ = std::fs::remove_dir(target);
        }
    }
    result
}

/// Creates `target` if absent (returns true) or checks it is an empty directory.
fn prepare_target(target: &Path) -> Result<bool, WorkspaceError> {
    let err = |reason: &str| WorkspaceError::Target {
        path: target.into(),
        reason: reason.into(),
    };
    match std::fs::metadata(target) {
        Ok(m) if !m.is_dir() => Err(err("not a directory")),
        Ok(_) => {
            let mut rd = std::fs::read_dir(target).map_err(|e| WorkspaceError::io(target, e))?;
            match rd.next() {
                None => Ok(false),
                Some(_) => Err(err("directory is not empty")),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir(target).map_err(|e| WorkspaceError::io(target, e))?;
            Ok(true)
        }
        Err(e) => Err(WorkspaceError::io(target, e)),
    }
}

fn unpack_into<R: Read>(
    input: R,
    target: &Path,
    known: &[PathBuf],
    limits: &Limits,
) -> Result<UnpackReport, WorkspaceError> {
    let target_fd = safe_fs::open_root(target).map_err(|e| WorkspaceError::io(target, e))?;
    let staging_path = target.join(STAGING_NAME);
    safe_fs::mkdir_at(&target_fd, OsStr::new(STAGING_NAME), 0o700)
        .map_err(|e| WorkspaceError::io(&staging_path, e))?;
    let staging = safe_fs::open_dir_beneath(&target_fd, Path::new(STAGING_NAME))
        .map_err(|e| walk_error(&staging_path, STAGING_NAME, e))?;
    let mut sink = TreeSink {
        root: staging,
        root_path: staging_path.clone(),
        mounts: Vec::new(),
        cached: None,
        pending: None,
        dir_modes: Vec::new(),
        entries: BTreeMap::new(),
    };
    let verified = read_archive(input, known, ArchiveKind::Full, limits, &mut sink)?;
    let entries = sink.finish()?;
    let mut tops: Vec<&OsStr> = sink.mounts.iter().filter_map(|m| m.iter().next()).collect();
    tops.dedup();
    for top in tops {
        rustix::fs::renameat(&sink.root, top, &target_fd, top)
            .map_err(|e| WorkspaceError::io(target.join(top), e.into()))?;
    }
    safe_fs::unlink_at(&target_fd, OsStr::new(STAGING_NAME), true)
        .map_err(|e| WorkspaceError::io(&staging_path, e))?;
    Ok(UnpackReport {
        entries: verified.manifest.entries,
        total_bytes: verified.manifest.total_bytes,
        digest: verified.manifest.digest,
        snapshot: Snapshot {
            entries,
            taken_at_ns: now_ns(),
            warnings: Vec::new(),
            unreadable: Vec::new(),
        },
    })
}

fn walk_error(path: &Path, shown: &str, e: WalkError) -> WorkspaceError {
    match e.rejection() {
        Some(r) => WorkspaceError::bad(shown, r),
        None => WorkspaceError::io(path, e.into_io()),
    }
}

/// Writes validated entries under the staging directory, never following a symlink.
struct TreeSink {
    root: OwnedFd,
    root_path: PathBuf,
    mounts: Vec<PathBuf>,
    /// The last parent directory opened (entries come grouped by directory).
    cached: Option<(PathBuf, OwnedFd)>,
    pending: Option<File>,
    dir_modes: Vec<(PathBuf, u32)>,
    entries: BTreeMap<PathBuf, Entry>,
}

impl TreeSink {
    /// The directory holding `rel` and `rel`'s last component.
    fn parent<'r>(&mut self, rel: &'r Path) -> Result<(&OwnedFd, &'r OsStr), WorkspaceError> {
        let shown = rel.to_string_lossy();
        let (parent, name) = safe_fs::split_last(rel)
            .ok_or_else(|| WorkspaceError::bad(shown.clone(), EntryRejection::NonCanonical))?;
        let fd = match self.cached.take() {
            Some((p, fd)) if p == parent => fd,
            _ => safe_fs::open_dir_beneath(&self.root, parent)
                .map_err(|e| walk_error(&self.root_path.join(parent), &shown, e))?,
        };
        let (_, fd) = self.cached.insert((parent.to_path_buf(), fd));
        Ok((fd, name))
    }

    fn dir_entry(mode: u32) -> Entry {
        Entry {
            kind: EntryKind::Dir,
            size: 0,
            mode,
            mtime_ns: 0,
            sha256: None,
            target: None,
            ctime_ns: 0,
            ino: 0,
            dev: 0,
        }
    }

    fn create_error(&self, rel: &Path, e: io::Error) -> WorkspaceError {
        if e.kind() == io::ErrorKind::AlreadyExists {
            WorkspaceError::bad(rel.to_string_lossy(), EntryRejection::Duplicate)
        } else {
            WorkspaceError::io(self.root_path.join(rel), e)
        }
    }

    /// Applies directory modes deepest first and returns the snapshot entries.
    fn finish(&mut self) -> Result<BTreeMap<PathBuf, Entry>, WorkspaceError> {
        self.cached = None;
        let mut modes = std::mem::take(&mut self.dir_modes);
        modes.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (rel, mode) in modes {
            let (dir, name) = self.parent(&rel)?;
            safe_fs::chmod_dir_at(dir, name, mode)
                .map_err(|e| WorkspaceError::io(self.root_path.join(&rel), e))?;
        }
        self.cached = None;
        Ok(std::mem::take(&mut self.entries))
    }
}

impl Sink for TreeSink {
    fn begin(&mut self, mounts: &[PathBuf]) -> Result<(), WorkspaceError> {
        self.mounts = mounts.to_vec();
        for m in mounts {
            let mut sofar = PathBuf::new();
            for c in m.iter() {
                let (dir, _) = self.parent(&sofar.join(c))?;
                match safe_fs::mkdir_at(dir, c, 0o755) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(WorkspaceError::io(self.root_path.join(&sofar), e)),
                }
                sofar.push(c);
            }
            self.entries.insert(harness_path(m), Self::dir_entry(0o755));
        }
        Ok(())
    }

    fn dir(&mut self, rel: &Path, mode: u32) -> Result<(), WorkspaceError> {
        if !self.mounts.iter().any(|m| m == rel) {
            let (dir, name) = self.parent(rel)?;
            let made = safe_fs::mkdir_at(dir, name, 0o700);
            made.map_err(|e| self.create_error(rel, e))?;
        }
        self.dir_modes.push((rel.to_path_buf(), mode));
        self.entries
            .insert(harness_path(rel), Self::dir_entry(mode));
        Ok(())
    }

    fn file(
        &mut self,
        rel: &Path,
        mode: u32,
        mtime: u64,
        content: &mut dyn Read,
    ) -> Result<(), WorkspaceError> {
        let (dir, name) = self.parent(rel)?;
        let created = safe_fs::create_file_at(dir, name);
        let mut file = created.map_err(|e| self.create_error(rel, e))?;
        let path = || self.root_path.join(rel);
        io::copy(content, &mut file).map_err(|e| WorkspaceError::io(path(), e))?;
        safe_fs::chmod_fd(&file, mode).map_err(|e| WorkspaceError::io(path(), e))?;
        // Clamped to 0..=MAX_MTIME_SECS (docs/workspace-handoff.md).
        safe_fs::set_mtime(&file, mtime).map_err(|e| WorkspaceError::io(path(), e))?;
        self.pending = Some(file);
        Ok(())
    }

    fn file_done(&mut self, rel: &Path, size: u64, sha256: &str) -> Result<(), WorkspaceError> {
        let path = || self.root_path.join(rel);
        let file = self.pending.take().ok_or_else(|| {
            WorkspaceError::io(path(), io::Error::other("file_done without a file"))
        })?;
        let meta = file.metadata().map_err(|e| WorkspaceError::io(path(), e))?;
        let mut entry = Entry::from_meta(&meta)
            .ok_or_else(|| WorkspaceError::io(path(), io::Error::other("not a regular file")))?;
        entry.size = size;
        entry.sha256 = Some(sha256.to_owned());
        self.entries.insert(harness_path(rel), entry);
        Ok(())
    }

    fn symlink(&mut self, rel: &Path, target: &str) -> Result<(), WorkspaceError> {
        let (dir, name) = self.parent(rel)?;
        let made = safe_fs::symlink_at(OsStr::new(target), dir, name);
        made.map_err(|e| self.create_error(rel, e))?;
        let mut entry = Self::dir_entry(0o777);
        entry.kind = EntryKind::Symlink;
        entry.size = target.len() as u64;
        entry.target = Some(target.to_owned());
        self.entries.insert(harness_path(rel), entry);
        Ok(())
    }
}
