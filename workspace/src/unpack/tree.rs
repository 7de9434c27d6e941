//! The receiving side of a directory's plain tar (the worker's `PUT /v1/archive`), read from a
//! seekable spool: [`plan_tree`] checks the archive whole, [`TreePlan::check`] against the tree
//! it goes into, and only then [`TreePlan::place`] writes, merging into what is there, each
//! file and link through a new name renamed over the old one, never through a symlink. Its
//! names follow the handoff's lexical rules (`paths::parse_archive_path`).

use super::super::entry::EntryKind;
use super::super::pack::TreeLimits;
use super::super::paths::parse_archive_path;
use super::super::safe_fs::{self, WalkError};
use super::super::snapshot::{ChangeKind, FileChange};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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

/// The largest PAX or GNU long-name/long-link record a directory tar may carry. The tar reader
/// holds such a record whole in memory, and only `--max-archive-bytes` (1 GiB by default) bounds
/// the spool: an attacker's 50 MiB long name took the worker past 300 MB and aborted it.
pub const MAX_METADATA: u64 = 64 << 10;

enum Scan {
    Io(io::Error),
    /// The record's kind and its declared size.
    TooLarge(&'static str, u64),
}

/// Walks the spool's 512-byte headers (skipping each entry's data by its declared size) and
/// refuses a PAX (`x`, `g`) or GNU long-name (`L`, `K`) record over [`MAX_METADATA`] before the
/// tar reader would read it into memory. Anything else (a bad checksum, a truncated entry) is
/// left to the reader, which refuses it; the walk stops at the first zero block or past the end.
fn metadata_bounded(spool: &mut File, len: u64) -> Result<(), Scan> {
    use std::io::{Read, Seek, SeekFrom};
    let mut offset = 0u64;
    let mut header = [0u8; 512];
    while offset.saturating_add(512) <= len {
        spool.seek(SeekFrom::Start(offset)).map_err(Scan::Io)?;
        spool.read_exact(&mut header).map_err(Scan::Io)?;
        if header.iter().all(|&b| b == 0) {
            return Ok(());
        }
        // The tar crate's own reading of the header's size (octal or base-256) and type.
        let parsed = tar::Header::from_byte_slice(&header);
        let size = parsed.entry_size().ok();
        let kind = match parsed.entry_type() {
            tar::EntryType::XHeader => Some("PAX"),
            tar::EntryType::XGlobalHeader => Some("PAX global"),
            tar::EntryType::GNULongName => Some("GNU long name"),
            tar::EntryType::GNULongLink => Some("GNU long link"),
            _ => None,
        };
        match (kind, size) {
            (Some(kind), Some(size)) if size > MAX_METADATA => {
                return Err(Scan::TooLarge(kind, size))
            }
            (Some(kind), None) => return Err(Scan::TooLarge(kind, u64::MAX)),
            _ => {}
        }
        let Some(data) = size.and_then(|s| s.checked_add(511)).map(|s| s & !511) else {
            return Ok(());
        };
        offset = match offset.checked_add(512).and_then(|o| o.checked_add(data)) {
            Some(next) => next,
            None => return Ok(()),
        };
    }
    Ok(())
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
    metadata_bounded(spool, spool_len).map_err(|e| match e {
        Scan::Io(e) => io_failed("reading the spool", &e),
        Scan::TooLarge(kind, size) => bad(format!(
            "a {kind} header of {size} bytes: at most {MAX_METADATA} (names and link targets are \
             at most {PATH_MAX} bytes)"
        )),
    })?;
    io::Seek::seek(spool, io::SeekFrom::Start(0))
        .map_err(|e| io_failed("reading the spool", &e))?;
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
                // A NUL (a PAX `linkpath` may carry one) cannot be a target: refused here, not
                // half-way through placing (symlinkat's EINVAL), so nothing is written.
                if target.is_empty() || target.len() >= PATH_MAX || target.as_bytes().contains(&0)
                {
                    return Err(bad(format!(
                        "symlink {}: its target is empty, {PATH_MAX} bytes or longer, or holds a NUL",
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

    /// The relative path of every entry, in order (for a caller's own rules about where an
    /// entry may go, such as read-only prefixes below the target directory).
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.entries.keys().map(PathBuf::as_path)
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_entry_is_a_handoff_name_once_dots_and_empty_names_are_dropped() {
        for (raw, plain) in [
            (&b"a"[..], "a"),
            (b"./a/b", "a/b"),
            (b"a//b/", "a/b"),
            (b"a/./b", "a/b"),
            (b"./d/", "d"),
        ] {
            assert_eq!(plain_path(raw), Some(PathBuf::from(plain)), "{raw:?}");
        }
        let long = [b'x'; 256];
        for raw in [
            &b""[..],
            b".",
            b"/a",
            b"a/../b",
            b"..",
            b"a\0b",
            b"\xff",
            &long,
        ] {
            assert_eq!(plain_path(raw), None, "{raw:?}");
        }
        assert!(is_own_root(b"./") && is_own_root(b".") && !is_own_root(b"../"));
    }
}
