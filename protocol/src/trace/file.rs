//! The file events: `harness.file.created`, `.modified`, `.deleted` and `.truncated`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `harness.file.created`, `.modified` or `.deleted` (the variant says which).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEvent {
    /// The harness path (`/session/…`, `/artifacts/…`, `/persistent/…`).
    #[schemars(regex(pattern = "^/(session|artifacts|persistent)(/|$)"))]
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    pub tier: u8,
    pub source: FileSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
}

/// Where a file change was seen: after a Tier-0 command, in a higher tier's merge-back, or in a
/// file written through the worker API (`PUT /v1/files`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileSource {
    Command,
    Merge,
    Upload,
}

impl FileSource {
    pub fn as_str(self) -> &'static str {
        match self {
            FileSource::Command => "command",
            FileSource::Merge => "merge",
            FileSource::Upload => "upload",
        }
    }
}

/// `harness.file.truncated`: stands for the file events of one command (or one merge-back)
/// past the emitter's limits (a count, and a budget of path bytes); emitted after the last
/// listed one. `byteLimit` and `listedBytes` are there when the byte budget, not the count,
/// stopped the listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileTruncated {
    pub source: FileSource,
    pub tier: u8,
    pub limit: u64,
    pub listed: u64,
    pub omitted: OmittedFiles,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listed_bytes: Option<u64>,
}

/// How many file events of each change were left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OmittedFiles {
    pub created: u64,
    pub modified: u64,
    pub deleted: u64,
    #[schemars(range(min = 1))]
    pub total: u64,
}
