//! The sending side: a full workspace archive for the handoff (`pack`), and on the higher tier an
//! archive of only what changed since the handoff (`changes_since`).
//!
//! Both are written in two passes: a snapshot first (hashes, sizes, so the manifest with its
//! digest can be the first entry and the size limit is checked before a byte is written), then
//! the content, re-hashed while streaming. A file that changed between the passes fails the pack
//! with `ChangedDuringPack` instead of producing an archive that disagrees with its manifest.
//!
//! Also the sending side of a directory's plain tar (the worker's `GET /v1/archive`):
//! [`pack_tree`] walks the tree fd-relative without following a symlink. Every entry of either
//! goes into the tar with the same header ([`header`]).

use super::entry::{Entry, EntryKind};
use super::error::WorkspaceError;
use super::manifest::{
    bounded_left_out, ArchiveKind, Deleted, DigestBuilder, Limits, Manifest, FORMAT, MANIFEST_NAME,
};
use super::paths::{archive_name, check_symlink_target, Exclude};
use super::safe_fs::{self, WalkError};
use super::snapshot::{diff, snapshot_with, ChangeKind, FileChange, HashBudget, Snapshot};
use super::spec::WorkspaceSpec;
use super::walk::ParentCache;
use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Options of the sending side.
#[derive(Debug, Clone, Default)]
pub struct PackOptions {
    /// Runtime-owned names left out of the archive (default: none).
    pub exclude: Exclude,
    /// `max_total_bytes` / `max_entry_bytes` / `max_entries` are enforced before writing.
    pub limits: Limits,
}

/// What a pack wrote.
#[derive(Debug, Clone)]
pub struct PackReport {
    pub entries: u64,
    pub total_bytes: u64,
    pub digest: String,
    /// Objects left out: symlinks pointing outside the workspace, special files, odd names.
    pub warnings: Vec<String>,
    /// The snapshot the archive was made from. The worker keeps it as the base for `apply`.
    pub snapshot: Snapshot,
}

/// What a change archive carries (created/modified objects with content, deletions listed).
#[derive(Debug, Clone)]
pub struct ChangesReport {
    pub changes: Vec<FileChange>,
    pub entries: u64,
    pub total_bytes: u64,
    pub digest: String,
    pub warnings: Vec<String>,
    /// The snapshot the changes were computed against `base` from.
    pub snapshot: Snapshot,
}

struct Planned {
    name: String,
    /// The mount's backing directory (trusted) and the path below it (walked without following
    /// symlinks when the content is read).
    root: PathBuf,
    rel: PathBuf,
    entry: Entry,
}

impl Planned {
    fn shown(&self) -> PathBuf {
        if self.rel.as_os_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(&self.rel)
        }
    }
}

/// The archive's size limits, checked on the files' sizes before any content is read (hashing
/// reads every byte; a sparse file is as large as it claims). With `base`, only what changed since
/// counts. The hashing pass enforces them again for a file that grows in between.
fn precheck(
    spec: &WorkspaceSpec,
    opts: &PackOptions,
    base: Option<&Snapshot>,
) -> Result<(), WorkspaceError> {
    let stats = snapshot_with(spec, &opts.exclude, None, HashBudget::STAT_ONLY)?;
    let changed: Vec<&Entry> = match base {
        None => stats.entries.values().collect(),
        Some(base) => stats
            .entries
            .iter()
            .filter(|(p, e)| base.get(p).is_none_or(|b| !b.same_content(e)))
            .map(|(_, e)| e)
            .collect(),
    };
    let limits = &opts.limits;
    let mut total = 0u64;
    for e in changed.into_iter().filter(|e| e.kind == EntryKind::File) {
        if e.size > limits.max_entry_bytes {
            return Err(WorkspaceError::TooLarge {
                what: "a file",
                size: e.size,
                limit: limits.max_entry_bytes,
            });
        }
        total = total.saturating_add(e.size);
    }
    if total > limits.max_total_bytes {
        return Err(WorkspaceError::TooLarge {
            what: "workspace content",
            size: total,
            limit: limits.max_total_bytes,
        });
    }
    Ok(())
}

/// Packs every tracked mount of `spec` into `out`.
pub fn pack<W: Write>(
    spec: &WorkspaceSpec,
    opts: &PackOptions,
    out: W,
) -> Result<PackReport, WorkspaceError> {
    pack_with_cache(spec, opts, None, out)
}

