//! The committed schemas (`protocol/schema/*.json`) and the SDKs' models made from them
//! (`clients/python/src/kube_harness/models.py`, `clients/typescript/src/models.ts`) must be what
//! the types generate. `KH_REGENERATE=1 cargo test -p kube-harness-protocol --test all
//! generated::` rewrites them.

use super::codegen;
use kube_harness_protocol::trace::schema::{trace_schema, worker_api_schema};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Writes `want` to `rel` under KH_REGENERATE, then fails unless the committed file is `want`.
fn check(rel: &str, want: &str) {
    let path = root().join(rel);
    if std::env::var_os("KH_REGENERATE").is_some() {
        std::fs::write(&path, want).unwrap();
    }
    let got = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        got == want,
        "{rel} is stale: regenerate it with `KH_REGENERATE=1 cargo test -p kube-harness-protocol --test all generated::`"
    );
}

fn pretty(schema: &Value) -> String {
    serde_json::to_string_pretty(&sorted(schema)).unwrap() + "\n"
}

/// Keys in sorted order at every depth, whether or not serde_json keeps insertion order (its
/// `preserve_order` feature, which another crate of a workspace build may turn on).
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let keys: std::collections::BTreeMap<&String, Value> =
                map.iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(keys.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn schemas() -> (Value, Value) {
    (sorted(&trace_schema()), sorted(&worker_api_schema()))
}

#[test]
fn the_committed_trace_schema_is_what_the_types_generate() {
    check("protocol/schema/lh.trace.v2.json", &pretty(&trace_schema()));
}

#[test]
fn the_committed_worker_api_schema_is_what_the_types_generate() {
    check(
        "protocol/schema/worker-api.json",
        &pretty(&worker_api_schema()),
    );
}

#[test]
fn the_committed_python_models_are_what_the_schemas_generate() {
    check("clients/python/src/kube_harness/models.py", &{
        let (trace, worker) = schemas();
        codegen::python(&trace, &worker)
    });
}

#[test]
fn the_committed_typescript_models_are_what_the_schemas_generate() {
    check("clients/typescript/src/models.ts", &{
        let (trace, worker) = schemas();
        codegen::typescript(&trace, &worker)
    });
}
