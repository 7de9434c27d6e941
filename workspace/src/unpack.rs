//! The receiving side of the handoff: a full archive unpacked into a target root laid out as
//! harness paths (`<root>/session/...`).
//!
//! All-or-nothing: entries are written into `<root>/.kube-harness-staging/` with no-follow
//! primitives (see `safe_fs`), directory modes are applied last (so a read-only directory does
//! not block its own children), and only after the manifest's count, bytes and digest check out
//! are the mount directories renamed into `<root>`. A rejected archive leaves `<root>` exactly as
//! it was (empty, or absent if we created it); nothing is ever written outside `<root>`.
//!
//! Also the receiving side of a directory's plain tar (the worker's `PUT /v1/archive`):
//! [`plan_tree`] checks the archive whole, [`TreePlan::check`] against the tree it goes into,
//! and only then [`TreePlan::place`] writes, merging into what is there, each file and link
//! through a new name renamed over the old one, never through a symlink.

use super::entry::{Entry, EntryKind};
use super::error::{EntryRejection, WorkspaceError};
use super::manifest::{ArchiveKind, Limits};
use super::pack::TreeLimits;
use super::paths::{harness_path, parse_archive_path};
use super::reader::{read_archive, Sink};
use super::safe_fs::{self, WalkError};
use super::snapshot::{now_ns, ChangeKind, FileChange, Snapshot};
use super::spec::WorkspaceSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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

/// Options of the directory tar's receiving side ([`plan_tree`]).
#[derive(Debug, Clone)]
pub struct TreeOptions {
    pub limits: TreeLimits,
    /// The harness path of the directory unpacked into: it names the changes and the messages.
    pub harness_root: PathBuf,
    /// A name beside an entry that nothing can have prepared (it is created `O_EXCL`): the new
    /// file or link renamed over the entry's name.
    pub temp_name: fn(&OsStr) -> OsString,
}

/// Why a directory tar was not unpacked. Each is a message naming the harness path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// The archive is refused, whatever the tree holds (why); nothing was written.
    #[error("{0}")]
    BadArchive(String),
    /// A symlink of the tree lies where the archive has a directory, or on an entry's way.
    #[error("{0}")]
    Symlink(String),
    /// A file of the tree where the archive has a directory, or the reverse; nothing was
    /// written.
    #[error("{0}")]
    Conflict(String),
    /// The filesystem failed.
    #[error("{0}")]
    Io(String),
}

/// At most this many entries whose mode was not set as asked are named; the rest are counted
/// in one more line (an archive may hold 200,000 setuid files).
const MAX_WARNINGS: usize = 100;

/// The kernel's limits on one name and on a symlink's target.
const NAME_MAX: usize = 255;
const PATH_MAX: usize = 4096;

/// What a directory tar placed, and what it did not place as the archive asked.
#[derive(Debug, Clone)]
pub struct TreeUnpacked {
    pub changes: Vec<FileChange>,
    /// One line per entry whose mode was not set as the archive has it (setuid, setgid and
    /// sticky bits are never set, a directory stays open to its owner, an existing directory
    /// keeps its mode), at most [`MAX_WARNINGS`] and then a count.
    pub warnings: Vec<String>,
}

/// One checked entry of a directory tar. `asked` is the archive's mode (with the setuid,
/// setgid and sticky bits), `mode` what is set.
#[derive(Debug)]
enum TreeEntry {
    Dir {
        mode: u32,
        asked: u32,
    },
    File {
        mode: u32,
        asked: u32,
        mtime: u64,
        offset: u64,
        size: u64,
    },
    Symlink {
        target: OsString,
    },
}

/// A directory tar checked against itself ([`plan_tree`]): to be checked against the tree it
/// goes into ([`TreePlan::check`]), then placed ([`TreePlan::place`]).
#[derive(Debug)]
pub struct TreePlan {
    entries: BTreeMap<PathBuf, TreeEntry>,
    opts: TreeOptions,
}