/// `pack`, reusing the hashes of `prev` (e.g. the snapshot taken after the last command).
pub fn pack_with_cache<W: Write>(
    spec: &WorkspaceSpec,
    opts: &PackOptions,
    prev: Option<&Snapshot>,
    out: W,
) -> Result<PackReport, WorkspaceError> {
    precheck(spec, opts, None)?;
    let snapshot = snapshot_with(spec, &opts.exclude, prev, HashBudget::archive(&opts.limits))?;
    let mut warnings = snapshot.warnings.clone();
    let mounts = mount_names(spec);
    let planned: Vec<Planned> = snapshot
        .entries
        .iter()
        .filter_map(|(h, e)| plan(spec, &mounts, h, e, &mut warnings))
        .collect();
    let (entries, total_bytes, digest) = write_archive(
        out,
        ArchiveKind::Full,
        &mounts,
        &planned,
        (Vec::new(), &warnings),
        &opts.limits,
    )?;
    Ok(PackReport {
        entries,
        total_bytes,
        digest,
        warnings,
        snapshot,
    })
}

/// On the higher tier: packs what changed in `spec`'s tracked mounts since `base` (the snapshot
/// `unpack` returned), deletions listed in the manifest.
pub fn changes_since<W: Write>(
    spec: &WorkspaceSpec,
    base: &Snapshot,
    opts: &PackOptions,
    out: W,
) -> Result<ChangesReport, WorkspaceError> {
    precheck(spec, opts, Some(base))?;
    let snapshot = snapshot_with(
        spec,
        &opts.exclude,
        Some(base),
        HashBudget::archive(&opts.limits),
    )?;
    let mut warnings = snapshot.warnings.clone();
    let mounts = mount_names(spec);
    let mut planned = Vec::new();
    let mut deleted = Vec::new();
    let mut changes = Vec::new();
    for change in diff(base, &snapshot) {
        let path = &change.harness_path;
        if change.change == ChangeKind::Deleted {
            match archive_name(path) {
                Some(name) => deleted.push(Deleted {
                    path: name,
                    kind: change.kind,
                }),
                None => {
                    warnings.push(format!(
                        "{}: name not representable, deletion skipped",
                        path.display()
                    ));
                    continue;
                }
            }
        } else {
            let Some(entry) = snapshot.entries.get(path) else {
                continue;
            };
            match plan(spec, &mounts, path, entry, &mut warnings) {
                Some(p) => planned.push(p),
                None => continue,
            }
        }
        changes.push(change);
    }
    let (entries, total_bytes, digest) = write_archive(
        out,
        ArchiveKind::Changes,
        &mounts,
        &planned,
        (deleted, &warnings),
        &opts.limits,
    )?;
    Ok(ChangesReport {
        changes,
        entries,
        total_bytes,
        digest,
        warnings,
        snapshot,
    })
}

/// Relative names of the tracked mounts (`session`, ...).
fn mount_names(spec: &WorkspaceSpec) -> Vec<PathBuf> {
    spec.tracked()
        .filter_map(|m| m.harness_path.strip_prefix("/").ok().map(Path::to_path_buf))
        .collect()
}

fn plan(
    spec: &WorkspaceSpec,
    mounts: &[PathBuf],
    harness: &Path,
    entry: &Entry,
    warnings: &mut Vec<String>,
) -> Option<Planned> {
    let Some(name) = archive_name(harness) else {
        warnings.push(format!(
            "{}: name not representable, skipped",
            harness.display()
        ));
        return None;
    };
    if entry.kind == EntryKind::Symlink {
        let target = entry.target.as_deref().unwrap_or("");
        if let Err(reason) = check_symlink_target(Path::new(&name), target.as_bytes(), mounts) {
            warnings.push(format!("{}: {reason}, skipped", harness.display()));
            return None;
        }
    }
    let mount = spec.mount_for(harness)?;
    let rel = harness.strip_prefix(&mount.harness_path).ok()?;
    Some(Planned {
        name,
        root: mount.backing_path.clone(),
        rel: rel.to_path_buf(),
        entry: entry.clone(),
    })
}

