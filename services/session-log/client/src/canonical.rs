//! Canonical JSON (RFC 8785, JCS) and the content digest used for idempotency.
//!
//! Two requests carry "the same content" when their canonical forms are byte-identical, so key
//! order and number spelling (`1.0` vs `1`) in the client's serializer do not matter.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// RFC 8785 canonical bytes of `value`.
pub fn canonical_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| format!("cannot canonicalize JSON: {e}"))
}

/// `sha256:<hex>` of the canonical bytes of `value`.
pub fn digest<T: Serialize>(value: &T) -> Result<String, String> {
    Ok(digest_bytes(&canonical_bytes(value)?))
}

/// `sha256:<hex>` of already canonical bytes.
pub fn digest_bytes(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_number_spelling_do_not_change_the_digest() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b":1.0,"a":[1e2,"x"]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{"a":[100,"x"],"b":1}"#).unwrap();
        assert_eq!(canonical_bytes(&a).unwrap(), br#"{"a":[100,"x"],"b":1}"#);
        assert_eq!(digest(&a).unwrap(), digest(&b).unwrap());
        assert_ne!(
            digest(&json!({"a": 1})).unwrap(),
            digest(&json!({"a": 2})).unwrap()
        );
    }

    #[test]
    fn strings_are_escaped_per_rfc8785() {
        let v = json!({"s": "\u{1f}é\"\\/"});
        assert_eq!(
            String::from_utf8(canonical_bytes(&v).unwrap()).unwrap(),
            "{\"s\":\"\\u001fé\\\"\\\\/\"}"
        );
    }
}
