//! The shell runtime: one turn's commands, classified, run on the right tier, traced identically
//! whichever tier ran them. Executors (the Tier-0 sandbox here; the local Tier-1 shell and Tier-1
//! pods in `kube-harness-tier1`) only run commands; everything the agent and the trace see is
//! decided here.
// Command output, the fd-3 state report and exported variables are the script's own.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

pub mod event;
pub mod executor;
pub mod state;
pub mod tier0;
pub mod trace_file;
pub mod tracker;
pub mod turn;
pub mod wire;

pub use event::{Collector, Emitter, EventSink, TraceEvent};
pub use executor::{
    fault, CommandExecutor, DisposeReport, ExecRequest, ExecResult, NextTier, TierError,
};
pub use kube_harness_protocol::CommandOutcome;
pub use tier0::Tier0Executor;
pub use tracker::{TrackingFailed, TrackingHealth, WorkspaceTracker};
pub use turn::{Executed, NotRun, StartGate, Step, Turn, TurnConfig};

use event::Payload;
use kube_harness_protocol::trace::{FileEvent, FileKind, FileSource};
use kube_harness_workspace::{ChangeKind, EntryKind, FileChange};

/// The seed's `TIER_REFUSED_EXIT_CODE`: refusals and provisioning failures.
pub const REFUSED_EXIT_CODE: i32 = 126;

/// The `harness.file.*` event of a change seen on `tier` (after a command, or in a merge-back).
pub fn file_event(change: &FileChange, tier: u8, source: FileSource) -> Payload {
    let event = FileEvent {
        // Tracked paths are UTF-8: the tracker reports other names as untracked instead.
        path: change.harness_path.to_string_lossy().into_owned(),
        kind: match change.kind {
            EntryKind::File => FileKind::File,
            EntryKind::Dir => FileKind::Dir,
            EntryKind::Symlink => FileKind::Symlink,
        },
        size: change.size,
        mode: change.mode,
        tier,
        source,
    };
    match change.change {
        ChangeKind::Created => Payload::FileCreated(event),
        ChangeKind::Modified => Payload::FileModified(event),
        ChangeKind::Deleted => Payload::FileDeleted(event),
    }
}

/// A tracker's view of the tracked mounts at one moment (its own type inside).
pub struct Snapshot(pub Box<dyn std::any::Any + Send + Sync>);

/// Observes the tracked mounts around each Tier-0 command (`harness.file.*` events).
pub trait Tracker: Send + Sync {
    fn snapshot(&self) -> Snapshot;
    /// The state to compare the next command against: by default a fresh snapshot. A tracker
    /// may return its last snapshot instead (the state after the previous command), which saves
    /// a walk of the workspace per command; anything changed in between is then reported with
    /// the next command.
    fn baseline(&self) -> Snapshot {
        self.snapshot()
    }
    fn changes(&self, before: &Snapshot, after: &Snapshot) -> Vec<FileChange>;
    /// What `after` could not track and `before` did not already say (names that are not UTF-8,
    /// trees too deep, special files): reported with the command, so that a write hidden there is
    /// not silent.
    fn warnings(&self, _before: &Snapshot, _after: &Snapshot) -> Vec<String> {
        Vec::new()
    }
}

/// Locks a std mutex even when an earlier holder panicked. Only for small mutexes whose data is
/// consistent at every instant a panic could leave it (a value assigned whole, a `Vec` pushed to,
/// a set inserted into): refusing them forever after one panic would turn that panic into a 500
/// for every later request, which is what issue 12 found.
pub fn relock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
