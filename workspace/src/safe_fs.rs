//! Host-side file access inside guest-writable trees that never follows a symlink.
//!
//! The trust rule: a mount's ROOT backing directory (and any other directory the host made
//! itself, such as a Persistent Dir's source) is trusted and may be reached through symlinks;
//! everything below it may have been written by a command and is data. Every path below a
//! trusted root is therefore walked one component at a time with
//! `openat(O_DIRECTORY | O_NOFOLLOW)`; leaves are opened with `O_NOFOLLOW` (and `O_NONBLOCK`, so a
//! fifo cannot stall the host) and checked to be regular files; new leaves are created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW` (or `mkdirat`/`symlinkat`, which never follow the last
//! component). A symlink planted by a script or an archive cannot redirect a read or a write
//! outside the root, and a symlink found in a tree is copied as a symlink, never through.
//!
//! Timestamps: a file's mtime is carried as i64 nanoseconds since the epoch. Stat times outside
//! that range (before 1677-09-21 or after 2262-04-11) saturate to its bounds, and archive mtimes
//! are clamped to `0..=MAX_MTIME_SECS` before they reach the filesystem
//! (docs/workspace-handoff.md).

pub use super::entry::{kind_of, time_ns};
use super::entry::{Entry, EntryKind};
use super::error::EntryRejection;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// The latest modification time (seconds since the epoch) a file written from an archive gets:
/// the last whole second that i64 nanoseconds can hold, 2262-04-11T23:47:16Z. Later archive
/// mtimes (GNU base-256 fields can carry up to 2^64-1) are clamped to it.
pub const MAX_MTIME_SECS: u64 = 9_223_372_036;

/// How deep a tree the host walks or copies below a trusted root. Each level holds one open
/// directory (two when copying); a deeper tree is reported (walk) or refused (copy), never a
/// stack overflow or a run out of file descriptors.
pub const MAX_DEPTH: usize = 256;

/// An archive entry's mtime as what is written to disk: clamped to `0..=MAX_MTIME_SECS`.
pub fn clamp_mtime(secs: u64) -> u64 {
    secs.min(MAX_MTIME_SECS)
}

/// Sets a file's modification time to `secs` (clamped as `clamp_mtime`) without arithmetic that
/// could overflow.
pub fn set_mtime(file: &File, secs: u64) -> io::Result<()> {
    let when = std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::from_secs(clamp_mtime(secs)))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "mtime out of range"))?;
    file.set_modified(when)
}

/// Why walking to a directory failed.
#[derive(Debug)]
pub enum WalkError {
    /// A component is a symlink (or not a plain name).
    Blocked,
    /// A component is a file or another non-directory.
    NotDir,
    /// A component does not exist.
    Missing,
    Io(io::Error),
}

impl WalkError {
    pub(crate) fn rejection(&self) -> Option<EntryRejection> {
        match self {
            WalkError::Blocked | WalkError::NotDir => Some(EntryRejection::ThroughSymlink),
            WalkError::Missing => Some(EntryRejection::ParentMissing),
            WalkError::Io(_) => None,
        }
    }

    /// As an `io::Error`: `NotFound` for a missing component, `ELOOP`/`ENOTDIR` for a symlink
    /// or a non-directory in the way.
    pub fn into_io(self) -> io::Error {
        match self {
            WalkError::Blocked => Errno::LOOP.into(),
            WalkError::NotDir => Errno::NOTDIR.into(),
            WalkError::Missing => Errno::NOENT.into(),
            WalkError::Io(e) => e,
        }
    }
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::Blocked => f.write_str("a path component is a symlink"),
            WalkError::NotDir => f.write_str("a path component is not a directory"),
            WalkError::Missing => f.write_str("a path component does not exist"),
            WalkError::Io(e) => e.fmt(f),
        }
    }
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opens a trusted root directory (the root itself may be reached through symlinks).
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    Ok(rfs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens the directory `name` in `dir`, never through a symlink.
pub fn open_dir_at(dir: &impl AsFd, name: &OsStr) -> Result<OwnedFd, WalkError> {
    match rfs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(fd),
        // With O_DIRECTORY a symlink may fail as ENOTDIR rather than ELOOP: ask lstat.
        Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
            match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::Symlink => {
                    Err(WalkError::NotDir)
                }
                _ => Err(WalkError::Blocked),
            }
        }
        Err(Errno::NOENT) => Err(WalkError::Missing),
        Err(e) => Err(WalkError::Io(e.into())),
    }
}