fn write_archive<W: Write>(
    out: W,
    kind: ArchiveKind,
    mounts: &[PathBuf],
    planned: &[Planned],
    (deleted, left_out): (Vec<Deleted>, &[String]),
    limits: &Limits,
) -> Result<(u64, u64, String), WorkspaceError> {
    let count = (planned.len() as u64).saturating_add(deleted.len() as u64);
    if count > limits.max_entries {
        return Err(WorkspaceError::TooLarge {
            what: "entry count",
            size: count,
            limit: limits.max_entries,
        });
    }
    let mut total = 0u64;
    let mut digest = DigestBuilder::new();
    for p in planned {
        let e = &p.entry;
        if e.kind == EntryKind::File {
            if e.size > limits.max_entry_bytes {
                return Err(WorkspaceError::TooLarge {
                    what: "a file",
                    size: e.size,
                    limit: limits.max_entry_bytes,
                });
            }
            total = total.saturating_add(e.size);
        }
        let content = match e.kind {
            EntryKind::File => e.sha256.as_deref().unwrap_or(""),
            EntryKind::Symlink => e.target.as_deref().unwrap_or(""),
            EntryKind::Dir => "",
        };
        digest.entry(&p.name, e.kind, e.mode, e.size_on_wire(), content);
    }
    if total > limits.max_total_bytes {
        return Err(WorkspaceError::TooLarge {
            what: "workspace content",
            size: total,
            limit: limits.max_total_bytes,
        });
    }
    for d in &deleted {
        digest.deleted(&d.path, d.kind);
    }
    let digest = digest.finish();
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        kind,
        mounts: mounts.iter().map(|m| format!("/{}", m.display())).collect(),
        entries: planned.len() as u64,
        total_bytes: total,
        digest: digest.clone(),
        deleted,
        left_out: bounded_left_out(left_out),
    };
    let json = serde_json::to_vec(&manifest)
        .map_err(|e| WorkspaceError::Manifest(format!("serializing the manifest: {e}")))?;
    let io_err = |e: io::Error| WorkspaceError::io("<archive output>", e);
    let mut tar = tar::Builder::new(out);
    let mut h = header(tar::EntryType::Regular, 0o644, 0, json.len() as u64);
    tar.append_data(&mut h, MANIFEST_NAME, json.as_slice())
        .map_err(io_err)?;
    let mut parents = ParentCache::new();
    for p in planned {
        let e = &p.entry;
        // Whole seconds, never before the epoch; at most MAX_MTIME_SECS, since i64 ns is.
        let mtime = u64::try_from(e.mtime_ns.max(0).div_euclid(1_000_000_000)).unwrap_or(0);
        match e.kind {
            EntryKind::Dir => {
                let mut h = header(tar::EntryType::Directory, e.mode & 0o777, mtime, 0);
                tar.append_data(&mut h, &p.name, io::empty())
                    .map_err(io_err)?;
            }
            EntryKind::Symlink => {
                let mut h = header(tar::EntryType::Symlink, 0o777, mtime, 0);
                let target = e.target.as_deref().unwrap_or("");
                tar.append_link(&mut h, &p.name, target).map_err(io_err)?;
            }
            EntryKind::File => {
                let changed = || WorkspaceError::ChangedDuringPack(p.shown());
                let (parent, name) = safe_fs::split_last(&p.rel).ok_or_else(changed)?;
                let dir = parents.open(&p.root, parent).map_err(|_| changed())?;
                let file = safe_fs::open_regular_at(dir, name).map_err(|_| changed())?;
                let mut reader = Verifying::new(file, e.size, e.sha256.clone().unwrap_or_default());
                let mut h = header(tar::EntryType::Regular, e.mode & 0o777, mtime, e.size);
                match tar.append_data(&mut h, &p.name, &mut reader) {
                    Ok(()) => {}
                    Err(_) if reader.mismatch => return Err(changed()),
                    Err(err) => return Err(io_err(err)),
                }
            }
        }
    }
    tar.into_inner().map_err(io_err)?.flush().map_err(io_err)?;
    Ok((planned.len() as u64, total, digest))
}

impl Entry {
    /// Size as recorded in the digest: file length, 0 for directories and symlinks.
    pub(crate) fn size_on_wire(&self) -> u64 {
        if self.kind == EntryKind::File {
            self.size
        } else {
            0
        }
    }
}

/// The header of every entry either side writes: GNU, owned by 0:0, `mode` as given.
fn header(kind: tar::EntryType, mode: u32, mtime: u64, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_mtime(mtime);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(size);
    h
}

