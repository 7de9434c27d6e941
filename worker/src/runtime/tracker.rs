//! File-change tracking over the workspace's tracked mounts, for `harness.file.*` events.

use super::{Snapshot, Tracker};
use crate::workspace::{self, FileChange, WorkspaceSpec};

/// Snapshots the tracked mounts; each snapshot reuses the previous one's hashes for files whose
/// size and mtime did not change, so the per-command cost stays low.
pub struct WorkspaceTracker {
    spec: WorkspaceSpec,
    last: std::sync::Mutex<Option<workspace::Snapshot>>,
}

impl WorkspaceTracker {
    pub fn new(spec: WorkspaceSpec) -> Self {
        WorkspaceTracker {
            spec,
            last: std::sync::Mutex::new(None),
        }
    }
}

impl Tracker for WorkspaceTracker {
    fn snapshot(&self) -> Snapshot {
        let mut last = self.last.lock().expect("tracker lock");
        let taken = match last.as_ref() {
            Some(prev) => workspace::snapshot_since(&self.spec, prev),
            None => workspace::snapshot(&self.spec),
        };
        // A tracked mount that cannot be read yields no events rather than failing the command.
        let taken = taken.ok();
        if let Some(s) = &taken {
            *last = Some(s.clone());
        }
        Snapshot(Box::new(taken))
    }

    /// The snapshot taken after the previous command, if there was one this turn. Within a turn
    /// nothing but commands writes the tracked mounts on the worker (a Tier-0 command's whole
    /// process tree is gone when it ends), so this equals a fresh walk there and saves one per
    /// command (about a quarter of a millisecond for a small workspace). On the local host a
    /// file edited by hand between two commands is reported with the second command.
    fn baseline(&self) -> Snapshot {
        let last = self.last.lock().expect("tracker lock");
        match last.as_ref() {
            Some(s) => Snapshot(Box::new(Some(s.clone()))),
            None => {
                drop(last);
                self.snapshot()
            }
        }
    }

    fn changes(&self, before: &Snapshot, after: &Snapshot) -> Vec<FileChange> {
        match (inner(before), inner(after)) {
            (Some(b), Some(a)) => workspace::diff(b, a),
            _ => Vec::new(),
        }
    }
}

fn inner(s: &Snapshot) -> Option<&workspace::Snapshot> {
    s.0.downcast_ref::<Option<workspace::Snapshot>>()
        .and_then(Option::as_ref)
}
