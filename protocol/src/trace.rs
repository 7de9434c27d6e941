//! Trace events (`lh.trace.v2`): one JSON object per line, the same shape from every tier. The
//! schema is `protocol/schema/lh.trace.v2.json`; the runtime emits these, the worker API returns
//! them, the session log stores them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const TRACE_SCHEMA: &str = "lh.trace.v2";

/// Event types this runtime emits.
pub mod kind {
    pub const COMMAND_STARTED: &str = "harness.runtime.command.started";
    pub const COMMAND_COMPLETED: &str = "harness.runtime.command.completed";
    pub const DISPOSE_FAILED: &str = "harness.runtime.dispose.failed";
    pub const FILE_CREATED: &str = "harness.file.created";
    pub const FILE_MODIFIED: &str = "harness.file.modified";
    pub const FILE_DELETED: &str = "harness.file.deleted";
    /// Stands for the `harness.file.*` events of one command (or one merge-back) past the
    /// emitter's limit: how many there were of each change. (the runtime's `Emitter`).
    pub const FILE_TRUNCATED: &str = "harness.file.truncated";
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
