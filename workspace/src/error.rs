//! Typed failures of snapshot, pack, unpack and apply. Archive problems are distinguished from
//! I/O problems so a receiver can tell "the sender is broken or hostile" from "my disk is full".

use std::path::PathBuf;

/// Why one archive entry (or one listed deletion) was refused. Any of these rejects the whole
/// archive: a receiver never applies half of a suspicious archive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryRejection {
    #[error("absolute path")]
    AbsolutePath,
    #[error("`..` path component")]
    ParentDir,
    #[error("empty, `.` or doubled-slash path component")]
    NonCanonical,
    #[error("path is not valid UTF-8")]
    NotUtf8,
    #[error("outside the workspace mounts")]
    OutsideMounts,
    #[error("hard links are not accepted")]
    HardLink,
    #[error("device and fifo nodes are not accepted ({0})")]
    SpecialFile(&'static str),
    #[error("unsupported tar entry type {0}")]
    UnsupportedType(String),
    #[error("symlink target {0:?} leaves the workspace")]
    SymlinkOutside(String),
    #[error("a parent of this path is a symlink or not a directory")]
    ThroughSymlink,
    #[error("parent directory is missing")]
    ParentMissing,
    #[error("duplicate entry")]
    Duplicate,
    #[error("entry of {size} bytes exceeds the per-entry limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
}

/// Everything that can go wrong in this module.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("I/O error at {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The tar stream itself is unreadable: bad header checksum, truncated data, garbage.
    #[error("archive is corrupt or truncated: {0}")]
    Corrupt(String),
    /// The manifest is missing, unparsable, of another format version, or not first.
    #[error("archive manifest invalid: {0}")]
    Manifest(String),
    /// The entries do not match what the manifest promised (count, bytes, digest).
    #[error("archive does not match its manifest: {0}")]
    ManifestMismatch(String),
    #[error("archive entry {path:?} rejected: {reason}")]
    BadEntry {
        path: String,
        reason: EntryRejection,
    },
    /// Total size over the configured limit; raised before anything past the limit is written.
    #[error("{what} is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
    /// A file changed while it was being packed (its bytes no longer match the snapshot).
    #[error("{0} changed while it was being packed; retry when the workspace is idle")]
    ChangedDuringPack(PathBuf),
    /// The unpack target is unusable (not empty, not a directory, ...).
    #[error("unpack target {path}: {reason}")]
    Target { path: PathBuf, reason: String },
}

impl WorkspaceError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WorkspaceError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn bad(path: impl Into<String>, reason: EntryRejection) -> Self {
        WorkspaceError::BadEntry {
            path: path.into(),
            reason,
        }
    }
}
