//! A small generator of the SDKs' models from the committed JSON Schemas: it reads the schema
//! (not the Rust types), so what the SDKs get is exactly what the schema files say. It knows the
//! subset schemars writes: `$ref`, objects with `properties`/`required`, `oneOf`/`anyOf` (tagged
//! enums: a `const` tag property beside the variant's fields or `$ref`), `const`/`enum`, arrays,
//! maps and nullable types; anything else becomes "any".

mod python;
mod typescript;

pub use python::python;
pub use typescript::typescript;

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A type, as the models need it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Any,
    Str,
    Num,
    Bool,
    Null,
    Lit(Value),
    Named(String),
    Array(Box<Ty>),
    Map(Box<Ty>),
    Union(Vec<Ty>),
    Object(Obj),
    /// Every part at once (a variant's tag beside the `$ref` of its fields, or an envelope's
    /// fields beside its tagged payload).
    And(Vec<Ty>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Obj {
    pub fields: Vec<Field>,
    /// Other keys are kept (`additionalProperties: true`: an open map of another writer's).
    pub open: bool,
    pub doc: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub ty: Ty,
    pub required: bool,
    pub doc: Option<String>,
}

/// The definitions of both schemas, by name (the trace schema's root is `TraceEvent`, which the
/// worker API's schema defines too: they must agree, but for the root's list of types).
pub fn definitions(trace: &Value, worker: &Value) -> BTreeMap<String, (Ty, Option<String>)> {
    let mut defs: BTreeMap<String, Value> = BTreeMap::new();
    for schema in [trace, worker] {
        for (name, def) in schema["$defs"].as_object().into_iter().flatten() {
            if let Some(old) = defs.insert(name.clone(), def.clone()) {
                assert_eq!(&old, def, "{name} differs between the schemas");
            }
        }
    }
    let mut root = trace.as_object().cloned().unwrap_or_default();
    for k in ["$schema", "$id", "$defs", "title", "description"] {
        root.remove(k);
    }
    // The root also lists every `type` at the top (the variants say the same).
    if let Some(Value::Object(properties)) = root.get_mut("properties") {
        properties.remove("type");
    }
    let mut event = defs["TraceEvent"].as_object().cloned().unwrap_or_default();
    event.remove("description");
    assert_eq!(root, event, "the trace schema's root is TraceEvent");
    defs.into_iter()
        .map(|(name, def)| {
            let doc = doc(&def);
            (name, (ty(&def), doc))
        })
        .collect()
}

/// A description on one line.
pub fn doc(schema: &Value) -> Option<String> {
    let d = schema.get("description")?.as_str()?;
    Some(d.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Whether a subschema says anything about shape (a `oneOf` of `required` lists does not).
fn shaped(s: &Value) -> bool {
    [
        "$ref",
        "type",
        "properties",
        "const",
        "enum",
        "oneOf",
        "anyOf",
        "allOf",
    ]
    .iter()
    .any(|k| s.get(k).is_some())
}

pub fn ty(s: &Value) -> Ty {
    let Some(map) = s.as_object() else {
        return Ty::Any;
    };
    if let Some(c) = map.get("const") {
        return Ty::Lit(c.clone());
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        return union(values.iter().map(|v| Ty::Lit(v.clone())).collect());
    }
    let mut parts = Vec::new();
    if let Some(Value::String(r)) = map.get("$ref") {
        let name = r.rsplit('/').next().unwrap_or(r);
        parts.push(Ty::Named(name.to_string()));
    }
    if map.contains_key("properties") {
        parts.push(Ty::Object(object(map)));
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(items)) = map.get(key) {
            let items: Vec<&Value> = items.iter().filter(|i| shaped(i)).collect();
            if !items.is_empty() {
                parts.push(union(items.into_iter().map(ty).collect()));
            }
        }
    }
    if let Some(Value::Array(items)) = map.get("allOf") {
        parts.extend(items.iter().map(ty));
    }
    match parts.len() {
        0 => {}
        1 => return parts.remove(0),
        _ => return Ty::And(parts),
    }
    match map.get("type") {
        Some(Value::String(t)) => primitive(t, map),
        Some(Value::Array(ts)) => union(
            ts.iter()
                .filter_map(Value::as_str)
                .map(|t| primitive(t, map))
                .collect(),
        ),
        _ => Ty::Any,
    }
}

fn primitive(t: &str, map: &Map<String, Value>) -> Ty {
    match t {
        "string" => Ty::Str,
        "integer" | "number" => Ty::Num,
        "boolean" => Ty::Bool,
        "null" => Ty::Null,
        "array" => Ty::Array(Box::new(map.get("items").map_or(Ty::Any, ty))),
        "object" => Ty::Map(Box::new(match map.get("additionalProperties") {
            Some(Value::Object(_)) => ty(&map["additionalProperties"]),
            _ => Ty::Any,
        })),
        _ => Ty::Any,
    }
}

fn object(map: &Map<String, Value>) -> Obj {
    let required: Vec<&str> = map
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut fields: Vec<Field> = map
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, s)| Field {
            name: name.clone(),
            ty: ty(s),
            required: required.contains(&name.as_str()),
            doc: doc(s),
        })
        .collect();
    // Required fields first, each group in the schema's (sorted) order.
    fields.sort_by_key(|f| !f.required);
    Obj {
        fields,
        open: map.get("additionalProperties") == Some(&Value::Bool(true)),
        doc: None,
    }
}

fn union(mut items: Vec<Ty>) -> Ty {
    if items.len() == 1 {
        items.remove(0)
    } else {
        Ty::Union(items)
    }
}

/// The tag of a tagged variant: the first `const` string among its fields, CamelCased
/// (`harness.file.created` → `HarnessFileCreated`, `local-host` → `LocalHost`).
pub fn tag_name(t: &Ty) -> Option<String> {
    let fields = match t {
        Ty::Object(o) => &o.fields,
        Ty::And(parts) => return parts.iter().find_map(tag_name),
        _ => return None,
    };
    fields.iter().find_map(|f| match &f.ty {
        Ty::Lit(Value::String(s)) => Some(camel(s)),
        _ => None,
    })
}

pub fn camel(s: &str) -> String {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}
