//! One line of the file store: `{"crc32c":"<8 hex>","event":<canonical event JSON>}\n`.
//!
//! The checksum covers the exact event bytes on disk, so verification needs no re-serialization,
//! and the line is still plain NDJSON for `jq`. Any byte flipped inside a complete line is caught.

use crate::canonical::canonical_bytes;
use crate::model::{RunId, StoredEvent};

const PREFIX: &[u8] = b"{\"crc32c\":\"";
const MIDDLE: &[u8] = b"\",\"event\":";
const SUFFIX: &[u8] = b"}";

/// The complete line (with its newline) for `event`.
pub fn encode(event: &StoredEvent) -> Result<Vec<u8>, String> {
    let body = canonical_bytes(event)?;
    let crc = crc32c::crc32c(&body);
    let mut line = Vec::with_capacity(body.len() + 40);
    line.extend_from_slice(PREFIX);
    line.extend_from_slice(format!("{crc:08x}").as_bytes());
    line.extend_from_slice(MIDDLE);
    line.extend_from_slice(&body);
    line.extend_from_slice(SUFFIX);
    line.push(b'\n');
    Ok(line)
}

/// A complete line that failed verification, attributed to its run when the run can be read.
#[derive(Debug, PartialEq)]
pub struct BadRecord {
    pub run: Option<String>,
    pub reason: String,
}

/// Verifies and parses one complete line (without its newline).
pub fn decode(line: &[u8]) -> Result<StoredEvent, BadRecord> {
    let bad = |run: Option<String>, reason: String| BadRecord { run, reason };
    let framed = line.len() >= PREFIX.len() + 8 + MIDDLE.len() + SUFFIX.len()
        && line.starts_with(PREFIX)
        && line.ends_with(SUFFIX)
        && &line[PREFIX.len() + 8..PREFIX.len() + 8 + MIDDLE.len()] == MIDDLE;
    if !framed {
        return Err(bad(
            guess_run(line),
            "malformed record (not a {\"crc32c\",\"event\"} line)".into(),
        ));
    }
    let crc_hex = &line[PREFIX.len()..PREFIX.len() + 8];
    let body = &line[PREFIX.len() + 8 + MIDDLE.len()..line.len() - SUFFIX.len()];
    // Exactly the 8 lowercase hex digits `encode` writes: `A` for `a` is damage too.
    let expected = crc_hex
        .iter()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        .then(|| std::str::from_utf8(crc_hex).ok())
        .flatten()
        .and_then(|s| u32::from_str_radix(s, 16).ok());
    let actual = crc32c::crc32c(body);
    if expected != Some(actual) {
        return Err(bad(
            guess_run(body),
            format!(
                "checksum mismatch (stored {}, computed {actual:08x})",
                String::from_utf8_lossy(crc_hex)
            ),
        ));
    }
    let event: StoredEvent = serde_json::from_slice(body).map_err(|e| {
        bad(
            guess_run(body),
            format!("record does not hold an event: {e}"),
        )
    })?;
    if RunId::parse_stored(&event.run_id).is_err() {
        return Err(bad(
            None,
            format!("record has an invalid runId {:?}", event.run_id),
        ));
    }
    Ok(event)
}

/// Best effort: the run a damaged record belongs to, if its JSON still parses that far.
fn guess_run(bytes: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let run = value
        .get("runId")
        .or_else(|| value.get("event").and_then(|e| e.get("runId")))?
        .as_str()?;
    RunId::parse_stored(run)
        .ok()
        .map(|r| r.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn event() -> StoredEvent {
        StoredEvent {
            run_id: "r1".into(),
            sequence: 1,
            append_idempotency_key: "k".into(),
            occurrence_id: None,
            event_type: "t".into(),
            payload: Map::new(),
            digest: "sha256:00".into(),
            recorded_at_ms: 5,
        }
    }

    #[test]
    fn round_trips() {
        let line = encode(&event()).unwrap();
        assert_eq!(*line.last().unwrap(), b'\n');
        assert_eq!(decode(&line[..line.len() - 1]).unwrap(), event());
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let line = encode(&event()).unwrap();
        let line = &line[..line.len() - 1];
        for i in 0..line.len() {
            for bit in 0..8 {
                let mut damaged = line.to_vec();
                damaged[i] ^= 1 << bit;
                assert!(
                    decode(&damaged).is_err(),
                    "flip of bit {bit} at {i} went unnoticed"
                );
            }
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e15f64..1e15).prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn any_payload_round_trips_and_any_flipped_byte_is_caught(
            payload in proptest::collection::btree_map(".{0,8}", json_value(), 0..6),
            flip in proptest::num::usize::ANY,
            bit in 0u8..8,
        ) {
            let mut e = event();
            e.payload = payload.into_iter().collect();
            let line = encode(&e).unwrap();
            let line = &line[..line.len() - 1];
            let decoded = decode(line).unwrap();
            // Numbers may change spelling (2.0 -> 2) but never canonical meaning.
            proptest::prop_assert_eq!(canonical_bytes(&decoded).unwrap(), canonical_bytes(&e).unwrap());
            let mut damaged = line.to_vec();
            let i = flip % damaged.len();
            damaged[i] ^= 1 << bit;
            proptest::prop_assert!(decode(&damaged).is_err(), "flip of bit {} at {} unnoticed", bit, i);
        }
    }

    #[test]
    fn damaged_records_name_their_run_when_possible() {
        let line = encode(&event()).unwrap();
        let text = String::from_utf8(line[..line.len() - 1].to_vec()).unwrap();
        let damaged = text.replace("\"type\":\"t\"", "\"type\":\"u\"");
        assert_eq!(
            decode(damaged.as_bytes()).unwrap_err().run.as_deref(),
            Some("r1")
        );
        assert_eq!(decode(b"garbage").unwrap_err().run, None);
    }
}
