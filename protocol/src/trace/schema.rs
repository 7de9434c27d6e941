//! The JSON Schemas of the wire, generated from the types (schemars): `lh.trace.v2` (one trace
//! line) and the worker API's bodies. The committed copies under `protocol/schema/` and the
//! SDKs' models made from them are checked by `protocol/tests/suite/generated.rs`
//! (`KH_REGENERATE=1` rewrites them).

use super::{Payload, TraceEvent, TRACE_SCHEMA};
use schemars::{generate::SchemaSettings, JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Value};
use std::borrow::Cow;

/// One line of `trace.ndjson` and of the session log, as the schema describes it: the envelope
/// of [`TraceEvent`] around a typed [`Payload`] (`type` and `data`).
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
struct Line {
    schema: SchemaName,
    /// Milliseconds since the Unix epoch.
    at_ms: u64,
    #[schemars(length(min = 1))]
    session_id: String,
    #[schemars(length(min = 1))]
    turn_id: String,
    /// Position within the turn, gapless from 1.
    #[schemars(range(min = 1))]
    seq: u64,
    #[serde(flatten)]
    payload: Payload,
}

/// Always `lh.trace.v2`.
#[derive(JsonSchema)]
#[allow(dead_code)]
enum SchemaName {
    #[serde(rename = "lh.trace.v2")]
    V2,
}

/// A trace line is typed by its `type`: the schema of [`TraceEvent`] is the typed line's.
impl JsonSchema for TraceEvent {
    fn schema_name() -> Cow<'static, str> {
        "TraceEvent".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        Line::json_schema(generator)
    }
}

fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.meta_schema = Some("https://json-schema.org/draft/2020-12/schema".into()))
        .into_generator()
}

/// `protocol/schema/lh.trace.v2.json`.
pub fn trace_schema() -> Value {
    let mut schema = generator().into_root_schema_for::<TraceEvent>().to_value();
    if let Value::Object(root) = &mut schema {
        root.insert(
            "$id".into(),
            json!(format!(
                "https://kubeharness.dev/schema/{TRACE_SCHEMA}.json"
            )),
        );
        root.insert("title".into(), json!(format!("{TRACE_SCHEMA} trace event")));
        // Every type at the top as well, where a reader finds the list without walking `oneOf`.
        if let Some(Value::Object(properties)) = root.get_mut("properties") {
            properties.insert(
                "type".into(),
                json!({"description": "The event type: one of the variants below.", "enum": Payload::kinds()}),
            );
        }
        root.insert(
            "description".into(),
            json!("One line of trace.ndjson and of the session log: every tier emits the same shapes because one shell runtime emits them all. Generated from protocol/src/trace (do not edit)."),
        );
    }
    schema
}

/// `protocol/schema/worker-api.json`: the bodies of the worker API (docs/worker-api.md), each
/// a definition under `$defs`.
pub fn worker_api_schema() -> Value {
    use crate::worker_api::*;
    let mut generator = generator();
    // Roots first, in the order the API document lists them; their parts follow by reference.
    generator.subschema_for::<ExecRequest>();
    generator.subschema_for::<ExecResponse>();
    generator.subschema_for::<ExecStreamLine>();
    generator.subschema_for::<OpenTurnRequest>();
    generator.subschema_for::<OpenTurnResponse>();
    generator.subschema_for::<EndTurnRequest>();
    generator.subschema_for::<EndTurnResponse>();
    generator.subschema_for::<CommitRequest>();
    generator.subschema_for::<PersistentCommit>();
    generator.subschema_for::<FileWritten>();
    generator.subschema_for::<ArchiveWritten>();
    generator.subschema_for::<Status>();
    generator.subschema_for::<LogPage>();
    generator.subschema_for::<Health>();
    generator.subschema_for::<ErrorBody>();
    generator.subschema_for::<AdoptRequest>();
    generator.subschema_for::<AdoptResponse>();
    let defs: serde_json::Map<String, Value> = generator.take_definitions(true);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://kubeharness.dev/schema/worker-api.json",
        "title": "Kube Harness worker API bodies",
        "description": "The JSON bodies of the worker API (docs/worker-api.md), one definition each. Generated from protocol/src/worker_api.rs (do not edit).",
        "$defs": defs,
    })
}
