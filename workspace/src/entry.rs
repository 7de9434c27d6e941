//! One object of a workspace tree as the snapshot, the manifest and safe_fs all see it, and how
//! it is read from a stat result. A leaf: those modules depend on it, it depends on none of them.

use rustix::fs as rfs;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// Nanoseconds per second.
const NS: i64 = 1_000_000_000;

/// `secs`/`nsec` of a stat time as nanoseconds since the epoch, saturating at the i64 bounds.
pub fn time_ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(NS).saturating_add(nsec)
}

/// The kind of a stat result: file, directory, symlink, or `None` for anything else.
pub fn kind_of(st: &rfs::Stat) -> Option<EntryKind> {
    match rfs::FileType::from_raw_mode(st.st_mode) {
        rfs::FileType::RegularFile => Some(EntryKind::File),
        rfs::FileType::Directory => Some(EntryKind::Dir),
        rfs::FileType::Symlink => Some(EntryKind::Symlink),
        _ => None,
    }
}

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

    pub(crate) fn same_stat(&self, other: &Entry) -> bool {
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
        Some(Entry::with_kind(
            kind,
            meta.len(),
            meta.permissions().mode(),
            time_ns(meta.mtime(), meta.mtime_nsec()),
            time_ns(meta.ctime(), meta.ctime_nsec()),
            meta.ino(),
            meta.dev(),
        ))
    }

    /// From an lstat result; `None` for sockets, fifos and devices.
    #[allow(clippy::unnecessary_cast)] // the stat field types differ between architectures
    pub(crate) fn from_stat(st: &rfs::Stat) -> Option<Entry> {
        let kind = kind_of(st)?;
        Some(Entry::with_kind(
            kind,
            u64::try_from(st.st_size).unwrap_or(0),
            st.st_mode as u32,
            time_ns(st.st_mtime as i64, st.st_mtime_nsec as i64),
            time_ns(st.st_ctime as i64, st.st_ctime_nsec as i64),
            st.st_ino as u64,
            st.st_dev as u64,
        ))
    }

    fn with_kind(
        kind: EntryKind,
        size: u64,
        mode: u32,
        mtime_ns: i64,
        ctime_ns: i64,
        ino: u64,
        dev: u64,
    ) -> Entry {
        Entry {
            kind,
            size: if kind == EntryKind::Dir { 0 } else { size },
            mode: if kind == EntryKind::Symlink {
                0o777
            } else {
                mode & 0o777
            },
            mtime_ns,
            sha256: None,
            target: None,
            ctime_ns,
            ino,
            dev,
        }
    }
}
