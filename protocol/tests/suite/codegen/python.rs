//! `clients/python/src/kube_harness/models.py`: a `TypedDict` per object, `Literal` aliases per
//! string enum, `Union` aliases per tagged enum (a class per variant, named by its tag).

use super::{camel, definitions, tag_name, Field, Obj, Ty};
use serde_json::Value;
use std::collections::BTreeSet;

const HEADER: &str = r#""""The JSON of the worker API and of trace events (lh.trace.v2), as TypedDicts: what the worker
sends, keys as on the wire (camelCase). Generated from protocol/schema/*.json by
protocol/tests/suite/codegen (`KH_REGENERATE=1 cargo test -p kube-harness-protocol --test all
generated::`); do not edit."""

from typing import Any, Dict, List, Literal, NotRequired, Optional, TypedDict, Union

"#;

struct Out {
    /// Emitted items in order; a class comes after its bases.
    items: Vec<String>,
    defined: BTreeSet<String>,
}

pub fn python(trace: &Value, worker: &Value) -> String {
    let defs = definitions(trace, worker);
    let mut out = Out {
        items: Vec::new(),
        defined: BTreeSet::new(),
    };
    // Plain objects first (they are the bases of tagged variants), then everything else.
    let (objects, rest): (Vec<_>, Vec<_>) = defs
        .iter()
        .partition(|(_, (t, _))| matches!(t, Ty::Object(_)));
    for (name, (t, doc)) in objects.into_iter().chain(rest) {
        match t {
            Ty::Object(o) => out.class(name, &[], o, doc.as_deref()),
            other => {
                let expr = out.expr(name, other);
                let doc = doc
                    .as_deref()
                    .map(|d| format!("#: {d}\n"))
                    .unwrap_or_default();
                out.items.push(format!("{doc}{name} = {expr}\n"));
                out.defined.insert(name.clone());
            }
        }
    }
    let mut s = HEADER.to_string();
    for item in out.items {
        s.push_str("\n\n");
        s.push_str(&item);
    }
    s
}

impl Out {
    fn class(&mut self, name: &str, bases: &[String], o: &Obj, doc: Option<&str>) {
        let bases = if bases.is_empty() {
            "TypedDict".to_string()
        } else {
            bases.join(", ")
        };
        let mut s = format!("class {name}({bases}):\n");
        if let Some(doc) = doc.or(o.doc.as_deref()) {
            s.push_str(&format!(
                "    \"\"\"{}\"\"\"\n\n",
                doc.replace('\\', "\\\\")
            ));
        }
        let fields: Vec<&Field> = o.fields.iter().collect();
        for f in &fields {
            assert!(
                f.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{name}.{}: not a Python identifier",
                f.name
            );
            if let Some(doc) = &f.doc {
                s.push_str(&format!("    #: {doc}\n"));
            }
            let t = self.expr(&format!("{name}{}", camel(&f.name)), &f.ty);
            let t = if f.required {
                t
            } else {
                format!("NotRequired[{t}]")
            };
            s.push_str(&format!("    {}: {t}\n", f.name));
        }
        if fields.is_empty() && doc.is_none() {
            s.push_str("    pass\n");
        }
        self.items.push(s);
        self.defined.insert(name.to_string());
    }

    /// A type expression; an inline object becomes a class named from `hint` (and its tag).
    fn expr(&mut self, hint: &str, t: &Ty) -> String {
        match t {
            Ty::Any => "Any".into(),
            Ty::Str => "str".into(),
            Ty::Num => "int".into(),
            Ty::Bool => "bool".into(),
            Ty::Null => "None".into(),
            Ty::Lit(v) => format!("Literal[{}]", literal(v)),
            Ty::Named(n) => format!("\"{n}\""),
            Ty::Array(t) => format!("List[{}]", self.expr(hint, t)),
            Ty::Map(t) => format!("Dict[str, {}]", self.expr(hint, t)),
            Ty::Union(items) => {
                let nullable = items.contains(&Ty::Null);
                let items: Vec<&Ty> = items.iter().filter(|t| **t != Ty::Null).collect();
                let inner = if items.iter().all(|t| matches!(t, Ty::Lit(_))) {
                    let lits: Vec<String> = items
                        .iter()
                        .map(|t| match t {
                            Ty::Lit(v) => literal(v),
                            _ => unreachable!(),
                        })
                        .collect();
                    format!("Literal[{}]", lits.join(", "))
                } else {
                    let parts: Vec<String> = items
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            let name = tag_name(t).unwrap_or_else(|| format!("{i}"));
                            self.expr(&format!("{hint}{name}"), t)
                        })
                        .collect();
                    if parts.len() == 1 {
                        parts[0].clone()
                    } else {
                        format!("Union[{}]", parts.join(", "))
                    }
                };
                if nullable {
                    format!("Optional[{inner}]")
                } else {
                    inner
                }
            }
            Ty::Object(o) => {
                self.class(hint, &[], o, None);
                format!("\"{hint}\"")
            }
            Ty::And(parts) => {
                // An envelope beside a union (TraceEvent: its fields and the typed payload):
                // one class per variant, each with the envelope's fields.
                if let Some(pos) = parts.iter().position(|p| matches!(p, Ty::Union(_))) {
                    let Ty::Union(variants) = &parts[pos] else {
                        unreachable!()
                    };
                    let rest: Vec<Ty> = parts
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != pos)
                        .map(|(_, p)| p.clone())
                        .collect();
                    let distributed: Vec<Ty> = variants
                        .iter()
                        .map(|v| {
                            let mut all = rest.clone();
                            all.push(v.clone());
                            Ty::And(all)
                        })
                        .collect();
                    return self.expr(hint, &Ty::Union(distributed));
                }
                // Named parts are the bases, object parts the class's own fields.
                let mut bases = Vec::new();
                let mut own = Obj {
                    fields: Vec::new(),
                    open: true,
                    doc: None,
                };
                for p in parts {
                    match p {
                        Ty::Named(n) => bases.push(n.clone()),
                        Ty::Object(o) => own.fields.extend(o.fields.iter().cloned()),
                        other => panic!("{hint}: cannot combine {other:?}"),
                    }
                }
                for b in &bases {
                    assert!(
                        self.defined.contains(b),
                        "{hint}: base {b} must be a plain object"
                    );
                }
                self.class(hint, &bases, &own, None);
                format!("\"{hint}\"")
            }
        }
    }
}

fn literal(v: &Value) -> String {
    match v {
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}
