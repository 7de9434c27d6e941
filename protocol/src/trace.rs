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

/// The payload of a trace line: its `type` and `data`, typed. The runtime builds these and the
/// readers (worker API accounting, `kube-harness local`) match on them, so a field is named in
/// one place. [`Payload::into_parts`] and [`Payload::from_parts`] convert to and from the line's
/// `type` and `data`, through a `serde_json::Value` as before, so the bytes on the wire do not
/// change: struct fields are declared in the order the runtime used to insert them, and absent
/// optional fields are left out.
///
/// Types other writers add are kept as [`Payload::Other`]; a known type whose `data` does not
/// parse is an error ([`TraceEvent::payload`]), never silently another variant.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    CommandStarted(CommandStarted),
    CommandCompleted(CommandCompleted),
    DisposeFailed(DisposeFailed),
    FileCreated(FileEvent),
    FileModified(FileEvent),
    FileDeleted(FileEvent),
    FileTruncated(FileTruncated),
    TierEscalated(TierEscalated),
    TierRefused(TierRefused),
    TurnUsage(TurnUsage),
    /// A type this crate does not define, with its data as written.
    Other {
        kind: String,
        data: Value,
    },
}

/// `harness.runtime.command.started`: emitted before the command runs (and, with a session
/// log, made durable first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandStarted {
    pub command: String,
    pub tier: u8,
    pub cwd: String,
    /// The caller's step key: replay finds a step's events by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_key: Option<String>,
}

/// `harness.runtime.command.completed`: the result. Output is inline (`stdout`, `stderr`,
/// cut and flagged `…Truncated` when it could not be stored) or a reference to a file under
/// `/artifacts/trace/` (`stdoutRef`, `stderrRef`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandCompleted {
    pub command: String,
    pub tier: u8,
    pub cwd: String,
    pub exit_code: i32,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_tracking_skipped: Option<TrackingSkipped>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_ref: Option<ContentRef>,
    /// The schema allows only `true`: absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stdout_truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_ref: Option<ContentRef>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub stderr_truncated: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What the file tracking newly could not follow after a command: how many, and the first 20.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackingSkipped {
    pub count: u64,
    pub first: Vec<String>,
}

/// Output stored under `/artifacts/trace/`; replay returns it only if it still matches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContentRef {
    pub content_ref: String,
    pub bytes: u64,
    /// Lowercase hex; refs recorded before it was added have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// `harness.runtime.dispose.failed`: releasing a tier (or part of its merge-back) failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisposeFailed {
    pub tier: u8,
    pub error: String,
}

/// `harness.file.created`, `.modified` or `.deleted` (the variant says which).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEvent {
    /// The harness path (`/session/…`, `/artifacts/…`, `/persistent/…`).
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    pub tier: u8,
    pub source: FileSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
}

/// Where a file change was seen: after a Tier-0 command, in a higher tier's merge-back, or in a
/// file written through the worker API (`PUT /v1/files`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileSource {
    Command,
    Merge,
    Upload,
}

impl FileSource {
    pub fn as_str(self) -> &'static str {
        match self {
            FileSource::Command => "command",
            FileSource::Merge => "merge",
            FileSource::Upload => "upload",
        }
    }
}

/// `harness.file.truncated`: stands for the file events of one command (or one merge-back)
/// past the emitter's limits; `byte_limit` and `listed_bytes` are there when the byte budget,
/// not the count, stopped the listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileTruncated {
    pub source: FileSource,
    pub tier: u8,
    pub limit: u64,
    pub listed: u64,
    pub omitted: OmittedFiles,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listed_bytes: Option<u64>,
}

/// How many file events of each change were left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OmittedFiles {
    pub created: u64,
    pub modified: u64,
    pub deleted: u64,
    pub total: u64,
}

/// Why a turn escalated to a higher tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EscalationSignal {
    /// The classifier said the script needs more than Tier-0.
    Classification,
    /// The script ran on Tier-0 and hit a missing program or feature.
    EmulationGap,
}

/// `harness.tier.escalated`, and one entry of the turn usage's `escalations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TierEscalated {
    pub signal: EscalationSignal,
    /// The classifier's reasons or the emulation gap, as the classifier writes them.
    pub detail: Value,
    pub to_tier: u8,
    pub provision_ms: u64,
    /// Where the sandbox came from, as the tier reports it (a pod: `source`, `missReason`,
    /// `pod`); open-ended because the tier, not the runtime, defines it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Value>,
    /// Fields another writer added (the schema leaves this event open); kept, written last.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// `harness.tier.refused`: a command not run (exit code 126). A policy refusal carries the
