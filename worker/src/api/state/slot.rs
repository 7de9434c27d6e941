//! What the session lock guards ([`Slot`]: the open turn, the shell state carried between
//! turns) and what a turn keeps of its commands ([`OpenTurn`], [`TurnFiles`]), the usage
//! counters, and the busy flag.

use super::super::log::Capture;
use kube_harness_runtime::{event::Payload, TraceEvent, Turn};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub(super) struct OpenTurn {
    pub(super) turn: Turn,
    pub(super) turn_id: String,
    /// Set when a client opened the turn (`POST /v1/turns`): only requests naming it run in it
    /// ([`super::claim`]). `None`: the shared turn commands without a turn id open.
    pub(super) claim: Option<Claim>,
    /// When its last command was admitted or ended: a claimed turn idle past the worker's
    /// `turn_idle_timeout` is ended.
    pub(super) last_used: Instant,
    pub(super) capture: Arc<Capture>,
    pub(super) commands: u64,
    /// Last change per harness path, bounded (see [`TurnFiles`]).
    pub(super) files: TurnFiles,
}

/// Who opened a claimed turn.
pub(super) struct Claim {
    /// What the client called itself (`OpenTurnRequest::client`), for the `turn-busy` answer.
    pub(super) client: Option<String>,
}

/// Guarded by the session lock: one exec or end-turn at a time.
pub(super) struct Slot {
    pub(super) turn: Option<OpenTurn>,
    pub(super) cwd: PathBuf,
    pub(super) env: BTreeMap<String, String>,
    pub(super) exec_counter: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) turns: AtomicU64,
    pub(super) tier0: AtomicU64,
    pub(super) tier1: AtomicU64,
    pub(super) refusals: AtomicU64,
    pub(super) tier: AtomicU64,
    pub(super) last_activity_ms: AtomicU64,
}

/// The turn's file list for the end-turn answer: the last change per harness path, at most
/// `limit` paths and `byte_limit` bytes of them (a turn of many commands that each create
/// thousands of files, or files with 50 KB paths, must not grow it without bound). What is left
/// out is counted: changes to paths past either limit, and the file events the emitter already
/// left out (`harness.file.truncated`).
pub(super) struct TurnFiles {
    /// Set when a snapshot failed during the turn (its file events may be incomplete).
    pub(super) untracked: bool,
    pub(super) paths: BTreeMap<String, String>,
    limit: usize,
    bytes: usize,
    byte_limit: usize,
    pub(super) omitted: u64,
}

impl TurnFiles {
    pub(super) fn new(limit: usize, byte_limit: usize) -> Self {
        TurnFiles {
            untracked: false,
            paths: BTreeMap::new(),
            limit,
            bytes: 0,
            byte_limit,
            omitted: 0,
        }
    }

    /// The Persistent Dirs (`/persistent/<name>`) the turn's file events name; `None` when the
    /// events may be incomplete (a failed snapshot, changes past the list's bound).
    pub(super) fn persistent_dirs(&self) -> Option<BTreeSet<String>> {
        if self.untracked || self.omitted > 0 {
            return None;
        }
        Some(
            self.paths
                .keys()
                .filter_map(|p| p.strip_prefix("/persistent/"))
                .filter_map(|rest| rest.split('/').next())
                .map(String::from)
                .collect(),
        )
    }

    pub(super) fn record(&mut self, events: &[TraceEvent]) {
        for e in events {
            let (change, file) = match e.payload() {
                Ok(Payload::FileCreated(f)) => ("created", f),
                Ok(Payload::FileModified(f)) => ("modified", f),
                Ok(Payload::FileDeleted(f)) => ("deleted", f),
                Ok(Payload::FileTruncated(t)) => {
                    self.omitted = self.omitted.saturating_add(t.omitted.total);
                    continue;
                }
                _ => continue,
            };
            let path = file.path.as_str();
            let bytes = kube_harness_runtime::event::json_string_bytes(path);
            if let Some(last) = self.paths.get_mut(path) {
                *last = change.to_string();
            } else if self.paths.len() < self.limit
                && self.bytes.saturating_add(bytes) <= self.byte_limit
            {
                self.bytes = self.bytes.saturating_add(bytes);
                self.paths.insert(path.to_string(), change.to_string());
            } else {
                self.omitted = self.omitted.saturating_add(1);
            }
        }
    }
}

/// Marks the worker busy while held.
pub(super) struct BusyFlag<'a>(&'a AtomicBool);

impl<'a> BusyFlag<'a> {
    pub(super) fn set(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::SeqCst);
        BusyFlag(flag)
    }
}

impl Drop for BusyFlag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}
