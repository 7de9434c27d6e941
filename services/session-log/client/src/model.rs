//! The wire model of `lh.remote-session.v1`: run ids, append requests and stored events, with the
//! validation every store relies on (a store never sees an unvalidated event).

use crate::canonical;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest accepted run id, idempotency key, occurrence id or event type (characters).
pub const MAX_ID_LEN: usize = 200;
/// Default limit on a payload's canonical size. Larger content belongs in an immutable artifact
/// referenced from the payload (`contentRef`), not in the log.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// Most events a read page holds (`limit` of `GET /v1/runs/{runId}/events` is 1..=this).
pub const MAX_READ_LIMIT: usize = 1000;

/// A validated run id: 1..=200 characters of `[A-Za-z0-9._:-]`, starting with a letter or digit,
/// with no `..`.
///
/// No `/`, `\`, `%` or whitespace, so a run id can never address anything but its own run, in a
/// URL, a file name or a log line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RunId(String);

impl RunId {
    /// A run id a request names: the characters below, and no `..` anywhere (the docs always
    /// said so; `a..b` was accepted until issue 30).
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let id = Self::parse_stored(raw)?;
        if raw.contains("..") {
            return Err(ValidationError::new(
                "invalid-run-id",
                "runId must not contain \"..\"".to_string(),
            ));
        }
        Ok(id)
    }

    /// A run id read back from a store: the character rule only, so runs stored before `..`
    /// was refused stay readable rather than making the file store refuse to load.
    pub fn parse_stored(raw: &str) -> Result<Self, ValidationError> {
        let ok_first = raw
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        let ok_rest = raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
        if raw.is_empty() || raw.len() > MAX_ID_LEN || !ok_first || !ok_rest {
            return Err(ValidationError::new(
                "invalid-run-id",
                format!(
                    "runId must be 1..={MAX_ID_LEN} characters of [A-Za-z0-9._:-] starting with a letter or digit"
                ),
            ));
        }
        Ok(Self(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The body of `POST /v1/runs/{runId}/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventInput {
    /// Chosen by the caller before the first transport attempt; retries reuse it.
    pub append_idempotency_key: String,
    /// Causal grouping only (several lifecycle events may share one); never deduplicated on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: String,
    /// A JSON object. Missing or `null` is refused.
    #[serde(default)]
    pub payload: Value,
}

/// An event as stored and returned: the input plus what the server assigned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredEvent {
    pub run_id: String,
    /// Gapless per run, starting at 1, assigned by the server.
    pub sequence: u64,
    pub append_idempotency_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence_id: Option<String>,
    #[serde(rename = "type")]
    pub event_type: String,
    pub payload: Map<String, Value>,
    /// `sha256:<hex>` of the canonical JSON of `{occurrenceId?, type, payload}`.
    pub digest: String,
    /// Server wall clock at commit, milliseconds since the Unix epoch (informational).
    pub recorded_at_ms: u64,
}

/// A validated input with its digest: what the stores append.
#[derive(Debug, Clone)]
pub struct PreparedEvent {
    pub key: String,
    pub occurrence_id: Option<String>,
    pub event_type: String,
    pub payload: Map<String, Value>,
    pub digest: String,
}

impl PreparedEvent {
    /// Validates `input` against the limits and computes its digest.
    pub fn new(input: EventInput, max_payload_bytes: usize) -> Result<Self, ValidationError> {
        check_id("appendIdempotencyKey", &input.append_idempotency_key)?;
        if let Some(occ) = &input.occurrence_id {
            check_id("occurrenceId", occ)?;
        }
        check_id("type", &input.event_type)?;
        let Value::Object(payload) = input.payload else {
            return Err(ValidationError::new(
                "invalid-event",
                "payload is required and must be a JSON object",
            ));
        };
        let payload_bytes = canonical::canonical_bytes(&payload)
            .map_err(|e| ValidationError::new("invalid-event", e))?;
        if payload_bytes.len() > max_payload_bytes {
            return Err(ValidationError::new(
                "payload-too-large",
                format!(
                    "payload is {} bytes (canonical JSON), over the limit of {max_payload_bytes}; store large content as an immutable artifact and put its reference (contentRef) in the payload",
                    payload_bytes.len()
                ),
            ));
        }
        let digest = content_digest(input.occurrence_id.as_deref(), &input.event_type, &payload)
            .map_err(|e| ValidationError::new("invalid-event", e))?;
        Ok(Self {
            key: input.append_idempotency_key,
            occurrence_id: input.occurrence_id,
            event_type: input.event_type,
            payload,
            digest,
        })
    }

    /// The stored form of this event at `sequence` in `run`.
    pub fn to_stored(&self, run: &RunId, sequence: u64) -> StoredEvent {
        StoredEvent {
            run_id: run.as_str().to_string(),
            sequence,
            append_idempotency_key: self.key.clone(),
            occurrence_id: self.occurrence_id.clone(),
            event_type: self.event_type.clone(),
            payload: self.payload.clone(),
            digest: self.digest.clone(),
            recorded_at_ms: now_ms(),
        }
    }
}

/// The digest that decides whether a retried key carries the same content.
pub fn content_digest(
    occurrence_id: Option<&str>,
    event_type: &str,
    payload: &Map<String, Value>,
) -> Result<String, String> {
    /// Borrows the fields: no copy of the payload on the append path.
    #[derive(Serialize)]
    struct Content<'a> {
        #[serde(rename = "occurrenceId", skip_serializing_if = "Option::is_none")]
        occurrence_id: Option<&'a str>,
        #[serde(rename = "type")]
        event_type: &'a str,
        payload: &'a Map<String, Value>,
    }
    canonical::digest(&Content {
        occurrence_id,
        event_type,
        payload,
    })
}

fn check_id(field: &str, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() || value.chars().count() > MAX_ID_LEN || value.chars().any(char::is_control)
    {
        return Err(ValidationError::new(
            "invalid-event",
            format!("{field} must be 1..={MAX_ID_LEN} characters without control characters"),
        ));
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A request that breaks a rule of the protocol; `code` is the stable error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ValidationError {
    pub code: &'static str,
    pub message: String,
}

impl ValidationError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(v: Value) -> EventInput {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn run_ids_refuse_path_characters() {
        for ok in ["run_123", "a", "A.b:c-d_e", &"x".repeat(200)] {
            assert!(RunId::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "../x",
            "a..b",
            "a/b",
            "a\\b",
            ".hidden",
            "a b",
            "a%2Fb",
            "é",
            &"x".repeat(201),
        ] {
            assert_eq!(
                RunId::parse(bad).unwrap_err().code,
                "invalid-run-id",
                "{bad}"
            );
        }
    }

    #[test]
    fn payload_must_be_an_object_within_the_limit() {
        let missing = input(json!({"appendIdempotencyKey": "k", "type": "t"}));
        assert_eq!(
            PreparedEvent::new(missing, 100).unwrap_err().code,
            "invalid-event"
        );
        let big = input(
            json!({"appendIdempotencyKey": "k", "type": "t", "payload": {"s": "x".repeat(200)}}),
        );
        assert_eq!(
            PreparedEvent::new(big, 100).unwrap_err().code,
            "payload-too-large"
        );
        let ok = input(json!({"appendIdempotencyKey": "k", "type": "t", "payload": {"s": 1}}));
        assert!(PreparedEvent::new(ok, 100).is_ok());
    }

    #[test]
    fn digest_ignores_key_but_not_content() {
        let a = PreparedEvent::new(
            input(json!({"appendIdempotencyKey": "k1", "type": "t", "payload": {"a": 1.0}})),
            1000,
        )
        .unwrap();
        let b = PreparedEvent::new(
            input(json!({"appendIdempotencyKey": "k2", "type": "t", "payload": {"a": 1}})),
            1000,
        )
        .unwrap();
        let c = PreparedEvent::new(
            input(json!({"appendIdempotencyKey": "k1", "occurrenceId": "o", "type": "t", "payload": {"a": 1}})),
            1000,
        )
        .unwrap();
        assert_eq!(a.digest, b.digest);
        assert_ne!(a.digest, c.digest);
    }

    #[test]
    fn digest_is_sha256_of_the_canonical_content() {
        let payload = match json!({"b": 1.0, "a": "x"}) {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let expected = crate::canonical::digest_bytes(
            br#"{"occurrenceId":"o","payload":{"a":"x","b":1},"type":"t"}"#,
        );
        assert_eq!(content_digest(Some("o"), "t", &payload).unwrap(), expected);
        let expected = crate::canonical::digest_bytes(br#"{"payload":{"a":"x","b":1},"type":"t"}"#);
        assert_eq!(content_digest(None, "t", &payload).unwrap(), expected);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<EventInput, _> = serde_json::from_value(
            json!({"appendIdempotencyKey": "k", "type": "t", "payload": {}, "sequence": 5}),
        );
        assert!(r.is_err());
    }
}