/// Opens `rel` (relative, normal components only; empty for `root` itself) under `root` without
/// following symlinks.
pub fn open_dir_beneath(root: &impl AsFd, rel: &Path) -> Result<OwnedFd, WalkError> {
    let mut cur =
        rfs::openat(root, ".", DIR_FLAGS, Mode::empty()).map_err(|e| WalkError::Io(e.into()))?;
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(WalkError::Blocked);
        };
        cur = open_dir_at(&cur, name)?;
    }
    Ok(cur)
}

/// Opens (creating what is missing, with `mode`) the directory `rel` under `root`, never
/// through a symlink. With `replace`, a symlink or other non-directory in the way is removed
/// and replaced by a directory (for paths the host owns inside a guest-writable tree); without,
/// it fails with `Blocked`/`NotDir`.
pub fn ensure_dir_beneath(
    root: &impl AsFd,
    rel: &Path,
    mode: u32,
    replace: bool,
) -> Result<OwnedFd, WalkError> {
    let mut cur =
        rfs::openat(root, ".", DIR_FLAGS, Mode::empty()).map_err(|e| WalkError::Io(e.into()))?;
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(WalkError::Blocked);
        };
        let next = match open_dir_at(&cur, name) {
            Ok(fd) => fd,
            Err(WalkError::Missing) => {
                mkdir_or_exists(&cur, name, mode)?;
                open_dir_at(&cur, name)?
            }
            Err(WalkError::Blocked | WalkError::NotDir) if replace => {
                unlink_at(&cur, name, false).map_err(WalkError::Io)?;
                mkdir_or_exists(&cur, name, mode)?;
                open_dir_at(&cur, name)?
            }
            Err(e) => return Err(e),
        };
        cur = next;
    }
    Ok(cur)
}

fn mkdir_or_exists(dir: &impl AsFd, name: &OsStr, mode: u32) -> Result<(), WalkError> {
    match rfs::mkdirat(dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(WalkError::Io(e.into())),
    }
}

/// Splits `rel` into its parent and last component; `None` for an empty path or one ending in
/// `..`.
pub fn split_last(rel: &Path) -> Option<(&Path, &OsStr)> {
    let name = rel.file_name()?;
    Some((rel.parent().unwrap_or(Path::new("")), name))
}

/// Opens the regular file `rel` under `root` for reading, never through a symlink (in any
/// component) and never blocking on a fifo.
pub fn open_regular_beneath(root: &impl AsFd, rel: &Path) -> io::Result<File> {
    let (parent, name) = split_last(rel)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file path"))?;
    let dir = open_dir_beneath(root, parent).map_err(WalkError::into_io)?;
    open_regular_at(&dir, name)
}

/// Accepts an opened descriptor only if it is a regular file (not a fifo, device or directory).
fn regular_only(fd: rustix::fd::OwnedFd) -> io::Result<File> {
    let st = rfs::fstat(&fd)?;
    if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(File::from(fd))
}

/// Opens a regular file for reading without following a final symlink and without blocking on
/// a fifo swapped in under our feet. Only for paths whose directories are all host-owned; below
/// a guest-writable root use `open_regular_beneath`/`open_regular_at`.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let fd = rfs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    regular_only(fd)
}

/// Creates a new file (fails if anything, including a symlink, already has the name), mode 0600.
pub fn create_file_at(dir: &impl AsFd, name: &OsStr) -> io::Result<File> {
    create_file_mode_at(dir, name, 0o600)
}

/// Creates a new file with `mode` (before the umask); fails if anything already has the name.
pub fn create_file_mode_at(dir: &impl AsFd, name: &OsStr, mode: u32) -> io::Result<File> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    Ok(File::from(fd))
}

pub fn mkdir_at(dir: &impl AsFd, name: &OsStr, mode: u32) -> io::Result<()> {
    Ok(rfs::mkdirat(dir, name, Mode::from_raw_mode(mode))?)
}

pub fn symlink_at(target: &OsStr, dir: &impl AsFd, name: &OsStr) -> io::Result<()> {
    Ok(rfs::symlinkat(target, dir, name)?)
}

pub fn unlink_at(dir: &impl AsFd, name: &OsStr, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    Ok(rfs::unlinkat(dir, name, flags)?)
}

pub fn rename_at(dir: &impl AsFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    Ok(rfs::renameat(dir, from, dir, to)?)
}

