//! Filesystem writes that never follow a symlink. Every path below a trusted root directory is
//! walked one component at a time with `openat(O_DIRECTORY | O_NOFOLLOW)`, and leaves are created
//! with `O_CREAT | O_EXCL | O_NOFOLLOW` (or `mkdirat`/`symlinkat`, which never follow the last
//! component), so a symlink planted earlier in an archive, or by a script in the workspace,
//! cannot redirect a write outside the root.

use super::error::EntryRejection;
use super::snapshot::{Entry, EntryKind};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

/// Why walking to a directory failed.
#[derive(Debug)]
pub(crate) enum WalkError {
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
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opens a trusted root directory (the root itself may be reached through symlinks).
pub(crate) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    Ok(rfs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens `rel` (relative, normal components only) under `root` without following symlinks.
pub(crate) fn open_dir_beneath(root: &OwnedFd, rel: &Path) -> Result<OwnedFd, WalkError> {
    let mut cur =
        rfs::openat(root, ".", DIR_FLAGS, Mode::empty()).map_err(|e| WalkError::Io(e.into()))?;
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(WalkError::Blocked);
        };
        cur = match rfs::openat(&cur, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            // With O_DIRECTORY a symlink may fail as ENOTDIR rather than ELOOP: ask lstat.
            Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                return match rfs::statat(&cur, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st)
                        if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::Symlink =>
                    {
                        Err(WalkError::NotDir)
                    }
                    _ => Err(WalkError::Blocked),
                }
            }
            Err(Errno::NOENT) => return Err(WalkError::Missing),
            Err(e) => return Err(WalkError::Io(e.into())),
        };
    }
    Ok(cur)
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
/// a fifo swapped in under our feet.
pub(crate) fn open_regular(path: &Path) -> io::Result<File> {
    let fd = rfs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    regular_only(fd)
}

/// Creates a new file (fails if anything, including a symlink, already has the name).
pub(crate) fn create_file_at(dir: &impl AsFd, name: &OsStr) -> io::Result<File> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    Ok(File::from(fd))
}

pub(crate) fn mkdir_at(dir: &impl AsFd, name: &OsStr, mode: u32) -> io::Result<()> {
    Ok(rfs::mkdirat(dir, name, Mode::from_raw_mode(mode))?)
}

pub(crate) fn symlink_at(target: &str, dir: &impl AsFd, name: &OsStr) -> io::Result<()> {
    Ok(rfs::symlinkat(target, dir, name)?)
}

pub(crate) fn unlink_at(dir: &impl AsFd, name: &OsStr, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    Ok(rfs::unlinkat(dir, name, flags)?)
}

pub(crate) fn rename_at(dir: &impl AsFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    Ok(rfs::renameat(dir, from, dir, to)?)
}

/// `chmod` on a directory entry that must be a directory (not a symlink to one).
pub(crate) fn chmod_dir_at(dir: &impl AsFd, name: &OsStr, mode: u32) -> io::Result<()> {
    let fd = rfs::openat(dir, name, DIR_FLAGS, Mode::empty())?;
    Ok(rfs::fchmod(&fd, Mode::from_raw_mode(mode))?)
}

pub(crate) fn chmod_fd(fd: &impl AsFd, mode: u32) -> io::Result<()> {
    Ok(rfs::fchmod(fd, Mode::from_raw_mode(mode))?)
}

/// lstat of `name` in `dir` as a snapshot entry (no content hash; symlink target filled in).
/// `Ok(None)` when nothing has that name; `Err(InvalidInput)` for sockets, fifos and devices.
pub(crate) fn entry_at(dir: &impl AsFd, name: &OsStr) -> io::Result<Option<Entry>> {
    let st = match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let kind = match rfs::FileType::from_raw_mode(st.st_mode) {
        rfs::FileType::RegularFile => EntryKind::File,
        rfs::FileType::Directory => EntryKind::Dir,
        rfs::FileType::Symlink => EntryKind::Symlink,
        _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "special file")),
    };
    let target = if kind == EntryKind::Symlink {
        let t = rfs::readlinkat(dir, name, Vec::new())?;
        Some(t.to_string_lossy().into_owned())
    } else {
        None
    };
    Ok(Some(Entry {
        kind,
        size: if kind == EntryKind::Dir {
            0
        } else {
            st.st_size as u64
        },
        mode: if kind == EntryKind::Symlink {
            0o777
        } else {
            st.st_mode as u32 & 0o777
        },
        mtime_ns: st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
        sha256: None,
        target,
        ctime_ns: st.st_ctime as i64 * 1_000_000_000 + st.st_ctime_nsec as i64,
        ino: st.st_ino as u64,
        dev: st.st_dev as u64,
    }))
}

/// Opens `name` in `dir` for reading: regular files only, never through a symlink.
pub(crate) fn open_regular_at(dir: &impl AsFd, name: &OsStr) -> io::Result<File> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    regular_only(fd)
}
