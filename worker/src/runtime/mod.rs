//! The shell runtime: one turn's commands, classified, run on the right tier, traced identically
//! whichever tier ran them. Executors (the Tier-0 sandbox, a local Tier-1 shell, Tier-1 pods) only
//! run commands; everything the agent and the trace see is decided here.

pub mod event;
pub mod executor;
pub mod state;
pub mod turn;

pub use event::{Collector, Emitter, EventSink, TraceEvent};
pub use executor::{CommandExecutor, DisposeReport, ExecRequest, ExecResult, NextTier};
pub use turn::{CommandOutcome, Turn, TurnConfig};

use serde::{Deserialize, Serialize};

/// The seed's `TIER_REFUSED_EXIT_CODE`: refusals and provisioning failures.
pub const REFUSED_EXIT_CODE: i32 = 126;

/// What happened to one tracked file, for `harness.file.*` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileEvent {
    /// Harness path, e.g. `/session/a.txt`.
    pub path: String,
    pub change: FileChange,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileChange {
    Created,
    Modified,
    Deleted,
}

impl FileChange {
    pub fn event_type(self) -> &'static str {
        match self {
            FileChange::Created => event::kind::FILE_CREATED,
            FileChange::Modified => event::kind::FILE_MODIFIED,
            FileChange::Deleted => event::kind::FILE_DELETED,
        }
    }
}

/// A tracker's view of the tracked mounts at one moment (its own type inside).
pub struct Snapshot(pub Box<dyn std::any::Any + Send + Sync>);

/// Observes the tracked mounts around each Tier-0 command (`harness.file.*` events).
pub trait Tracker: Send + Sync {
    fn snapshot(&self) -> Snapshot;
    fn changes(&self, before: &Snapshot, after: &Snapshot) -> Vec<FileEvent>;
}
