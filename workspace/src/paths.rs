//! Path rules shared by the sender and the receiver. Archive names are harness paths without the
//! leading slash (`session/a.txt`); everything here is lexical, so it can be checked before a
//! single byte reaches the filesystem.

use super::error::EntryRejection;
use std::path::{Component, Path, PathBuf};

/// Runtime-owned names that never travel in an archive or show up in file events. A name matches
/// any path component under a mount (e.g. `.kube-harness` excludes `/session/.kube-harness/**`).
/// The default excludes nothing; the runtime passes its own names here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclude {
    names: Vec<String>,
}

impl Exclude {
    pub fn names<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Exclude {
            names: names.into_iter().map(Into::into).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether any component of `path` is an excluded name.
    pub fn matches(&self, path: &Path) -> bool {
        !self.names.is_empty()
            && path.components().any(
                |c| matches!(c, Component::Normal(n) if self.names.iter().any(|x| n == x.as_str())),
            )
    }
}

/// `/session/a` -> `session/a`. `None` when the path is not absolute, not canonical, or not UTF-8.
pub fn archive_name(harness: &Path) -> Option<String> {
    let rel = harness.strip_prefix("/").ok()?;
    let s = rel.to_str()?;
    parse_archive_path(s.as_bytes()).ok()?;
    Some(s.to_owned())
}

/// `session/a` -> `/session/a`.
pub fn harness_path(rel: &Path) -> PathBuf {
    Path::new("/").join(rel)
}

/// Validates a raw archive name: UTF-8, relative, only normal components (one trailing `/`
/// tolerated for directories). Returns the relative path.
pub fn parse_archive_path(raw: &[u8]) -> Result<PathBuf, EntryRejection> {
    let s = std::str::from_utf8(raw).map_err(|_| EntryRejection::NotUtf8)?;
    if s.starts_with('/') {
        return Err(EntryRejection::AbsolutePath);
    }
    let s = s.strip_suffix('/').unwrap_or(s);
    if s.is_empty() || s.contains('\0') {
        return Err(EntryRejection::NonCanonical);
    }
    let mut out = PathBuf::new();
    for part in s.split('/') {
        match part {
            ".." => return Err(EntryRejection::ParentDir),
            "" | "." => return Err(EntryRejection::NonCanonical),
            p => out.push(p),
        }
    }
    Ok(out)
}

/// The relative mount root (`session`) that contains `rel`, if any.
pub fn mount_of<'m>(rel: &Path, mounts: &'m [PathBuf]) -> Option<&'m PathBuf> {
    mounts
        .iter()
        .filter(|m| rel.starts_with(m))
        .max_by_key(|m| m.components().count())
}

/// A symlink at `link` (relative archive path) may point at `target` only if the target is
/// relative, its `..` components all come first (so they climb real directories, never through
/// another symlink), and it lands inside one of `mounts`. Absolute targets are refused even when
/// they name a harness path: the receiver's root is not `/`.
pub fn check_symlink_target(
    link: &Path,
    target: &[u8],
    mounts: &[PathBuf],
) -> Result<String, EntryRejection> {
    let t = std::str::from_utf8(target).map_err(|_| EntryRejection::NotUtf8)?;
    let outside = || EntryRejection::SymlinkOutside(t.to_owned());
    if t.is_empty() || t.starts_with('/') || t.contains('\0') {
        return Err(outside());
    }
    let mut resolved: Vec<&str> = link
        .parent()
        .map(|p| p.iter().map(|c| c.to_str().unwrap_or("")).collect())
        .unwrap_or_default();
    let mut descended = false;
    for part in t.split('/') {
        match part {
            "" | "." => {}
            ".." if descended => return Err(outside()),
            ".." => {
                resolved.pop().ok_or_else(outside)?;
            }
            p => {
                descended = true;
                resolved.push(p);
            }
        }
    }
    let resolved: PathBuf = resolved.iter().collect();
    match mount_of(&resolved, mounts) {
        Some(_) => Ok(t.to_owned()),
        None => Err(outside()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn archive_paths() {
        assert_eq!(
            parse_archive_path(b"session/a/b").unwrap(),
            Path::new("session/a/b")
        );
        assert_eq!(
            parse_archive_path(b"session/d/").unwrap(),
            Path::new("session/d")
        );
        assert_eq!(
            parse_archive_path(b"/etc/x"),
            Err(EntryRejection::AbsolutePath)
        );
        assert_eq!(
            parse_archive_path(b"session/../x"),
            Err(EntryRejection::ParentDir)
        );
        assert_eq!(
            parse_archive_path(b"./session"),
            Err(EntryRejection::NonCanonical)
        );
        assert_eq!(
            parse_archive_path(b"a//b"),
            Err(EntryRejection::NonCanonical)
        );
        assert_eq!(parse_archive_path(b"\xff"), Err(EntryRejection::NotUtf8));
        assert_eq!(archive_name(Path::new("/session/é")).unwrap(), "session/é");
        assert_eq!(archive_name(Path::new("session")), None);
    }

    #[test]
    fn symlink_targets() {
        let m = vec![PathBuf::from("session"), PathBuf::from("artifacts")];
        let link = Path::new("session/sub/l");
        assert!(check_symlink_target(link, b"x", &m).is_ok());
        assert!(check_symlink_target(link, b"../x", &m).is_ok());
        assert!(check_symlink_target(link, b"../../artifacts/r", &m).is_ok());
        for bad in [
            &b"/etc"[..],
            b"../../x",
            b"../../../etc",
            b"a/../../..",
            b"",
            b"../../",
        ] {
            assert!(check_symlink_target(link, bad, &m).is_err(), "{:?}", bad);
        }
    }

    #[test]
    fn exclude_matches_components() {
        let e = Exclude::names([".kube-harness"]);
        assert!(e.matches(Path::new("/session/.kube-harness/x")));
        assert!(!e.matches(Path::new("/session/.kube-harness2")));
        assert!(!Exclude::default().matches(Path::new("/session/x")));
    }
}
