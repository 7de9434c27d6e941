//! The first entry of every archive: what it claims to contain, so the receiver can verify it
//! completely before reporting success. Wire format in docs/workspace-handoff.md.

use super::entry::EntryKind;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Format version; a receiver refuses any other.
pub const FORMAT: &str = "kube-harness.workspace.v1";
/// Name of the manifest entry (never a harness path: those all live under a mount directory).
pub const MANIFEST_NAME: &str = ".kube-harness-manifest.json";

/// A full workspace (handoff) or only what changed since a base (return trip).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArchiveKind {
    Full,
    Changes,
}

/// A path removed since the base snapshot (change archives only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub path: String,
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: String,
    pub kind: ArchiveKind,
    /// Harness paths of the mounts the archive covers (`/session`, ...).
    pub mounts: Vec<String>,
    /// Number of tar entries after the manifest.
    pub entries: u64,
    /// Sum of the regular files' sizes.
    pub total_bytes: u64,
    /// `sha256:<hex>` over the records described in `DigestBuilder`.
    pub digest: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<Deleted>,
}

/// Size limits a receiver (and a sender) enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Total bytes of file content.
    pub max_total_bytes: u64,
    /// Bytes of one file.
    pub max_entry_bytes: u64,
    /// Entries (plus listed deletions).
    pub max_entries: u64,
    /// Bytes of the manifest JSON.
    pub max_manifest_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_total_bytes: 1 << 30,
            max_entry_bytes: 1 << 30,
            max_entries: 1_000_000,
            max_manifest_bytes: 64 << 20,
        }
    }
}

/// The manifest digest: SHA-256 over one record per entry, in archive order, then one per
/// deletion, in manifest order. Fields are NUL-terminated (no field can contain NUL):
/// entry `E\0path\0kind\0mode-octal\0size\0content\0` where content is the file's hex SHA-256, the
/// symlink target, or empty for a directory; deletion `D\0path\0kind\0`.
pub(crate) struct DigestBuilder(Sha256);

impl DigestBuilder {
    pub fn new() -> Self {
        DigestBuilder(Sha256::new())
    }

    pub fn entry(&mut self, path: &str, kind: EntryKind, mode: u32, size: u64, content: &str) {
        let kind = kind_name(kind);
        for field in [
            "E",
            path,
            kind,
            &format!("{mode:o}"),
            &size.to_string(),
            content,
        ] {
            self.0.update(field.as_bytes());
            self.0.update([0]);
        }
    }

    pub fn deleted(&mut self, path: &str, kind: EntryKind) {
        for field in ["D", path, kind_name(kind)] {
            self.0.update(field.as_bytes());
            self.0.update([0]);
        }
    }

    pub fn finish(self) -> String {
        format!("sha256:{}", hex::encode(self.0.finalize()))
    }
}

fn kind_name(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::File => "file",
        EntryKind::Dir => "dir",
        EntryKind::Symlink => "symlink",
    }
}