/// `chmod` on a directory entry that must be a directory (not a symlink to one).
pub fn chmod_dir_at(dir: &impl AsFd, name: &OsStr, mode: u32) -> io::Result<()> {
    let fd = rfs::openat(dir, name, DIR_FLAGS, Mode::empty())?;
    Ok(rfs::fchmod(&fd, Mode::from_raw_mode(mode))?)
}

pub fn chmod_fd(fd: &impl AsFd, mode: u32) -> io::Result<()> {
    Ok(rfs::fchmod(fd, Mode::from_raw_mode(mode))?)
}

/// lstat of `name` in `dir`; `Ok(None)` when nothing has that name.
pub fn stat_at(dir: &impl AsFd, name: &OsStr) -> io::Result<Option<rfs::Stat>> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The target of the symlink `name` in `dir`, verbatim.
pub fn read_link_at(dir: &impl AsFd, name: &OsStr) -> io::Result<OsString> {
    let t = rfs::readlinkat(dir, name, Vec::new())?;
    Ok(OsStr::from_bytes(t.as_bytes()).to_os_string())
}

/// lstat of `name` in `dir` as a snapshot entry (no content hash; symlink target filled in).
/// `Ok(None)` when nothing has that name; `Err(InvalidInput)` for sockets, fifos and devices.
pub(crate) fn entry_at(dir: &impl AsFd, name: &OsStr) -> io::Result<Option<Entry>> {
    let Some(st) = stat_at(dir, name)? else {
        return Ok(None);
    };
    let Some(mut entry) = Entry::from_stat(&st) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "special file"));
    };
    if entry.kind == EntryKind::Symlink {
        entry.target = Some(read_link_at(dir, name)?.to_string_lossy().into_owned());
    }
    Ok(Some(entry))
}

/// Opens `name` in `dir` for reading: regular files only, never through a symlink.
pub fn open_regular_at(dir: &impl AsFd, name: &OsStr) -> io::Result<File> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    regular_only(fd)
}

/// The names in a directory (not `.` or `..`), sorted bytewise (the order `Path` compares in).
pub fn list_dir(dir: &impl AsFd) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in rfs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    names.sort();
    Ok(names)
}

fn too_deep() -> io::Error {
    io::Error::other(format!("the tree is deeper than {MAX_DEPTH} levels"))
}

/// Directories [`remove_tree_at`] holds open at once. A subtree found deeper is moved up to the
/// top of the tree being removed and taken from there, so any depth costs this many descriptors
/// and a constant stack (a 30,000-level tree in a sandbox's `/tmp` overflowed the 2 MiB stack of
/// the worker's runtime thread in the recursive `std::fs::remove_dir_all`).
const REMOVE_OPEN_DIRS: usize = 64;

/// Removes `name` in `dir` and, if it is a directory, everything below it, never following a
/// symlink (a symlink is removed, not its target). Nothing with that name is success.
///
/// Built for trees a hostile command made: no depth limit, no recursion, at most
/// [`REMOVE_OPEN_DIRS`] open directories, and a directory left unreadable or unwritable
/// (`chmod 000`) by its owner is made `0700` first (the host runs as the same user, or as root).
pub fn remove_tree_at(dir: &impl AsFd, name: &OsStr) -> io::Result<()> {
    let Some(st) = stat_at(dir, name)? else {
        return Ok(());
    };
    if kind_of(&st) != Some(EntryKind::Dir) {
        return ignore_missing(unlink_at(dir, name, false));
    }
    let root = match open_dir_for_removal(dir, name)? {
        Some(fd) => fd,
        None => return Ok(()),
    };
    // Each frame: an open directory, the names in it still to remove, and its own name in the
    // frame below (the root's name is in `dir`).
    struct Frame {
        fd: OwnedFd,
        todo: Vec<OsString>,
        name: OsString,
    }
    let mut stack = vec![Frame {
        todo: list_dir(&root)?,
        fd: root,
        name: name.to_os_string(),
    }];
    let mut moved = 0u64;
    while let Some(top) = stack.len().checked_sub(1) {
        let Some(child) = stack[top].todo.pop() else {
            let Frame { fd, name: done, .. } = stack.remove(top);
            drop(fd);
            match stack.last() {
                Some(parent) => ignore_missing(unlink_at(&parent.fd, &done, true))?,
                None => ignore_missing(unlink_at(dir, name, true))?,
            }
            continue;
        };
        let Some(st) = stat_at(&stack[top].fd, &child)? else {
            continue;
        };
        if kind_of(&st) != Some(EntryKind::Dir) {
            ignore_missing(unlink_at(&stack[top].fd, &child, false))?;
            continue;
        }
        if stack.len() >= REMOVE_OPEN_DIRS {
            // Too deep to hold open: move it to the top of the tree, to be taken from there.
            let fresh = loop {
                moved = moved.wrapping_add(1);
                let fresh = OsString::from(format!(".kh-removing-{moved}"));
                if stat_at(&stack[0].fd, &fresh)?.is_none() {
                    break fresh;
                }
            };
            rfs::renameat_with(
                &stack[top].fd,
                &child,
                &stack[0].fd,
                &fresh,
                rfs::RenameFlags::NOREPLACE,
            )?;
            stack[0].todo.push(fresh);
            continue;
        }
        let Some(fd) = open_dir_for_removal(&stack[top].fd, &child)? else {
            continue;
        };
        stack.push(Frame {
            todo: list_dir(&fd)?,
            fd,
            name: child,
        });
    }
    Ok(())
}