/// The receiving side of a directory's tar (`PUT /v1/archive`), read from a seekable spool:
/// every entry's path is relative with plain names (`./` tolerated; the lexical rules of the
/// handoff's names), its type is a regular file whose data is all in the spool, a directory or a
/// symlink (hard links, devices and fifos are refused), no entry lies below a symlink or a file
/// of the archive, and no entry appears twice (but a directory). Nothing is written.
pub fn plan_tree(spool: &mut File, opts: &TreeOptions) -> Result<TreePlan, TreeError> {
    let bad = TreeError::BadArchive;
    let io_failed = |what: &str, e: &io::Error| {
        TreeError::Io(format!("{what} under {}: {e}", opts.harness_root.display()))
    };
    let spool_len = io::Seek::seek(spool, io::SeekFrom::End(0))
        .and_then(|len| io::Seek::seek(spool, io::SeekFrom::Start(0)).map(|_| len))
        .map_err(|e| io_failed("reading the spool", &e))?;
    let max_entries = opts.limits.max_entries;
    let max_depth = opts.limits.max_depth;
    let mut archive = tar::Archive::new(&mut *spool);
    let entries = archive
        .entries_with_seek()
        .map_err(|e| bad(e.to_string()))?;
    let mut plan: BTreeMap<PathBuf, TreeEntry> = BTreeMap::new();
    let mut symlinks: BTreeSet<PathBuf> = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(|e| bad(e.to_string()))?;
        if plan.len() >= max_entries {
            return Err(bad(format!("more than {max_entries} entries")));
        }
        let raw = entry.path_bytes().into_owned();
        // `./` itself (what `tar -C dir -cf - .` starts with) is the target directory.
        if entry.header().entry_type() == tar::EntryType::Directory && is_own_root(&raw) {
            continue;
        }
        let rel = plain_path(&raw).ok_or_else(|| {
            bad(format!(
                "entry {:?}: not a plain relative UTF-8 path of names of at most 255 bytes",
                String::from_utf8_lossy(&raw)
            ))
        })?;
        if rel.components().count() > max_depth {
            return Err(bad(format!(
                "entry {}: deeper than {max_depth} levels",
                rel.display()
            )));
        }
        if let Some(link) = rel.ancestors().skip(1).find(|a| symlinks.contains(*a)) {
            return Err(bad(format!(
                "entry {} lies below the archive's symlink {}",
                rel.display(),
                link.display()
            )));
        }
        let header = entry.header();
        let asked = header.mode().unwrap_or(0o644) & 0o7777;
        let mode = asked & 0o777;
        let planned = match header.entry_type() {
            tar::EntryType::Directory => TreeEntry::Dir {
                mode: mode | 0o700,
                asked,
            },
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let (offset, size) = (entry.raw_file_position(), entry.size());
                // The whole file must be in the archive before anything is written.
                if offset.checked_add(size).is_none_or(|end| end > spool_len) {
                    return Err(bad(format!(
                        "the archive ends inside {} ({size} bytes declared)",
                        rel.display()
                    )));
                }
                TreeEntry::File {
                    mode,
                    asked,
                    mtime: header.mtime().unwrap_or(0),
                    offset,
                    size,
                }
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .map(|l| OsStr::from_bytes(&l).to_os_string())
                    .ok_or_else(|| bad(format!("symlink {} has no target", rel.display())))?;
                if target.is_empty() || target.len() >= PATH_MAX {
                    return Err(bad(format!(
                        "symlink {}: its target is empty or {PATH_MAX} bytes or longer",
                        rel.display()
                    )));
                }
                symlinks.insert(rel.clone());
                TreeEntry::Symlink { target }
            }
            other => {
                return Err(bad(format!(
                    "entry {}: {other:?} entries are not accepted (files, directories and symlinks only)",
                    rel.display()
                )))
            }
        };
        if let Some(previous) = plan.get(&rel) {
            let same_kind = matches!(
                (previous, &planned),
                (TreeEntry::Dir { .. }, TreeEntry::Dir { .. })
            );
            if !same_kind {
                return Err(bad(format!("entry {} appears twice", rel.display())));
            }
        }
        // A file's parent must not be a file of the archive.
        for parent in rel.ancestors().skip(1) {
            if matches!(
                plan.get(parent),
                Some(TreeEntry::File { .. } | TreeEntry::Symlink { .. })
            ) {
                return Err(bad(format!(
                    "entry {} lies below the file {}",
                    rel.display(),
                    parent.display()
                )));
            }
        }
        plan.insert(rel, planned);
    }
    Ok(TreePlan {
        entries: plan,
        opts: opts.clone(),
    })
}

/// `.`, `./`, `.//`: the archive's own root.
fn is_own_root(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw.iter().all(|b| *b == b'.' || *b == b'/')
        && raw.first() == Some(&b'.')
        && !raw.windows(2).any(|w| w == b"..")
}

/// `raw` as a relative path of plain names, each at most 255 bytes: the handoff's rules
/// ([`parse_archive_path`]) once `.` and empty names (`./a`, `a//b`) are dropped; `None` for
/// anything else.
fn plain_path(raw: &[u8]) -> Option<PathBuf> {
    if raw.first() == Some(&b'/') {
        return None;
    }
    if raw.split(|b| *b == b'/').any(|name| name.len() > NAME_MAX) {
        return None;
    }
    let names: Vec<&[u8]> = raw
        .split(|b| *b == b'/')
        .filter(|name| !name.is_empty() && *name != b".")
        .collect();
    parse_archive_path(&names.join(&b'/')).ok()
}

