//! The `type` strings of an adjacently tagged enum (`#[serde(tag = "type", content = "data")]`),
//! read from serde itself so that no list of them is kept by hand.

use serde::de::{self, DeserializeOwned, IntoDeserializer};
use serde::Serialize;
use std::fmt;

/// The tags `T` accepts: serde names them all when it refuses an unknown one, so this offers it
/// a tag no variant has and keeps the list from the refusal.
pub(super) fn tags_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let line = [("type", "\u{0}")].into_iter().map(|(k, v)| {
        (
            IntoDeserializer::<Refusal>::into_deserializer(k),
            IntoDeserializer::<Refusal>::into_deserializer(v),
        )
    });
    let map = de::value::MapDeserializer::new(line);
    match T::deserialize(map) {
        Err(Refusal(Some(tags))) => tags,
        _ => &[],
    }
}

/// The tag `value` is written with, as one of `tags` (empty if none: cannot happen for a value
/// of the enum the tags were read from).
pub(super) fn tag_of<T: Serialize>(value: &T, tags: &'static [&'static str]) -> &'static str {
    let written = serde_json::to_value(value).ok();
    let tag = written
        .as_ref()
        .and_then(|line| line.get("type"))
        .and_then(|t| t.as_str());
    tags.iter().copied().find(|t| Some(*t) == tag).unwrap_or("")
}

/// A deserialization error that remembers the variants an unknown tag was refused against.
#[derive(Debug)]
struct Refusal(Option<&'static [&'static str]>);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a variant")
    }
}

impl std::error::Error for Refusal {}

impl de::Error for Refusal {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Refusal(None)
    }

    fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
        Refusal(Some(expected))
    }
}
