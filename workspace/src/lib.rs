//! The session workspace: its mount table (`spec`), and the archive handoff and merge that move it
//! to a higher tier and back (wire format: docs/workspace-handoff.md).
//!
//! Flow: the worker `pack`s its tracked mounts (keeping the returned snapshot as the base), the
//! higher tier `unpack`s into a fresh root (keeping the returned snapshot as its base), runs the
//! rest of the turn there, and at disposal `changes_since` packs what changed; the worker
//! `apply`s that archive to its backing paths and emits one `harness.file.*` event per applied
//! change. Around every command the runtime uses `snapshot_since` + `diff`.
//!
//! Everything here reads archives, requests and trees a command wrote: no such input may reach a
//! panic, so `unwrap`, `expect` and unchecked arithmetic are denied in the whole module.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

mod entry;
mod error;
pub mod leftovers;
mod manifest;
mod merge;
mod pack;
mod paths;
mod reader;
pub mod safe_fs;
mod snapshot;
pub mod spec;
mod unpack;
mod walk;

pub use entry::{Entry, EntryKind};
pub use error::{EntryRejection, WorkspaceError};
pub use manifest::{ArchiveKind, Deleted, Limits, Manifest, FORMAT, MANIFEST_NAME};
pub use merge::{apply, ApplyOptions, ApplyReport, RejectReason, Rejected};
pub use pack::{
    changes_since, pack, pack_tree, pack_with_cache, ChangesReport, PackOptions, PackReport,
    TreeLimits,
};
pub use paths::Exclude;
pub use snapshot::{
    diff, snapshot, snapshot_since, snapshot_with, ChangeKind, FileChange, HashBudget, Snapshot,
    RACY_MARGIN_NS,
};
pub use spec::{Mount, WorkspaceSpec};
pub use unpack::{
    plan_tree, rehome, unpack, TreeError, TreeOptions, TreePlan, TreeUnpacked, UnpackOptions,
    UnpackReport, STAGING_NAME,
};