impl TreePlan {
    /// Opens (and makes, where missing) the directory unpacked into, `rel` below the mount
    /// root `root`, without following a symlink.
    pub fn open_base(&self, root: &OwnedFd, rel: &Path) -> Result<OwnedFd, TreeError> {
        safe_fs::ensure_dir_beneath(root, rel, 0o755, false).map_err(|e| self.walk_error(rel, e))
    }

    /// How many entries the archive places (its own root left out).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks what is in the tree below `base` (the directory unpacked into, opened without
    /// following a symlink) against the archive, before anything is written: no symlink or file
    /// on an entry's way, no directory where a file or symlink goes (and the reverse).
    pub fn check(&self, base: &OwnedFd) -> Result<(), TreeError> {
        for (rel, entry) in &self.entries {
            self.check_entry(base, rel, entry)?;
        }
        Ok(())
    }

    fn check_entry(&self, base: &OwnedFd, rel: &Path, entry: &TreeEntry) -> Result<(), TreeError> {
        let Some((parent, name)) = safe_fs::split_last(rel) else {
            return Ok(());
        };
        let dir = match safe_fs::open_dir_beneath(base, parent) {
            Ok(dir) => dir,
            // Created by the archive's own directories (checked against each other above).
            Err(WalkError::Missing) => return Ok(()),
            Err(e) => return Err(self.walk_error(parent, e)),
        };
        let existing =
            safe_fs::stat_at(&dir, name).map_err(|e| self.io_failed("looking at an entry", &e))?;
        let Some(st) = existing else {
            return Ok(());
        };
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        let is_dir = kind == rustix::fs::FileType::Directory;
        match (entry, is_dir) {
            (TreeEntry::Dir { .. }, false) if kind == rustix::fs::FileType::Symlink => {
                Err(TreeError::Symlink(format!(
                    "{}: a symlink is in the session where the archive has a directory",
                    self.shown(rel)
                )))
            }
            (TreeEntry::Dir { .. }, false) => {
                Err(self.conflict(rel, "a file is there, the archive has a directory"))
            }
            (TreeEntry::File { .. } | TreeEntry::Symlink { .. }, true) => {
                Err(self.conflict(rel, "a directory is there, the archive has a file"))
            }
            _ => Ok(()),
        }
    }

    /// Places the checked entries below `base` (blocking; the caller holds the tree: nothing
    /// else writes it meanwhile), reading their data from `spool`: a directory made with the
    /// archive's permission bits (kept open to its owner), a file or a symlink made beside its
    /// name and renamed over it, never written through a symlink. Returns the changes and the
    /// modes not set as asked.
    pub fn place(&self, base: &OwnedFd, spool: &mut File) -> Result<TreeUnpacked, TreeError> {
        let mut changes = Vec::with_capacity(self.entries.len());
        let mut adjusted = Vec::new();
        let mut more = 0usize;
        for (rel, entry) in &self.entries {
            let (change, kept) = self.place_entry(base, rel, entry, spool)?;
            if let Some(warning) = mode_warning(&self.shown(rel), entry, change.as_ref(), kept) {
                if adjusted.len() < MAX_WARNINGS {
                    adjusted.push(warning);
                } else {
                    more = more.saturating_add(1);
                }
            }
            changes.extend(change);
        }
        if more > 0 {
            adjusted.push(format!(
                "… and {more} more entries whose modes were not set as the archive has them"
            ));
        }
        Ok(TreeUnpacked {
            changes,
            warnings: adjusted,
        })
    }

