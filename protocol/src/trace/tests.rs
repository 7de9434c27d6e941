//! The typed events against the committed schema, and the wire they write.

#![allow(clippy::unwrap_used)]
use super::*;
use serde_json::json;

const SCHEMA: &str = include_str!("../../schema/lh.trace.v2.json");

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
        detail: EscalationDetail::Reasons(vec![Reason::NeedsRealExec {
            command: "make".into(),
            reason: RealExecReason::BuildToolchain,
        }]),
        to_tier: 1,
        provision_ms: 40,
        sandbox: Some(SandboxOrigin {
            source: Some(crate::tier1::Source::Prepared),
            miss_reason: None,
            pod: Some("p-1".into()),
            reused: false,
        }),
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
        reasons: Some(vec![Reason::PolicyBlocked {
            command: "docker".into(),
            rule: "deny".into(),
        }]),
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
            gap: Some(EmulationGap {
                kind: GapKind::EmulationGap,
                signal: GapSignal::CommandNotFound,
                command: "make".into(),
                option: None,
            }),
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
            higher_tier: Some(HigherTierUsage::Unknown(TierFigures {
                commands: 1,
                duration_ms: 7,
            })),
            escalations: vec![escalated()],
            refusals: 1,
        }),
        Payload::TurnUsage(TurnUsage {
            stayed_on_tier0: false,
            tier0: TierFigures::default(),
            higher_tier: Some(HigherTierUsage::Pod(PodUsage {
                pod: "p-1".into(),
                source: Some(crate::tier1::Source::Ordinary),
                miss_reason: Some("stock_empty".into()),
                pod_ms: 90,
                provision_ms: 40,
                commands: 1,
                duration_ms: 7,
                bytes_handed_over: 100,
                bytes_returned: 10,
            })),
            escalations: vec![TierEscalated {
                signal: EscalationSignal::EmulationGap,
                detail: EscalationDetail::Gap(EmulationGap {
                    kind: GapKind::EmulationGap,
                    signal: GapSignal::UnsupportedOption,
                    command: "sed".into(),
                    option: Some("-z".into()),
                }),
                sandbox: Some(SandboxOrigin {
                    source: None,
                    miss_reason: Some("stock_empty".into()),
                    pod: None,
                    reused: true,
                }),
                ..escalated()
            }],
            refusals: 0,
        }),
        Payload::TurnUsage(TurnUsage {
            stayed_on_tier0: false,
            tier0: TierFigures::default(),
            higher_tier: Some(HigherTierUsage::LocalHost(LocalUsage {
                commands: 2,
                duration_ms: 7,
                provision_ms: 3,
                bytes_handed_over: 100,
                bytes_returned: 0,
            })),
            escalations: vec![escalated()],
            refusals: 0,
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
    let mut kinds = std::collections::BTreeSet::new();
    for (i, payload) in samples().into_iter().enumerate() {
        let event = TraceEvent::new("s1", "t1", i as u64 + 1, 1_700_000_000_000, payload.clone());
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
    // Every variant but `Other` has a type of its own, so covering the types covers the
    // variants (and `Other` is the sample that fails the schema, above).
    assert_eq!(
        kinds,
        Payload::kinds().iter().map(|k| k.to_string()).collect(),
        "a sample of every variant"
    );
    let in_schema: std::collections::BTreeSet<String> = schema["properties"]["type"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, in_schema, "the typed events are the schema's types");
    let mut variants = std::collections::BTreeSet::new();
    types_in(&schema["oneOf"], &mut variants);
    assert_eq!(kinds, variants, "one variant of the schema per type");
}

/// The `type` constants of the schema: every `"type": {"const": …}` property, at any depth.
fn types_in(schema: &Value, out: &mut std::collections::BTreeSet<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(t) = map
                .get("properties")
                .and_then(|p| p.get("type"))
                .and_then(|t| t.get("const"))
                .and_then(Value::as_str)
            {
                out.insert(t.to_string());
            }
            map.values().for_each(|v| types_in(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| types_in(v, out)),
        _ => {}
    }
}

/// Each name of `kind` is the `type` of a variant.
#[test]
fn the_kind_constants_are_payload_types() {
    for k in [
        kind::COMMAND_STARTED,
        kind::COMMAND_COMPLETED,
        kind::DISPOSE_FAILED,
        kind::FILE_CREATED,
        kind::FILE_MODIFIED,
        kind::FILE_DELETED,
        kind::FILE_TRUNCATED,
        kind::TIER_ESCALATED,
        kind::TIER_REFUSED,
        kind::TURN_USAGE,
    ] {
        assert!(Payload::kinds().contains(&k), "{k}");
    }
    for payload in samples() {
        let kind = payload.kind().to_string();
        assert_eq!(payload.into_parts().0, kind);
    }
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
