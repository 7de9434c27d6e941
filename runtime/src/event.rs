//! Trace events (`lh.trace.v2`): one JSON object per line, the same shape from every tier because
//! one shell runtime emits them all. The line and the event types are the protocol's
//! (`kube_harness_protocol::trace`, schema `protocol/schema/lh.trace.v2.json`); emitting them is
//! the runtime's.

use serde_json::Value;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

pub use kube_harness_protocol::trace::{kind, TraceEvent, TRACE_SCHEMA};

/// Where events go: a trace file, the session log, a test's collector.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: &TraceEvent);
}

/// Keeps every event in memory (the `--json` output, tests).
#[derive(Default)]
pub struct Collector(Mutex<Vec<TraceEvent>>);

impl Collector {
    pub fn events(&self) -> Vec<TraceEvent> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl EventSink for Collector {
    fn emit(&self, event: &TraceEvent) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event.clone());
    }
}

/// Default [`Emitter::with_file_event_limit`]: at most this many `harness.file.*` events per
/// command and per merge-back.
pub const DEFAULT_MAX_FILE_EVENTS: usize = 10_000;

/// Stamps events with the session, turn and sequence, and fans them out to sinks.
///
/// File events are bounded: of one run of consecutive `harness.file.created/modified/deleted`
/// events (the changes of one command, or of one merge-back: the runtime emits them together,
/// between the command's started and completed events, or before the turn's usage event), at
/// most `file_event_limit` go out. The rest are counted, and one `harness.file.truncated` event
/// with the counts goes out just before the next event of another type, so what a command that
/// creates 200,000 files costs (events in memory, in the exec answer, in the session log) stays
/// bounded.
pub struct Emitter {
    session_id: String,
    turn_id: String,
    state: Mutex<EmitState>,
    file_event_limit: usize,
    sinks: Vec<std::sync::Arc<dyn EventSink>>,
}

#[derive(Default)]
struct EmitState {
    seq: u64,
    /// The current run of file events.
    files: FileRun,
}

#[derive(Default)]
struct FileRun {
    listed: u64,
    created: u64,
    modified: u64,
    deleted: u64,
    /// `source` and `tier` of the first omitted event (one run has one of each).
    source: Option<Value>,
    tier: Option<Value>,
}

impl FileRun {
    fn omitted(&self) -> u64 {
        self.created
            .saturating_add(self.modified)
            .saturating_add(self.deleted)
    }

    /// The `harness.file.truncated` payload, if events of this run were left out.
    fn summary(&self, limit: usize) -> Option<Value> {
        let omitted = self.omitted();
        (omitted > 0).then(|| {
            serde_json::json!({
                "source": self.source.clone().unwrap_or(Value::Null),
                "tier": self.tier.clone().unwrap_or(Value::Null),
                "limit": limit,
                "listed": self.listed,
                "omitted": {
                    "created": self.created,
                    "modified": self.modified,
                    "deleted": self.deleted,
                    "total": omitted,
                },
            })
        })
    }
}

impl Emitter {
    pub fn new(session_id: &str, turn_id: &str, sinks: Vec<std::sync::Arc<dyn EventSink>>) -> Self {
        Emitter {
            session_id: session_id.to_string(),
            turn_id: turn_id.to_string(),
            state: Mutex::new(EmitState::default()),
            file_event_limit: DEFAULT_MAX_FILE_EVENTS,
            sinks,
        }
    }

    /// At most `limit` `harness.file.*` events per command and per merge-back (see [`Emitter`]).
    pub fn with_file_event_limit(mut self, limit: usize) -> Self {
        self.file_event_limit = limit;
        self
    }

    pub fn emit(&self, kind: &str, data: Value) {
        let mut out: Vec<(u64, &str, Value)> = Vec::with_capacity(2);
        {
            let mut st = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let change = match kind {
                kind::FILE_CREATED => Some(0),
                kind::FILE_MODIFIED => Some(1),
                kind::FILE_DELETED => Some(2),
                _ => None,
            };
            if let Some(change) = change {
                let run = &mut st.files;
                if run.listed >= self.file_event_limit as u64 {
                    let counter = match change {
                        0 => &mut run.created,
                        1 => &mut run.modified,
                        _ => &mut run.deleted,
                    };
                    *counter = counter.saturating_add(1);
                    if run.source.is_none() {
                        run.source = data.get("source").cloned();
                        run.tier = data.get("tier").cloned();
                    }
                    return;
                }
                run.listed = run.listed.saturating_add(1);
            } else {
                let run = std::mem::take(&mut st.files);
                if let Some(summary) = run.summary(self.file_event_limit) {
                    st.seq = st.seq.saturating_add(1);
                    out.push((st.seq, kind::FILE_TRUNCATED, summary));
                }
            }
            st.seq = st.seq.saturating_add(1);
            out.push((st.seq, kind, data));
        }
        for (seq, kind, data) in out {
            let event = TraceEvent {
                schema: TRACE_SCHEMA.to_string(),
                kind: kind.to_string(),
                at_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
                session_id: self.session_id.clone(),
                turn_id: self.turn_id.clone(),
                seq,
                data,
            };
            for sink in &self.sinks {
                sink.emit(&event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn each_run_of_file_events_is_bounded_and_summarised_on_its_own() {
        let sink = Arc::new(Collector::default());
        let emitter = Emitter::new("s", "t", vec![sink.clone()]).with_file_event_limit(2);
        let file = |change: &'static str| {
            (
                change,
                json!({"path": "/session/x", "source": "command", "tier": 0}),
            )
        };
        for (kind, data) in [
            file(kind::FILE_CREATED),
            file(kind::FILE_MODIFIED),
            file(kind::FILE_DELETED),
            file(kind::FILE_CREATED),
        ] {
            emitter.emit(kind, data);
        }
        emitter.emit(kind::COMMAND_COMPLETED, json!({}));
        // A new run starts from zero; one at the limit needs no summary.
        emitter.emit(kind::FILE_CREATED, json!({"path": "/session/y"}));
        emitter.emit(kind::FILE_CREATED, json!({"path": "/session/z"}));
        emitter.emit(kind::TURN_USAGE, json!({}));
        let events = sink.events();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                kind::FILE_CREATED,
                kind::FILE_MODIFIED,
                kind::FILE_TRUNCATED,
                kind::COMMAND_COMPLETED,
                kind::FILE_CREATED,
                kind::FILE_CREATED,
                kind::TURN_USAGE
            ]
        );
        assert_eq!(
            events[2].data,
            json!({"source": "command", "tier": 0, "limit": 2, "listed": 2,
                   "omitted": {"created": 1, "modified": 0, "deleted": 1, "total": 2}})
        );
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    }
}