/// Opens the directory `name` in `dir` to empty it, making it `0700` when its mode keeps its
/// owner out; `None` when it is gone. Never through a symlink: the mode is changed through an
/// `O_PATH | O_NOFOLLOW | O_DIRECTORY` descriptor's `/proc/self/fd` entry, which names the
/// directory itself.
fn open_dir_for_removal(dir: &impl AsFd, name: &OsStr) -> io::Result<Option<OwnedFd>> {
    let retry = match open_dir_at(dir, name) {
        Ok(fd) => {
            // Its entries must be removable too (a `chmod 500` directory).
            let _ = chmod_fd(&fd, 0o700);
            return Ok(Some(fd));
        }
        Err(WalkError::Missing) => return Ok(None),
        Err(WalkError::Io(e)) if e.kind() == io::ErrorKind::PermissionDenied => e,
        Err(e) => return Err(e.into_io()),
    };
    let path_fd = rfs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| retry)?;
    rfs::chmod(
        format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&path_fd)
        )
        .as_str(),
        Mode::from_raw_mode(0o700),
    )?;
    match open_dir_at(dir, name) {
        Ok(fd) => Ok(Some(fd)),
        Err(WalkError::Missing) => Ok(None),
        Err(e) => Err(e.into_io()),
    }
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Gives the group `gid` read and write access to the tree in `dir` (and to `dir` itself):
/// every entry's group becomes `gid` (symlinks included, never followed), files get `g+rw`,
/// directories `g+rwxs` (so what is made in them later inherits the group). For trees the
/// caller just built (a Persistent Dir's commit staging); still, nothing is followed: files
/// are opened with `O_NOFOLLOW` before their mode changes, symlinks are only chowned.
pub fn share_tree_at(dir: &impl AsFd, gid: u32) -> io::Result<()> {
    share_dir(dir, gid, 0)
}

fn share_dir(dir: &impl AsFd, gid: u32, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "a tree deeper than {MAX_DEPTH} levels"
        )));
    }
    let group = Some(rustix::fs::Gid::from_raw(gid));
    rfs::fchown(dir, None, group)?;
    let st = rfs::fstat(dir)?;
    rfs::fchmod(dir, Mode::from_raw_mode((st.st_mode & 0o777) | 0o2070))?;
    for name in list_dir(dir)? {
        let Some(st) = stat_at(dir, &name)? else {
            continue;
        };
        match kind_of(&st) {
            Some(EntryKind::Dir) => {
                let sub = open_dir_at(dir, &name).map_err(WalkError::into_io)?;
                share_dir(&sub, gid, depth.saturating_add(1))?;
            }
            Some(EntryKind::File) => {
                // Opened without following, so the chmod cannot reach through a symlink.
                let file = open_regular_at(dir, &name)?;
                rfs::fchown(&file, None, group)?;
                rfs::fchmod(&file, Mode::from_raw_mode((st.st_mode & 0o777) | 0o060))?;
            }
            _ => rfs::chownat(dir, &name, None, group, AtFlags::SYMLINK_NOFOLLOW)?,
        }
    }
    Ok(())
}

