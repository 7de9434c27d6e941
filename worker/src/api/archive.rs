//! A directory in or out of a session as tar (`PUT` and `GET /v1/archive?path=…`; docs/worker-
//! api.md, "Files").
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
use kube_harness_workspace::{ChangeKind, EntryKind, FileChange};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use tokio::sync::mpsc;

/// Entries one archive may hold, in or out (a bound on the work one request can cause).
pub const MAX_ENTRIES: usize = 200_000;
/// Directory depth below the archive's root.
const MAX_DEPTH: usize = 256;
/// The kernel's limits on one name and on a symlink's target.
const NAME_MAX: usize = 255;
const PATH_MAX: usize = 4096;
/// Bytes per chunk sent to the client.
const CHUNK: usize = 256 << 10;

/// Streams the tree below `target` (a directory) as tar into `tx`; runs on a blocking thread.
/// Errors after the first byte cut the stream short (the client sees a truncated tar).
pub fn write_tar(target: &Target, tx: mpsc::Sender<std::io::Result<Bytes>>) {
    let sink = ChannelWriter {
        tx: tx.clone(),
        buf: Vec::with_capacity(CHUNK),
    };
    let mut builder = tar::Builder::new(sink);
    builder.follow_symlinks(false);
    let result = open_dir(target).and_then(|dir| {
        let mut count = 0usize;
        walk(&mut builder, &dir, Path::new(""), 0, &mut count)?;
        builder.finish()?;
        builder.get_mut().flush()
    });
    if let Err(e) = result {
        let _ = tx.blocking_send(Err(e));
    }
}

fn open_dir(target: &Target) -> std::io::Result<OwnedFd> {
    let root = safe_fs::open_root(&target.mount.backing_path)?;
    safe_fs::open_dir_beneath(&root, &target.rel).map_err(WalkError::into_io)
}

fn walk<W: Write>(
    builder: &mut tar::Builder<W>,
    dir: &OwnedFd,
    rel: &Path,
    depth: usize,
    count: &mut usize,
) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(std::io::Error::other(format!(
            "the tree is deeper than {MAX_DEPTH} levels"
        )));
    }
    for name in safe_fs::list_dir(dir)? {
        *count = count.saturating_add(1);
        if *count > MAX_ENTRIES {
            return Err(std::io::Error::other(format!(
                "the tree has more than {MAX_ENTRIES} entries"
            )));
        }
        let Some(st) = safe_fs::stat_at(dir, &name)? else {
            continue; // gone meanwhile
        };
        let path = rel.join(&name);
        let mut header = tar::Header::new_gnu();
        header.set_mode(st.st_mode & 0o7777);
        header.set_mtime(u64::try_from(st.st_mtime).unwrap_or(0));
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, &path, std::io::empty())?;
                let child = safe_fs::open_dir_at(dir, &name).map_err(WalkError::into_io)?;
                walk(builder, &child, &path, depth.saturating_add(1), count)?;
            }
            libc::S_IFREG => {
                let file = safe_fs::open_regular_at(dir, &name)?;
                let size = file.metadata()?.len();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                // Exactly `size` bytes whatever the file does meanwhile (cut or zero-padded).
                let data = file.take(size).chain(std::io::repeat(0).take(size));
                builder.append_data(&mut header, &path, data.take(size))?;
            }
            libc::S_IFLNK => {
                let target = safe_fs::read_link_at(dir, &name)?;
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                builder.append_link(&mut header, &path, Path::new(&target))?;
            }
            // Fifos, sockets, devices: not files to hand out.
            _ => {}
        }
    }
    Ok(())
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

