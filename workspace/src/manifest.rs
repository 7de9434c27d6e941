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
    /// What the sender found and did not put in the archive, one line each with the harness
    /// path and why (a symlink pointing out of the workspace, a special file, a name that is not
    /// UTF-8), bounded by [`bounded_left_out`]. Not covered by the digest: it is a report, and a
    /// receiver only passes it on (the merge-back makes each line a problem of the turn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
}

/// At most this many lines of [`Manifest::left_out`] are kept, and one more counts the rest: a
/// workspace of 100,000 fifos makes neither a large manifest nor 100,000 events.
pub const MAX_LEFT_OUT: usize = 100;
/// Longest line of [`Manifest::left_out`] kept whole (a path may be 64 KB); a longer one is cut
/// and ends in `…`.
pub const MAX_LEFT_OUT_LINE: usize = 4096;

/// `lines` within [`MAX_LEFT_OUT`] and [`MAX_LEFT_OUT_LINE`]; used by the sender, and again by
/// the receiver, which does not trust the sender to have done it.
pub fn bounded_left_out(lines: &[String]) -> Vec<String> {
    let mut kept: Vec<String> = lines
        .iter()
        .take(MAX_LEFT_OUT)
        .map(|line| {
            if line.len() <= MAX_LEFT_OUT_LINE {
                return line.clone();
            }
            let end = (0..=MAX_LEFT_OUT_LINE)
                .rev()
                .find(|i| line.is_char_boundary(*i))
                .unwrap_or(0);
            format!("{}…", line.get(..end).unwrap_or_default())
        })
        .collect();
    if lines.len() > MAX_LEFT_OUT {
        kept.push(format!(
            "… and {} more left out",
            lines.len().saturating_sub(MAX_LEFT_OUT)
        ));
    }
    kept
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
