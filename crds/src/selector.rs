//! Label selectors a tenant writes into a HarnessSession and the operator copies into the
//! session's NetworkPolicy (`spec.access.clients`): the standard LabelSelector, bounded in count
//! and size so that one session cannot make an object the API server (or the operator's memory)
//! carries megabytes of (issue 30: a 1.34 MB list became a 2.1 MB NetworkPolicy).

use schemars::{json_schema, Schema, SchemaGenerator};

/// Most `matchLabels` entries of one selector.
pub const MAX_MATCH_LABELS: u32 = 8;
/// Most `matchExpressions` of one selector.
pub const MAX_MATCH_EXPRESSIONS: u32 = 4;
/// Most values of one expression.
pub const MAX_VALUES: u32 = 8;
/// A label key: an optional DNS-subdomain prefix (253), '/', a name (63).
pub const MAX_KEY: u32 = 317;
/// A label value.
pub const MAX_VALUE: u32 = 63;

fn bounded(description: &str) -> Schema {
    json_schema!({
        "description": description,
        "nullable": true,
        "type": "object",
        "properties": {
            "matchLabels": {
                "description": "Labels the selected objects carry, all of them (at most 8).",
                "type": "object",
                "maxProperties": MAX_MATCH_LABELS,
                "additionalProperties": {"type": "string", "maxLength": MAX_VALUE},
            },
            "matchExpressions": {
                "description": "Requirements the selected objects meet, all of them (at most 4).",
                "type": "array",
                "maxItems": MAX_MATCH_EXPRESSIONS,
                "items": {
                    "description": "One requirement: a key, an operator and (for In and NotIn) at most 8 values.",
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"description": "The label key.", "type": "string", "maxLength": MAX_KEY},
                        "operator": {
                            "description": "In, NotIn, Exists or DoesNotExist.",
                            "type": "string",
                            "enum": ["In", "NotIn", "Exists", "DoesNotExist"],
                        },
                        "values": {
                            "description": "The values (In and NotIn: at least one; Exists and DoesNotExist: none).",
                            "type": "array",
                            "maxItems": MAX_VALUES,
                            "items": {"type": "string", "maxLength": MAX_VALUE},
                        },
                    },
                },
            },
        },
    })
}

/// `access.clients[].podSelector`.
pub fn bounded_pods(_: &mut SchemaGenerator) -> Schema {
    bounded("Pods admitted (in the session's namespace unless namespaceSelector is set).")
}

/// `access.clients[].namespaceSelector`.
pub fn bounded_namespaces(_: &mut SchemaGenerator) -> Schema {
    bounded("Namespaces whose pods are admitted (all of their pods unless podSelector is set).")
}