    /// Places one checked entry; the change it made, if any, and for a directory that was there
    /// already, the mode it keeps.
    fn place_entry(
        &self,
        base: &OwnedFd,
        rel: &Path,
        entry: &TreeEntry,
        spool: &mut File,
    ) -> Result<(Option<FileChange>, Option<u32>), TreeError> {
        let harness = self.opts.harness_root.join(rel);
        let Some((parent_rel, name)) = safe_fs::split_last(rel) else {
            return Ok((None, None));
        };
        let parent = safe_fs::ensure_dir_beneath(base, parent_rel, 0o755, false)
            .map_err(|e| self.walk_error(parent_rel, e))?;
        let existing = safe_fs::stat_at(&parent, name)
            .map_err(|e| self.io_failed("looking at an entry", &e))?;
        let change = if existing.is_some() {
            ChangeKind::Modified
        } else {
            ChangeKind::Created
        };
        let temp_name = self.opts.temp_name;
        match entry {
            TreeEntry::Dir { mode, .. } => {
                if let Some(st) = existing {
                    return Ok((None, Some(st.st_mode & 0o7777)));
                }
                // The archive's permission bits exactly: mkdir alone would take the umask off.
                safe_fs::mkdir_at(&parent, name, *mode)
                    .and_then(|()| safe_fs::chmod_dir_at(&parent, name, *mode))
                    .map_err(|e| self.io_failed("making a directory", &e))?;
                Ok((
                    Some(FileChange {
                        harness_path: harness,
                        change,
                        kind: EntryKind::Dir,
                        size: 0,
                        mode: *mode,
                    }),
                    None,
                ))
            }
            TreeEntry::File {
                mode,
                mtime,
                offset,
                size,
                ..
            } => {
                let temp = temp_name(name);
                let mut out = safe_fs::create_file_mode_at(&parent, &temp, *mode)
                    .map_err(|e| self.io_failed("creating a file", &e))?;
                // The archive's permission bits exactly (whatever the umask), never setuid.
                let copied = safe_fs::chmod_fd(&out, *mode)
                    .and_then(|()| io::Seek::seek(spool, io::SeekFrom::Start(*offset)))
                    .and_then(|_| io::copy(&mut (&mut *spool).take(*size), &mut out))
                    .and_then(|n| {
                        if n == *size {
                            Ok(())
                        } else {
                            Err(io::Error::other("the archive ended inside a file"))
                        }
                    })
                    .and_then(|()| safe_fs::set_mtime(&out, *mtime))
                    .and_then(|()| safe_fs::rename_at(&parent, &temp, name));
                if let Err(e) = copied {
                    let _ = safe_fs::unlink_at(&parent, &temp, false);
                    return Err(self.io_failed("writing a file", &e));
                }
                Ok((
                    Some(FileChange {
                        harness_path: harness,
                        change,
                        kind: EntryKind::File,
                        size: *size,
                        mode: *mode,
                    }),
                    None,
                ))
            }
            TreeEntry::Symlink { target: link } => {
                // Replaced, never followed: a new link beside it, renamed over the name.
                let temp = temp_name(name);
                let made = safe_fs::symlink_at(link, &parent, &temp)
                    .and_then(|()| safe_fs::rename_at(&parent, &temp, name));
                if let Err(e) = made {
                    let _ = safe_fs::unlink_at(&parent, &temp, false);
                    return Err(self.io_failed("making a symlink", &e));
                }
                Ok((
                    Some(FileChange {
                        harness_path: harness,
                        change,
                        kind: EntryKind::Symlink,
                        size: link.len() as u64,
                        mode: 0o777,
                    }),
                    None,
                ))
            }
        }
    }

    fn shown(&self, rel: &Path) -> String {
        self.opts.harness_root.join(rel).display().to_string()
    }

    fn walk_error(&self, rel: &Path, e: WalkError) -> TreeError {
        match e {
            WalkError::Blocked => TreeError::Symlink(format!(
                "{}: a directory on the way is a symlink, which is not followed",
                self.shown(rel)
            )),
            WalkError::NotDir => self.conflict(rel, "something on the way is not a directory"),
            other => self.io_failed("opening a directory", &other.into_io()),
        }
    }

    fn conflict(&self, rel: &Path, why: &str) -> TreeError {
        TreeError::Conflict(format!("{}: {why}; nothing was written", self.shown(rel)))
    }

    fn io_failed(&self, what: &str, e: &io::Error) -> TreeError {
        TreeError::Io(format!(
            "{what} under {}: {e}",
            self.opts.harness_root.display()
        ))
    }
}

/// Why an entry's mode is not the archive's, if it is not: the mode set on a placed entry
/// (`change`), or `kept`, that of a directory that was there already.
fn mode_warning(
    path: &str,
    entry: &TreeEntry,
    change: Option<&FileChange>,
    kept: Option<u32>,
) -> Option<String> {
    let (asked, is_dir) = match entry {
        TreeEntry::Dir { asked, .. } => (*asked, true),
        TreeEntry::File { asked, .. } => (*asked, false),
        TreeEntry::Symlink { .. } => return None,
    };
    if let Some(kept) = kept {
        return (kept != asked).then(|| {
            format!("{path}: mode {asked:04o} asked, {kept:04o} kept: the directory was there already, and its mode is not changed")
        });
    }
    let set = change?.mode;
    if set == asked {
        return None;
    }
    let mut why = Vec::new();
    if asked & 0o7000 != 0 {
        why.push("setuid, setgid and sticky bits are never set");
    }
    if is_dir && asked & 0o700 != 0o700 {
        why.push("a directory stays readable, writable and searchable by its owner, so that its entries can be placed");
    }
    Some(format!(
        "{path}: mode {asked:04o} asked, {set:04o} set: {}",
        why.join("; ")
    ))
}