/// Streams exactly `size` bytes and fails (instead of padding) if the file is shorter or its bytes
/// no longer hash to what the manifest says.
struct Verifying {
    inner: io::Take<std::fs::File>,
    remaining: u64,
    hash: Sha256,
    expected: String,
    mismatch: bool,
    done: bool,
}

impl Verifying {
    fn new(file: std::fs::File, size: u64, expected: String) -> Self {
        Verifying {
            inner: file.take(size),
            remaining: size,
            hash: Sha256::new(),
            expected,
            mismatch: false,
            done: false,
        }
    }
}

impl Read for Verifying {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(buf.get(..n).unwrap_or_default());
        self.remaining = self.remaining.saturating_sub(n as u64);
        if n == 0 && !buf.is_empty() && !self.done {
            self.done = true;
            let actual = hex::encode(std::mem::take(&mut self.hash).finalize());
            if self.remaining != 0 || actual != self.expected {
                self.mismatch = true;
                return Err(io::Error::other("file changed during pack"));
            }
        }
        Ok(n)
    }
}

/// Bounds of a directory's tar, either way ([`pack_tree`], `unpack::plan_tree`): a bound on
/// the work one request can cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// Entries one archive may hold.
    pub max_entries: usize,
    /// Directory depth below the archive's root.
    pub max_depth: usize,
}

impl Default for TreeLimits {
    fn default() -> Self {
        TreeLimits {
            max_entries: 200_000,
            max_depth: 256,
        }
    }
}

/// Writes the tree below `dir` (opened without following a symlink) as a plain tar into `out`:
/// walked fd-relative, never through a symlink (a symlink goes in as a symlink, its target as
/// data), regular files and directories with their modes (setuid, setgid and sticky bits too)
/// and times; special files are left out. A file that changes meanwhile goes in cut or
/// zero-padded to the size it had. Past `limits` it fails; an error after the first byte leaves
/// `out` a truncated tar.
pub fn pack_tree<W: Write>(dir: &OwnedFd, out: W, limits: TreeLimits) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut count = 0usize;
    walk_tree(&mut builder, dir, Path::new(""), 0, &mut count, limits)?;
    builder.finish()?;
    builder.get_mut().flush()
}

fn walk_tree<W: Write>(
    builder: &mut tar::Builder<W>,
    dir: &OwnedFd,
    rel: &Path,
    depth: usize,
    count: &mut usize,
    limits: TreeLimits,
) -> io::Result<()> {
    if depth > limits.max_depth {
        return Err(io::Error::other(format!(
            "the tree is deeper than {} levels",
            limits.max_depth
        )));
    }
    for name in safe_fs::list_dir(dir)? {
        *count = count.saturating_add(1);
        if *count > limits.max_entries {
            return Err(io::Error::other(format!(
                "the tree has more than {} entries",
                limits.max_entries
            )));
        }
        let Some(st) = safe_fs::stat_at(dir, &name)? else {
            continue; // gone meanwhile
        };
        let path = rel.join(&name);
        let mode = st.st_mode & 0o7777;
        let mtime = u64::try_from(st.st_mtime).unwrap_or(0);
        match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::Directory => {
                let mut h = header(tar::EntryType::Directory, mode, mtime, 0);
                builder.append_data(&mut h, &path, io::empty())?;
                let child = safe_fs::open_dir_at(dir, &name).map_err(WalkError::into_io)?;
                walk_tree(
                    builder,
                    &child,
                    &path,
                    depth.saturating_add(1),
                    count,
                    limits,
                )?;
            }
            rustix::fs::FileType::RegularFile => {
                let file = safe_fs::open_regular_at(dir, &name)?;
                let size = file.metadata()?.len();
                let mut h = header(tar::EntryType::Regular, mode, mtime, size);
                // Exactly `size` bytes whatever the file does meanwhile (cut or zero-padded).
                let data = file.take(size).chain(io::repeat(0).take(size));
                builder.append_data(&mut h, &path, data.take(size))?;
            }
            rustix::fs::FileType::Symlink => {
                let target = safe_fs::read_link_at(dir, &name)?;
                let mut h = header(tar::EntryType::Symlink, mode, mtime, 0);
                builder.append_link(&mut h, &path, Path::new(&target))?;
            }
            // Fifos, sockets, devices: not files to hand out.
            _ => {}
        }
    }
    Ok(())
}
