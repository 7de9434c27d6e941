//! Trace events (`lh.trace.v2`): one JSON object per line, the same shape from every tier. The
//! runtime emits these, the worker API returns them, the session log stores them.
//!
//! Each event type is one variant of [`Payload`], its `type` string in the variant's
//! `#[serde(rename)]` and its `data` a struct of its own (`command`, `file`, `tier`). Everything
//! else follows from that declaration: [`Payload::kind`], [`Payload::from_parts`] and
//! [`Payload::into_parts`] go through serde, and the schema `protocol/schema/lh.trace.v2.json`
//! (and the SDKs' models) are generated from these types ([`schema`]; the committed files are
//! checked by `protocol/tests/suite/generated.rs`).

mod classification;
mod command;
mod file;
mod kinds;
pub mod schema;
#[cfg(test)]
mod tests;
mod tier;

pub use classification::{
    Classification, Decision, EmulationGap, GapKind, GapSignal, RealExecReason, Reason, Toggle,
};
pub use command::{CommandCompleted, CommandStarted, ContentRef, DisposeFailed, TrackingSkipped};
pub use file::{FileEvent, FileKind, FileSource, FileTruncated, OmittedFiles};
pub use tier::{
    EscalationDetail, EscalationSignal, HigherTierUsage, LocalUsage, PodUsage, SandboxOrigin,
    TierEscalated, TierFigures, TierRefused, TurnUsage,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const TRACE_SCHEMA: &str = "lh.trace.v2";

/// The `type` of some events, for readers that look for one. The names are [`Payload`]'s
/// renames; a test checks that each is one of them, and a new event needs none.
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

/// The payload of a trace line: its `type` and `data`, typed. The runtime builds these and the
/// readers (worker API accounting, `kube-harness local`) match on them, so a field is named in
/// one place. Serde writes a variant as `{"type": "<rename>", "data": {…}}`; the line keeps its
/// `data` as a `serde_json::Value` (whose object keys serde_json writes sorted), so the bytes on
/// the wire do not depend on the order of a struct's fields. Absent optional fields are left out.
///
/// Types other writers add are kept as [`Payload::Other`]; a known type whose `data` does not
/// parse is an error ([`TraceEvent::payload`]), never silently another variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", content = "data")]
pub enum Payload {
    #[serde(rename = "harness.runtime.command.started")]
    CommandStarted(CommandStarted),
    #[serde(rename = "harness.runtime.command.completed")]
    CommandCompleted(CommandCompleted),
    #[serde(rename = "harness.runtime.dispose.failed")]
    DisposeFailed(DisposeFailed),
    #[serde(rename = "harness.file.created")]
    FileCreated(FileEvent),
    #[serde(rename = "harness.file.modified")]
    FileModified(FileEvent),
    #[serde(rename = "harness.file.deleted")]
    FileDeleted(FileEvent),
    #[serde(rename = "harness.file.truncated")]
    FileTruncated(FileTruncated),
    #[serde(rename = "harness.tier.escalated")]
    TierEscalated(TierEscalated),
    #[serde(rename = "harness.tier.refused")]
    TierRefused(TierRefused),
    #[serde(rename = "harness.turn.usage")]
    TurnUsage(TurnUsage),
    /// A type this crate does not define, with its data as written (not part of the schema;
    /// [`Payload::into_parts`] and [`Payload::from_parts`] handle it, never serde).
    #[serde(skip)]
    Other { kind: String, data: Value },
}

/// A known event type whose `data` is not what this crate defines.
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {source}")]
pub struct PayloadError {
    pub kind: String,
    #[source]
    pub source: serde_json::Error,
}

impl Payload {
    /// Every `type` this crate defines, in declaration order (read from serde's own list).
    pub fn kinds() -> &'static [&'static str] {
        static KINDS: std::sync::OnceLock<&'static [&'static str]> = std::sync::OnceLock::new();
        KINDS.get_or_init(kinds::tags_of::<Payload>)
    }

    /// The line's `type`.
    pub fn kind(&self) -> &str {
        match self {
            Payload::Other { kind, .. } => kind,
            known => kinds::tag_of(known, Payload::kinds()),
        }
    }

    /// The file change of a `harness.file.created/modified/deleted` event.
    pub fn file(&self) -> Option<&FileEvent> {
        match self {
            Payload::FileCreated(f) | Payload::FileModified(f) | Payload::FileDeleted(f) => Some(f),
            _ => None,
        }
    }

    /// The line's `type` and `data`.
    pub fn into_parts(self) -> (String, Value) {
        if let Payload::Other { kind, data } = self {
            return (kind, data);
        }
        // Serialising these types cannot fail (string keys only, no custom serialisers), and
        // serde writes a known variant as {"type", "data"}: the fallbacks are never taken.
        let Ok(Value::Object(mut line)) = serde_json::to_value(&self) else {
            return (String::new(), Value::Null);
        };
        let kind = match line.remove("type") {
            Some(Value::String(kind)) => kind,
            _ => String::new(),
        };
        (kind, line.remove("data").unwrap_or(Value::Null))
    }

    /// Reads a line's `type` and `data`: a type this crate does not define is
    /// [`Payload::Other`]; a known one whose data does not parse is an error.
    pub fn from_parts(kind: &str, data: &Value) -> Result<Payload, PayloadError> {
        if !Payload::kinds().contains(&kind) {
            return Ok(Payload::Other {
                kind: kind.to_string(),
                data: data.clone(),
            });
        }
        let line = serde_json::json!({"type": kind, "data": data});
        Payload::deserialize(line).map_err(|source| PayloadError {
            kind: kind.to_string(),
            source,
        })
    }
}

/// The `stepKey` of a command event's `data`, read alone: replay must see that a step was
/// started even when the rest of the data is not what this version writes (a step taken for
/// "not run" would run twice).
pub fn step_key_of(data: &serde_json::Map<String, Value>) -> Option<&str> {
    data.get("stepKey").and_then(Value::as_str)
}

impl TraceEvent {
    /// A line of `payload`, stamped with where and when it happened.
    pub fn new(session_id: &str, turn_id: &str, seq: u64, at_ms: u64, payload: Payload) -> Self {
        let (kind, data) = payload.into_parts();
        TraceEvent {
            schema: TRACE_SCHEMA.to_string(),
            kind,
            at_ms,
            session_id: session_id.to_string(),
            turn_id: turn_id.to_string(),
            seq,
            data,
        }
    }

    /// The typed payload (see [`Payload::from_parts`]).
    pub fn payload(&self) -> Result<Payload, PayloadError> {
        Payload::from_parts(&self.kind, &self.data)
    }
}
