//! `clients/typescript/src/models.ts`: an interface per object, a type alias per everything else
//! (unions of literals, tagged unions, intersections).

use super::{definitions, Obj, Ty};
use serde_json::Value;

const HEADER: &str = "/**
 * The JSON of the worker API and of trace events (lh.trace.v2): what the worker sends, keys as on
 * the wire. Generated from protocol/schema/*.json by protocol/tests/suite/codegen
 * (`KH_REGENERATE=1 cargo test -p kube-harness-protocol --test all generated::`); do not edit.
 */
";

pub fn typescript(trace: &Value, worker: &Value) -> String {
    let mut s = HEADER.to_string();
    for (name, (t, doc)) in definitions(trace, worker) {
        s.push('\n');
        if let Some(doc) = doc {
            s.push_str(&format!("/** {} */\n", comment(&doc)));
        }
        match &t {
            Ty::Object(o) => s.push_str(&format!("export interface {name} {}\n", object(o, 0))),
            other => {
                let e = expr(other, 0);
                let sep = if e.starts_with('\n') { "" } else { " " };
                s.push_str(&format!("export type {name} ={sep}{e};\n"));
            }
        }
    }
    s
}

fn comment(doc: &str) -> String {
    doc.replace("*/", "*\\/")
}

fn expr(t: &Ty, depth: usize) -> String {
    match t {
        Ty::Any => "unknown".into(),
        Ty::Str => "string".into(),
        Ty::Num => "number".into(),
        Ty::Bool => "boolean".into(),
        Ty::Null => "null".into(),
        Ty::Lit(v) => v.to_string(),
        Ty::Named(n) => n.clone(),
        Ty::Array(t) => match **t {
            Ty::Union(_) | Ty::And(_) => format!("({})[]", expr(t, depth)),
            _ => format!("{}[]", expr(t, depth)),
        },
        Ty::Map(t) => format!("{{ [key: string]: {} }}", expr(t, depth)),
        Ty::Union(items) => {
            let part = |t: &Ty, depth: usize| match t {
                Ty::And(_) => format!("({})", expr(t, depth)),
                _ => expr(t, depth),
            };
            let flat: Vec<String> = items.iter().map(|t| part(t, depth)).collect();
            if flat.iter().any(|p| p.contains('\n')) {
                // One variant a line, each indented one step further.
                let pad = "  ".repeat(depth + 1);
                items
                    .iter()
                    .map(|t| format!("\n{pad}| {}", part(t, depth + 1)))
                    .collect::<String>()
            } else {
                flat.join(" | ")
            }
        }
        Ty::Object(o) => object(o, depth),
        Ty::And(parts) => parts
            .iter()
            .map(|p| match p {
                Ty::Union(_) => format!("({})", expr(p, depth)),
                _ => expr(p, depth),
            })
            .collect::<Vec<_>>()
            .join(" & "),
    }
}

fn object(o: &Obj, depth: usize) -> String {
    let pad = "  ".repeat(depth + 1);
    let mut s = "{\n".to_string();
    for f in &o.fields {
        if let Some(doc) = &f.doc {
            s.push_str(&format!("{pad}/** {} */\n", comment(doc)));
        }
        let name = if f
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            f.name.clone()
        } else {
            format!("{:?}", f.name)
        };
        let opt = if f.required { "" } else { "?" };
        s.push_str(&format!("{pad}{name}{opt}: {};\n", expr(&f.ty, depth + 1)));
    }
    if o.open && !o.fields.is_empty() {
        s.push_str(&format!(
            "{pad}/** Other keys another writer added. */\n{pad}[key: string]: unknown;\n"
        ));
    }
    s.push_str(&"  ".repeat(depth));
    s.push('}');
    s
}
