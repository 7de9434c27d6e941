//! Store keys: relative slash paths, validated once at construction so that no backend ever sees a
//! key that could escape its root (`..`, absolute paths), alias another (`.`, empty segments,
//! backslashes) or be truncated by C APIs (NUL).

use std::fmt;

/// Longest accepted key, in bytes. Keeps file paths well under PATH_MAX and index entries small.
pub const MAX_KEY_BYTES: usize = 512;
/// Longest accepted segment, in bytes (below NAME_MAX = 255 with room for the `.json` suffix).
pub const MAX_SEGMENT_BYTES: usize = 128;
/// Deepest accepted key.
pub const MAX_KEY_DEPTH: usize = 16;

/// Why a key or segment was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid key {key:?}: {reason}")]
pub struct KeyError {
    pub key: String,
    pub reason: &'static str,
}

/// A validated relative key such as `ledgers/tasks/t1`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// Parses and validates a slash-separated key.
    pub fn new(raw: &str) -> Result<Key, KeyError> {
        let err = |reason| KeyError {
            key: raw.to_string(),
            reason,
        };
        if raw.is_empty() {
            return Err(err("empty key"));
        }
        if raw.len() > MAX_KEY_BYTES {
            return Err(err("key longer than 512 bytes"));
        }
        if raw.starts_with('/') {
            return Err(err("absolute keys are not allowed"));
        }
        let mut depth = 0;
        for segment in raw.split('/') {
            check_segment(segment).map_err(err)?;
            depth += 1;
        }
        if depth > MAX_KEY_DEPTH {
            return Err(err("key deeper than 16 segments"));
        }
        Ok(Key(raw.to_string()))
    }

    /// Appends one segment (which must itself be a valid single segment: no `/`).
    pub fn join(&self, segment: &str) -> Result<Key, KeyError> {
        validate_segment(segment)?;
        Key::new(&format!("{}/{}", self.0, segment))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Segments of the key, in order.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last segment.
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// Everything before the last segment, if any.
    pub fn parent(&self) -> Option<Key> {
        self.0.rsplit_once('/').map(|(p, _)| Key(p.to_string()))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", self.0)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Validates a single segment: a user-supplied id (task id, queue name, session id, result key)
/// must pass this before it becomes part of a key, so `a/b` cannot address another document.
pub fn validate_segment(segment: &str) -> Result<(), KeyError> {
    check_segment(segment).map_err(|reason| KeyError {
        key: segment.to_string(),
        reason,
    })
}

fn check_segment(segment: &str) -> Result<(), &'static str> {
    if segment.is_empty() {
        return Err("empty segment");
    }
    if segment.len() > MAX_SEGMENT_BYTES {
        return Err("segment longer than 128 bytes");
    }
    if segment == "." || segment == ".." {
        return Err("`.` and `..` segments are not allowed");
    }
    if segment.starts_with('.') {
        // Leading dots are reserved for the file backend's temp and lock files.
        return Err("segments must not start with `.`");
    }
    if segment.ends_with(".json") {
        // The file backend stores document `x` as `x.json`; a directory named `x.json` would collide.
        return Err("segments must not end with `.json`");
    }
    for c in segment.chars() {
        match c {
            '/' => return Err("`/` is not allowed inside a segment"),
            '\0' => return Err("NUL is not allowed"),
            '\\' => return Err("backslash is not allowed"),
            c if c.is_control() => return Err("control characters are not allowed"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_keys() {
        for k in ["a", "ledgers/tasks/t-1", "q/0001-abc_def:x@y", "ünïcode/é"] {
            assert_eq!(Key::new(k).unwrap().as_str(), k);
        }
    }

    #[test]
    fn rejects_escaping_and_aliasing_keys() {
        let long = "x".repeat(129);
        let deep = vec!["a"; 17].join("/");
        let cases = [
            ("", "empty key"),
            ("/etc/passwd", "absolute"),
            ("a//b", "empty segment"),
            ("a/", "empty segment"),
            ("a/../b", "`.` and `..`"),
            ("..", "`.` and `..`"),
            ("./a", "`.` and `..`"),
            ("a/.hidden", "start with `.`"),
            ("a\0b", "NUL"),
            ("a\\b", "backslash"),
            ("a/b.json", "`.json`"),
            ("a\nb", "control"),
            (long.as_str(), "longer than 128"),
            (deep.as_str(), "deeper than 16"),
        ];
        for (raw, want) in cases {
            let err = Key::new(raw).unwrap_err();
            assert!(err.to_string().contains(want), "{raw:?}: {err}");
        }
        assert!(Key::new(&"a/".repeat(300))
            .unwrap_err()
            .to_string()
            .contains("512"));
    }

    #[test]
    fn segments_cannot_smuggle_slashes() {
        let root = Key::new("root").unwrap();
        assert!(root.join("a/b").is_err());
        assert!(root.join("..").is_err());
        assert_eq!(root.join("a").unwrap().as_str(), "root/a");
        assert_eq!(Key::new("a/b/c").unwrap().parent().unwrap().as_str(), "a/b");
        assert_eq!(Key::new("a/b/c").unwrap().name(), "c");
    }
}