/// One checked entry of an uploaded archive. `asked` is the archive's mode (with the setuid,
/// setgid and sticky bits), `mode` what is set.
#[derive(Debug)]
enum Planned {
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

/// At most this many entries whose mode was not set as asked are named in the answer; the rest
/// are counted in one more line (an archive may hold 200,000 setuid files).
const MAX_WARNINGS: usize = 100;

/// What an archive upload placed, and what it did not place as the archive asked.
pub struct Extracted {
    pub changes: Vec<FileChange>,
    /// One line per entry whose mode was not set as the archive has it (setuid, setgid and
    /// sticky bits are never set, a directory stays open to its owner, an existing directory
    /// keeps its mode), at most [`MAX_WARNINGS`] and then a count.
    pub warnings: Vec<String>,
}

/// Checks a spooled archive against itself and the session's tree below `target`, then places
/// it (blocking: run it off the async threads; the caller holds the session). Returns the changes
/// and the modes it could not keep.
pub fn extract(target: &Target, mut spool: std::fs::File) -> Result<Extracted, WorkerError> {
    let plan = plan(target, &mut spool)?;
    let created = files::missing_dirs(target, &target.rel)?;
    let root = safe_fs::open_root(&target.mount.backing_path)
        .map_err(|e| io_failed(target, "opening its mount", &e))?;
    let base = safe_fs::ensure_dir_beneath(&root, &target.rel, 0o755, false)
        .map_err(|e| walk_refusal(target, &target.rel, e))?;
    // Checked against what is there before anything is written.
    for (rel, entry) in &plan {
        if let Err(refusal) = check_existing(target, &base, rel, entry) {
            files::remove_created(target, &created);
            return Err(refusal);
        }
    }
    let mut changes = Vec::with_capacity(plan.len());
    let mut adjusted = Vec::new();
    let mut more = 0usize;
    for (rel, entry) in &plan {
        let (change, kept) = place(target, &base, rel, entry, &mut spool)?;
        if let Some(warning) = mode_warning(&shown(target, rel), entry, change.as_ref(), kept) {
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
    Ok(Extracted {
        changes,
        warnings: adjusted,
    })
}

/// Why an entry's mode is not the archive's, if it is not: the mode set on a placed entry
/// (`change`), or `kept`, that of a directory that was there already.
fn mode_warning(
    path: &str,
    entry: &Planned,
    change: Option<&FileChange>,
    kept: Option<u32>,
) -> Option<String> {
    let (asked, is_dir) = match entry {
        Planned::Dir { asked, .. } => (*asked, true),
        Planned::File { asked, .. } => (*asked, false),
        Planned::Symlink { .. } => return None,
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

fn plan(
    target: &Target,
    spool: &mut std::fs::File,
) -> Result<BTreeMap<PathBuf, Planned>, WorkerError> {
    let spool_len = spool
        .seek(SeekFrom::End(0))
        .and_then(|len| spool.seek(SeekFrom::Start(0)).map(|_| len))
        .map_err(|e| io_failed(target, "reading the spool", &e))?;
    let mut archive = tar::Archive::new(&mut *spool);
    let entries = archive
        .entries_with_seek()
        .map_err(|e| bad_archive(&e.to_string()))?;
    let mut plan: BTreeMap<PathBuf, Planned> = BTreeMap::new();
    let mut symlinks: BTreeSet<PathBuf> = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(|e| bad_archive(&e.to_string()))?;
        if plan.len() >= MAX_ENTRIES {
            return Err(bad_archive(&format!("more than {MAX_ENTRIES} entries")));
        }
        let raw = entry.path_bytes().into_owned();
        // `./` itself (what `tar -C dir -cf - .` starts with) is the target directory.
        if entry.header().entry_type() == tar::EntryType::Directory && is_own_root(&raw) {
            continue;
        }
        let rel = plain_path(&raw).ok_or_else(|| {
            bad_archive(&format!(
                "entry {:?}: not a plain relative UTF-8 path of names of at most 255 bytes",
                String::from_utf8_lossy(&raw)
            ))
        })?;
        if rel.components().count() > MAX_DEPTH {
            return Err(bad_archive(&format!(
                "entry {}: deeper than {MAX_DEPTH} levels",
                rel.display()
            )));
        }
        if let Some(link) = rel.ancestors().skip(1).find(|a| symlinks.contains(*a)) {
            return Err(bad_archive(&format!(
                "entry {} lies below the archive's symlink {}",
                rel.display(),
                link.display()
            )));
        }
        let header = entry.header();
        let asked = header.mode().unwrap_or(0o644) & 0o7777;
        let mode = asked & 0o777;
        let planned = match header.entry_type() {
            tar::EntryType::Directory => Planned::Dir {
                mode: mode | 0o700,
                asked,
            },
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let (offset, size) = (entry.raw_file_position(), entry.size());
                // The whole file must be in the archive before anything is written.
                if offset.checked_add(size).is_none_or(|end| end > spool_len) {
                    return Err(bad_archive(&format!(
                        "the archive ends inside {} ({size} bytes declared)",
                        rel.display()
                    )));
                }
                Planned::File {
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
                    .ok_or_else(|| bad_archive(&format!("symlink {} has no target", rel.display())))?;
                if target.is_empty() || target.len() >= PATH_MAX {
                    return Err(bad_archive(&format!(
                        "symlink {}: its target is empty or {PATH_MAX} bytes or longer",
                        rel.display()
                    )));
                }
                symlinks.insert(rel.clone());
                Planned::Symlink { target }
            }
            other => {
                return Err(bad_archive(&format!(
                    "entry {}: {other:?} entries are not accepted (files, directories and symlinks only)",
                    rel.display()
                )))
            }
        };
        if let Some(previous) = plan.get(&rel) {
            let same_kind = matches!(
                (previous, &planned),
                (Planned::Dir { .. }, Planned::Dir { .. })
            );
            if !same_kind {
                return Err(bad_archive(&format!(
                    "entry {} appears twice",
                    rel.display()
                )));
            }
        }
        // A file's parent must not be a file of the archive.
        for parent in rel.ancestors().skip(1) {
            if matches!(
                plan.get(parent),
                Some(Planned::File { .. } | Planned::Symlink { .. })
            ) {
                return Err(bad_archive(&format!(
                    "entry {} lies below the file {}",
                    rel.display(),
                    parent.display()
                )));
            }
        }
        plan.insert(rel, planned);
    }
    Ok(plan)
}

/// `.`, `./`, `.//`: the archive's own root.
fn is_own_root(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw.iter().all(|b| *b == b'.' || *b == b'/')
        && raw.first() == Some(&b'.')
        && !raw.windows(2).any(|w| w == b"..")
}

/// `raw` as a relative path of plain names (`./` prefixes dropped), UTF-8 (the events name it),
/// each name at most 255 bytes; `None` for anything else.
fn plain_path(raw: &[u8]) -> Option<PathBuf> {
    if raw.contains(&0) || std::str::from_utf8(raw).is_err() {
        return None;
    }
    if raw.split(|b| *b == b'/').any(|name| name.len() > NAME_MAX) {
        return None;
    }
    let path = Path::new(OsStr::from_bytes(raw));
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// What is in the session at `rel` must let the entry be placed: no symlink or file on the way,
/// no directory where a file or symlink goes (and the reverse).
fn check_existing(
    target: &Target,
    base: &OwnedFd,
    rel: &Path,
    entry: &Planned,
) -> Result<(), WorkerError> {
    let Some((parent, name)) = safe_fs::split_last(rel) else {
        return Ok(());
    };
    let dir = match safe_fs::open_dir_beneath(base, parent) {
        Ok(dir) => dir,
        // Created by the archive's own directories (checked against each other above).
        Err(WalkError::Missing) => return Ok(()),
        Err(e) => return Err(walk_refusal(target, parent, e)),
    };
    let existing =
        safe_fs::stat_at(&dir, name).map_err(|e| io_failed(target, "looking at an entry", &e))?;
    let Some(st) = existing else {
        return Ok(());
    };
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    match (entry, is_dir) {
        (Planned::Dir { .. }, false) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
            Err(WorkerError::BadPath(format!(
                "{}: a symlink is in the session where the archive has a directory",
                shown(target, rel)
            )))
        }
        (Planned::Dir { .. }, false) => Err(conflict(
            target,
            rel,
            "a file is there, the archive has a directory",
        )),
        (Planned::File { .. } | Planned::Symlink { .. }, true) => Err(conflict(
            target,
            rel,
            "a directory is there, the archive has a file",
        )),
        _ => Ok(()),
    }
}

/// Places one checked entry; the change it made, if any, and for a directory that was there
/// already, the mode it keeps.
fn place(
    target: &Target,
    base: &OwnedFd,
    rel: &Path,
    entry: &Planned,
    spool: &mut std::fs::File,
) -> Result<(Option<FileChange>, Option<u32>), WorkerError> {
    let harness = target.harness.join(rel);
    let Some((parent_rel, name)) = safe_fs::split_last(rel) else {
        return Ok((None, None));
    };
    let parent = safe_fs::ensure_dir_beneath(base, parent_rel, 0o755, false)
        .map_err(|e| walk_refusal(target, parent_rel, e))?;
    let existing = safe_fs::stat_at(&parent, name)
        .map_err(|e| io_failed(target, "looking at an entry", &e))?;
    let change = if existing.is_some() {
        ChangeKind::Modified
    } else {
        ChangeKind::Created
    };
    match entry {
        Planned::Dir { mode, .. } => {
            if let Some(st) = existing {
                return Ok((None, Some(st.st_mode & 0o7777)));
            }
            // The archive's permission bits exactly: mkdir alone would take the umask off.
            safe_fs::mkdir_at(&parent, name, *mode)
                .and_then(|()| safe_fs::chmod_dir_at(&parent, name, *mode))
                .map_err(|e| io_failed(target, "making a directory", &e))?;
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
        Planned::File {
            mode,
            mtime,
            offset,
            size,
            ..
        } => {
            let temp = files::temp_name(name);
            let mut out = safe_fs::create_file_mode_at(&parent, &temp, *mode)
                .map_err(|e| io_failed(target, "creating a file", &e))?;
            // The archive's permission bits exactly (whatever the umask), never setuid.
            let copied = safe_fs::chmod_fd(&out, *mode)
                .and_then(|()| spool.seek(SeekFrom::Start(*offset)))
                .and_then(|_| std::io::copy(&mut (&mut *spool).take(*size), &mut out))
                .and_then(|n| {
                    if n == *size {
                        Ok(())
                    } else {
                        Err(std::io::Error::other("the archive ended inside a file"))
                    }
                })
                .and_then(|()| safe_fs::set_mtime(&out, *mtime))
                .and_then(|()| safe_fs::rename_at(&parent, &temp, name));
            if let Err(e) = copied {
                let _ = safe_fs::unlink_at(&parent, &temp, false);
                return Err(io_failed(target, "writing a file", &e));
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
        Planned::Symlink { target: link } => {
            // Replaced, never followed: a new link beside it, renamed over the name.
            let temp = files::temp_name(name);
            let made = safe_fs::symlink_at(link, &parent, &temp)
                .and_then(|()| safe_fs::rename_at(&parent, &temp, name));
            if let Err(e) = made {
                let _ = safe_fs::unlink_at(&parent, &temp, false);
                return Err(io_failed(target, "making a symlink", &e));
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

fn shown(target: &Target, rel: &Path) -> String {
    target.harness.join(rel).display().to_string()
}

fn walk_refusal(target: &Target, rel: &Path, e: WalkError) -> WorkerError {
    match e {
        WalkError::Blocked => WorkerError::BadPath(format!(
            "{}: a directory on the way is a symlink, which is not followed",
            shown(target, rel)
        )),
        WalkError::NotDir => conflict(target, rel, "something on the way is not a directory"),
        other => io_failed(target, "opening a directory", &other.into_io()),
    }
}

fn conflict(target: &Target, rel: &Path, why: &str) -> WorkerError {
    WorkerError::KindConflict(format!(
        "{}: {why}; nothing was written",
        shown(target, rel)
    ))
}

fn bad_archive(why: &str) -> WorkerError {
    WorkerError::BadArchive(why.to_string())
}

fn io_failed(target: &Target, what: &str, e: &std::io::Error) -> WorkerError {
    WorkerError::Io(format!("{what} under {}: {e}", target.harness.display()))
}