/// What `copy_tree_at` copied, and what it left out.
#[derive(Debug, Default)]
pub struct CopyReport {
    pub files: u64,
    pub bytes: u64,
    /// Sockets, fifos and devices (relative paths): never copied.
    pub skipped: Vec<std::path::PathBuf>,
}

/// Copies the contents of the directory `src` into the (existing, empty) directory `dst`:
/// directories, regular files and symlinks, the latter as symlinks with their target verbatim;
/// nothing is ever read or written through a symlink. Permission bits (`0o777`; no
/// setuid/setgid/sticky) and file mtimes are kept; directory modes are applied after their
/// children, so a read-only directory does not block its own copy.
pub fn copy_tree_at(src: &impl AsFd, dst: &impl AsFd) -> io::Result<CopyReport> {
    let mut report = CopyReport::default();
    copy_dir(src, dst, Path::new(""), 0, &mut report)?;
    Ok(report)
}

#[allow(clippy::unnecessary_cast)] // the stat field types differ between architectures
fn copy_dir(
    src: &impl AsFd,
    dst: &impl AsFd,
    rel: &Path,
    depth: usize,
    report: &mut CopyReport,
) -> io::Result<()> {
    for name in list_dir(src)? {
        let Some(st) = stat_at(src, &name)? else {
            continue; // removed while we copied
        };
        let mode = st.st_mode as u32 & 0o777;
        match kind_of(&st) {
            Some(EntryKind::Dir) => {
                if depth >= MAX_DEPTH {
                    return Err(too_deep());
                }
                let from = match open_dir_at(src, &name) {
                    Ok(fd) => fd,
                    Err(WalkError::Missing) => continue,
                    Err(e) => return Err(e.into_io()),
                };
                mkdir_at(dst, &name, 0o700)?;
                let to = open_dir_at(dst, &name).map_err(WalkError::into_io)?;
                copy_dir(
                    &from,
                    &to,
                    &rel.join(&name),
                    depth.saturating_add(1),
                    report,
                )?;
                chmod_fd(&to, mode)?;
            }
            Some(EntryKind::File) => {
                let mut from = match open_regular_at(src, &name) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                let mut to = create_file_at(dst, &name)?;
                let n = io::copy(&mut from, &mut to)?;
                chmod_fd(&to, mode)?;
                let st = rfs::fstat(&from)?;
                let times = rfs::Timestamps {
                    last_access: rfs::Timespec {
                        tv_sec: 0,
                        tv_nsec: rfs::UTIME_OMIT,
                    },
                    last_modification: rfs::Timespec {
                        tv_sec: st.st_mtime as _,
                        tv_nsec: st.st_mtime_nsec as _,
                    },
                };
                rfs::futimens(&to, &times)?;
                report.files = report.files.saturating_add(1);
                report.bytes = report.bytes.saturating_add(n);
            }
            Some(EntryKind::Symlink) => {
                let target = match read_link_at(src, &name) {
                    Ok(t) => t,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                symlink_at(&target, dst, &name)?;
            }
            None => report.skipped.push(rel.join(&name)),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn time_ns_saturates_and_mtimes_clamp() {
        assert_eq!(time_ns(1, 5), 1_000_000_005);
        assert_eq!(time_ns(10_413_792_000, 0), i64::MAX);
        assert_eq!(time_ns(-10_413_792_000, 0), i64::MIN);
        assert_eq!(clamp_mtime(u64::MAX), MAX_MTIME_SECS);
        assert_eq!(clamp_mtime(10), 10);
        assert!(time_ns(MAX_MTIME_SECS as i64, 999_999_999) > 0);
    }

    #[test]
    fn copy_tree_keeps_links_as_links_and_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("ro/sub")).unwrap();
        std::fs::write(src.join("ro/sub/f"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", src.join("ro/l")).unwrap();
        std::fs::set_permissions(src.join("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
        let dst = tmp.path().join("dst");
        std::fs::create_dir(&dst).unwrap();
        let (s, d) = (open_root(&src).unwrap(), open_root(&dst).unwrap());
        let report = copy_tree_at(&s, &d).unwrap();
        assert_eq!((report.files, report.bytes), (1, 1));
        assert_eq!(
            std::fs::read_link(dst.join("ro/l")).unwrap(),
            Path::new("/etc")
        );
        let mode = std::fs::metadata(dst.join("ro"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o555);
        remove_tree_at(&d, OsStr::new("ro")).unwrap();
        assert!(!dst.join("ro").exists());
        std::fs::set_permissions(src.join("ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
