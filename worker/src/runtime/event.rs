//! Trace events (`lh.trace.v2`): one JSON object per line, the same shape from every tier because
//! one shell runtime emits them all. The schema lives in `worker/schema/lh.trace.v2.json`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

pub const TRACE_SCHEMA: &str = "lh.trace.v2";

/// Event types this runtime emits.
pub mod kind {
    pub const COMMAND_STARTED: &str = "harness.runtime.command.started";
    pub const COMMAND_COMPLETED: &str = "harness.runtime.command.completed";
    pub const DISPOSE_FAILED: &str = "harness.runtime.dispose.failed";
    pub const FILE_CREATED: &str = "harness.file.created";
    pub const FILE_MODIFIED: &str = "harness.file.modified";
    pub const FILE_DELETED: &str = "harness.file.deleted";
    pub const TIER_ESCALATED: &str = "harness.tier.escalated";
    pub const TIER_REFUSED: &str = "harness.tier.refused";
    pub const TURN_USAGE: &str = "harness.turn.usage";
}

/// One trace line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceEvent {
    pub schema: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub session_id: String,
    pub turn_id: String,
    /// Position within the turn, from 1.
    pub seq: u64,
    pub data: Value,
}

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

/// Stamps events with the session, turn and sequence, and fans them out to sinks.
pub struct Emitter {
    session_id: String,
    turn_id: String,
    seq: Mutex<u64>,
    sinks: Vec<std::sync::Arc<dyn EventSink>>,
}

impl Emitter {
    pub fn new(session_id: &str, turn_id: &str, sinks: Vec<std::sync::Arc<dyn EventSink>>) -> Self {
        Emitter {
            session_id: session_id.to_string(),
            turn_id: turn_id.to_string(),
            seq: Mutex::new(0),
            sinks,
        }
    }

    pub fn emit(&self, kind: &str, data: Value) {
        let seq = {
            let mut seq = self
                .seq
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *seq = seq.saturating_add(1);
            *seq
        };
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