/// classifier's `reasons`; a failed retry after an emulation gap carries `signal` and `gap`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TierRefused {
    pub command: String,
    pub tier: u8,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<EscalationSignal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_key: Option<String>,
    /// Fields another writer added (the schema leaves this event open); kept, written last.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// `harness.turn.usage`: closes the turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnUsage {
    pub stayed_on_tier0: bool,
    pub tier0: TierFigures,
    /// The higher tier's usage as it reports it (`provider`, `commands`, `durationMs`, and what
    /// else it measures), `null` when the turn stayed on Tier-0.
    pub higher_tier: Option<Value>,
    pub escalations: Vec<TierEscalated>,
    pub refusals: u64,
}

/// Commands run on a tier and their summed duration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TierFigures {
    pub commands: u64,
    pub duration_ms: u64,
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
    /// The line's `type`.
    pub fn kind(&self) -> &str {
        match self {
            Payload::CommandStarted(_) => kind::COMMAND_STARTED,
            Payload::CommandCompleted(_) => kind::COMMAND_COMPLETED,
            Payload::DisposeFailed(_) => kind::DISPOSE_FAILED,
            Payload::FileCreated(_) => kind::FILE_CREATED,
            Payload::FileModified(_) => kind::FILE_MODIFIED,
            Payload::FileDeleted(_) => kind::FILE_DELETED,
            Payload::FileTruncated(_) => kind::FILE_TRUNCATED,
            Payload::TierEscalated(_) => kind::TIER_ESCALATED,
            Payload::TierRefused(_) => kind::TIER_REFUSED,
            Payload::TurnUsage(_) => kind::TURN_USAGE,
            Payload::Other { kind, .. } => kind,
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
        // Serialising these structs cannot fail (no maps with non-string keys, no custom
        // serialisers), so the fallback is never taken.
        fn data<T: Serialize>(t: &T) -> Value {
            serde_json::to_value(t).unwrap_or(Value::Null)
        }
        let kind = self.kind().to_string();
        let data = match self {
            Payload::CommandStarted(d) => data(&d),
            Payload::CommandCompleted(d) => data(&d),
            Payload::DisposeFailed(d) => data(&d),
            Payload::FileCreated(d) | Payload::FileModified(d) | Payload::FileDeleted(d) => {
                data(&d)
            }
            Payload::FileTruncated(d) => data(&d),
            Payload::TierEscalated(d) => data(&d),
            Payload::TierRefused(d) => data(&d),
            Payload::TurnUsage(d) => data(&d),
            Payload::Other { data, .. } => data,
        };
        (kind, data)
    }

    /// Reads a line's `type` and `data`: a type this crate does not define is
    /// [`Payload::Other`]; a known one whose data does not parse is an error.
    pub fn from_parts(kind: &str, data: &Value) -> Result<Payload, PayloadError> {
        fn parse<T: serde::de::DeserializeOwned>(
            kind: &str,
            data: &Value,
        ) -> Result<T, PayloadError> {
            T::deserialize(data).map_err(|source| PayloadError {
                kind: kind.to_string(),
                source,
            })
        }
        Ok(match kind {
            kind::COMMAND_STARTED => Payload::CommandStarted(parse(kind, data)?),
            kind::COMMAND_COMPLETED => Payload::CommandCompleted(parse(kind, data)?),
            kind::DISPOSE_FAILED => Payload::DisposeFailed(parse(kind, data)?),
            kind::FILE_CREATED => Payload::FileCreated(parse(kind, data)?),
            kind::FILE_MODIFIED => Payload::FileModified(parse(kind, data)?),
            kind::FILE_DELETED => Payload::FileDeleted(parse(kind, data)?),
            kind::FILE_TRUNCATED => Payload::FileTruncated(parse(kind, data)?),
            kind::TIER_ESCALATED => Payload::TierEscalated(parse(kind, data)?),
            kind::TIER_REFUSED => Payload::TierRefused(parse(kind, data)?),
            kind::TURN_USAGE => Payload::TurnUsage(parse(kind, data)?),
            other => Payload::Other {
                kind: other.to_string(),
                data: data.clone(),
            },
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const SCHEMA: &str = include_str!("../schema/lh.trace.v2.json");

    /// The variant's name. No wildcard: a new variant does not compile until it is named here
    /// (and in `VARIANTS`); the test then fails until `samples` holds one of it, and until the
    /// schema names exactly the samples' types.
    fn variant(p: &Payload) -> &'static str {
        match p {
            Payload::CommandStarted(_) => "CommandStarted",
            Payload::CommandCompleted(_) => "CommandCompleted",
            Payload::DisposeFailed(_) => "DisposeFailed",
            Payload::FileCreated(_) => "FileCreated",
            Payload::FileModified(_) => "FileModified",
            Payload::FileDeleted(_) => "FileDeleted",
            Payload::FileTruncated(_) => "FileTruncated",
            Payload::TierEscalated(_) => "TierEscalated",
            Payload::TierRefused(_) => "TierRefused",
            Payload::TurnUsage(_) => "TurnUsage",
            Payload::Other { .. } => "Other",
        }
    }
    const VARIANTS: [&str; 11] = [
        "CommandStarted",
        "CommandCompleted",
        "DisposeFailed",
        "FileCreated",
        "FileModified",
        "FileDeleted",
        "FileTruncated",
        "TierEscalated",
        "TierRefused",
        "TurnUsage",
        "Other",
    ];

    fn file(path: &str, source: FileSource) -> FileEvent {
        FileEvent {
            path: path.into(),
            kind: FileKind::File,
            size: 3,
            mode: 0o644,
            tier: 0,
            source,
        }
    }

    fn escalated() -> TierEscalated {
        TierEscalated {
            signal: EscalationSignal::Classification,
            detail: json!([{"kind": "needs-toolchain", "command": "make"}]),
            to_tier: 1,
            provision_ms: 40,
            sandbox: Some(json!({"source": "prepared", "missReason": null, "pod": "p-1"})),
            extra: Default::default(),
        }
    }

    /// One of every variant, and the optional fields both present and absent.
    fn samples() -> Vec<Payload> {
        let started = CommandStarted {
            command: "echo hi".into(),
            tier: 0,
            cwd: "/session".into(),
            step_key: None,
        };
        let completed = CommandCompleted {
            command: "echo hi".into(),
            tier: 0,
            cwd: "/session".into(),
            exit_code: 0,
            duration_ms: 5,
            timed_out: false,
            truncated: false,
            step_key: None,
            file_tracking_skipped: None,
            stdout: Some("hi\n".into()),
            stdout_ref: None,
            stdout_truncated: false,
            stderr: Some(String::new()),
            stderr_ref: None,
            stderr_truncated: false,
        };
        let refused = TierRefused {
            command: "docker ps".into(),
            tier: 0,
            reason: "refused by policy: docker".into(),
            reasons: Some(json!([{"kind": "policy-blocked", "command": "docker"}])),
            signal: None,
            gap: None,
            step_key: None,
            extra: Default::default(),
        };
        let truncated = FileTruncated {
            source: FileSource::Command,
            tier: 0,
            limit: 2,
            listed: 2,
            omitted: OmittedFiles {
                created: 1,
                modified: 0,
                deleted: 1,
                total: 2,
            },
            byte_limit: None,
            listed_bytes: None,
        };
        vec![
            Payload::CommandStarted(started.clone()),
            Payload::CommandStarted(CommandStarted {
                step_key: Some("k1".into()),
                tier: 1,
                ..started
            }),
            Payload::CommandCompleted(completed.clone()),
            Payload::CommandCompleted(CommandCompleted {
                exit_code: -1,
                timed_out: true,
                truncated: true,
                step_key: Some("k1".into()),
                file_tracking_skipped: Some(TrackingSkipped {
                    count: 1,
                    first: vec!["/session/\u{fffd}".into()],
                }),
                stdout: None,
                stdout_ref: Some(ContentRef {
                    content_ref: "/artifacts/trace/1.stdout.txt".into(),
                    bytes: 5000,
                    sha256: Some("0".repeat(64)),
                }),
                stderr: Some("cut".into()),
                stderr_truncated: true,
                ..completed
            }),
            Payload::DisposeFailed(DisposeFailed {
                tier: 1,
                error: "merge: 1 change rejected".into(),
            }),
            Payload::FileCreated(file("/session/a.txt", FileSource::Command)),
            Payload::FileCreated(file("/session/in.bin", FileSource::Upload)),
            Payload::FileModified(file("/persistent/kb.md", FileSource::Merge)),
            Payload::FileDeleted(FileEvent {
                kind: FileKind::Symlink,
                ..file("/artifacts/l", FileSource::Command)
            }),
            Payload::FileTruncated(truncated.clone()),
            Payload::FileTruncated(FileTruncated {
                source: FileSource::Merge,
                byte_limit: Some(250),
                listed_bytes: Some(200),
                ..truncated
            }),
            Payload::TierEscalated(escalated()),
            Payload::TierEscalated(TierEscalated {
                signal: EscalationSignal::EmulationGap,
                sandbox: None,
                extra: [("note".to_string(), json!("another writer's"))]
                    .into_iter()
                    .collect(),
                ..escalated()
            }),
            Payload::TierRefused(refused.clone()),
            Payload::TierRefused(TierRefused {
                reasons: None,
                signal: Some(EscalationSignal::EmulationGap),
                gap: Some(json!({"command": "make", "line": "make: command not found"})),
                step_key: Some("k2".into()),
                ..refused
            }),
            Payload::TurnUsage(TurnUsage {
                stayed_on_tier0: true,
                tier0: TierFigures {
                    commands: 2,
                    duration_ms: 9,
                },
                higher_tier: None,
                escalations: vec![],
                refusals: 0,
            }),
            Payload::TurnUsage(TurnUsage {
                stayed_on_tier0: false,
                tier0: TierFigures::default(),
                higher_tier: Some(json!({"provider": "pod", "commands": 1, "durationMs": 7})),
                escalations: vec![escalated()],
                refusals: 1,
            }),
            Payload::Other {
                kind: "harness.tool_call.started".into(),
                data: json!({"tool": "search"}),
            },
        ]
    }

    /// Every variant, as a line, is valid `lh.trace.v2` (the schema names every defined type)
    /// and reads back as itself; an unknown type reads back as `Other`.
    #[test]
    fn every_payload_is_a_valid_trace_line_and_reads_back_the_same() {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let mut covered = std::collections::BTreeSet::new();
        let mut kinds = std::collections::BTreeSet::new();
        for (i, payload) in samples().into_iter().enumerate() {
            covered.insert(variant(&payload));
            let event =
                TraceEvent::new("s1", "t1", i as u64 + 1, 1_700_000_000_000, payload.clone());
            let line = serde_json::to_string(&event).unwrap();
            let back: TraceEvent = serde_json::from_str(&line).unwrap();
            assert_eq!(back.payload().unwrap(), payload, "{line}");
            let value: Value = serde_json::from_str(&line).unwrap();
            if let Payload::Other { .. } = payload {
                assert!(
                    !validator.is_valid(&value),
                    "not an lh.trace.v2 type: {line}"
                );
                continue;
            }
            kinds.insert(event.kind.clone());
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| format!("{e} at {}", e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{line}: {errors:?}");
        }
        assert_eq!(
            covered,
            VARIANTS.into_iter().collect(),
            "a sample of every variant"
        );
        let in_schema: std::collections::BTreeSet<String> = schema["properties"]["type"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        assert_eq!(kinds, in_schema, "the typed events are the schema's types");
    }

    /// The wire is what the runtime wrote with `json!` before: field order, absent optionals.
    #[test]
    fn data_keeps_the_shape_the_runtime_wrote() {
        let (kind, data) = samples().remove(3).into_parts();
        assert_eq!(kind, kind::COMMAND_COMPLETED);
        assert_eq!(
            serde_json::to_string(&data).unwrap(),
            serde_json::to_string(&json!({
                "command": "echo hi", "tier": 0, "cwd": "/session", "exitCode": -1,
                "durationMs": 5, "timedOut": true, "truncated": true, "stepKey": "k1",
                "fileTrackingSkipped": {"count": 1, "first": ["/session/\u{fffd}"]},
                "stdoutRef": {"contentRef": "/artifacts/trace/1.stdout.txt", "bytes": 5000,
                              "sha256": "0".repeat(64)},
                "stderr": "cut", "stderrTruncated": true,
            }))
            .unwrap()
        );
    }

    #[test]
    fn the_step_key_is_read_where_the_typed_events_write_it() {
        for payload in samples() {
            let want = match &payload {
                Payload::CommandStarted(e) => e.step_key.clone(),
                Payload::CommandCompleted(e) => e.step_key.clone(),
                Payload::TierRefused(e) => e.step_key.clone(),
                _ => None,
            };
            let (_, data) = payload.into_parts();
            let Value::Object(data) = data else { continue };
            assert_eq!(step_key_of(&data), want.as_deref());
        }
    }

    #[test]
    fn a_known_type_with_other_data_is_an_error() {
        let err = Payload::from_parts(kind::COMMAND_COMPLETED, &json!({"stepKey": "s1"}));
        assert!(err.is_err());
        let err = Payload::from_parts(
            kind::DISPOSE_FAILED,
            &json!({"tier": 0, "error": "x", "bogus": 1}),
        );
        assert!(err.is_err(), "the schema closes this event");
    }
}
