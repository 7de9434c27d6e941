//! File-change tracking over the workspace's tracked mounts, for `harness.file.*` events.

use super::{Snapshot, Tracker};
use kube_harness_workspace::{self as workspace, FileChange, WorkspaceSpec};
use std::sync::{Mutex, MutexGuard};

/// Snapshots the tracked mounts; each snapshot reuses the previous one's hashes for files whose
/// size and mtime did not change, so the per-command cost stays low.
pub struct WorkspaceTracker {
    spec: WorkspaceSpec,
    last: Mutex<Option<workspace::Snapshot>>,
    /// Why the last snapshot failed, until one succeeds again.
    failed: TrackingHealth,
}

/// The tracked mounts cannot be snapshotted: why (file events are missing until they can).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TrackingFailed(pub String);

/// Whether the last snapshot of the tracked mounts failed, and why; shared by the trackers of
/// successive turns so that a host (the worker's `/readyz`) can report it.
#[derive(Clone, Default)]
pub struct TrackingHealth(std::sync::Arc<Mutex<Option<String>>>);

impl TrackingHealth {
    /// `Err(reason)` while the tracked mounts cannot be snapshotted (the last attempt failed):
    /// file events are missing until one succeeds again.
    pub fn get(&self) -> Result<(), TrackingFailed> {
        relock(&self.0)
            .clone()
            .map_or(Ok(()), |why| Err(TrackingFailed(why)))
    }
}

impl WorkspaceTracker {
    pub fn new(spec: WorkspaceSpec) -> Self {
        Self::with_health(spec, TrackingHealth::default())
    }

    /// A tracker that reports its failures to `health`.
    pub fn with_health(spec: WorkspaceSpec, health: TrackingHealth) -> Self {
        WorkspaceTracker {
            spec,
            last: Mutex::new(None),
            failed: health,
        }
    }
}

/// The tracker's state stays consistent whatever panicked while holding its locks (the next
/// snapshot replaces it), so a poisoned lock is taken as it is rather than failing every command.
fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tracker for WorkspaceTracker {
    fn snapshot(&self) -> Snapshot {
        let mut last = relock(&self.last);
        let taken = match last.as_ref() {
            Some(prev) => workspace::snapshot_since(&self.spec, prev),
            None => workspace::snapshot(&self.spec),
        };
        // A tracked mount that cannot be read yields no events rather than failing the command;
        // the failure is kept for `health` (the worker's /readyz reports it). A path a command
        // made unreadable (permission denied) no longer fails the snapshot: the other files'
        // events go on and the path is named in `fileTrackingSkipped`, and `health` still says
        // that part of the workspace is not tracked until it is readable again.
        *relock(&self.failed.0) = match &taken {
            Ok(s) if s.unreadable.is_empty() => None,
            Ok(s) => Some(format!(
                "file tracking failed for part of the workspace: {} cannot be read (permission denied){}",
                s.unreadable[0].display(),
                match s.unreadable.len() {
                    1 => String::new(),
                    n => format!(" and {} more", n.saturating_sub(1)),
                }
            )),
            Err(e) => {
                tracing::warn!(error = %e, "snapshot of the tracked mounts failed");
                Some(format!("file tracking failed: {e}"))
            }
        };
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
        let last = relock(&self.last);
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

    fn warnings(&self, before: &Snapshot, after: &Snapshot) -> Vec<String> {
        let old = inner(before)
            .map(|b| b.warnings.as_slice())
            .unwrap_or_default();
        inner(after)
            .map(|a| {
                a.warnings
                    .iter()
                    .filter(|w| !old.contains(w))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn inner(s: &Snapshot) -> Option<&workspace::Snapshot> {
    s.0.downcast_ref::<Option<workspace::Snapshot>>()
        .and_then(Option::as_ref)
}
