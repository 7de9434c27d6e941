//! Persistent Dirs on the local host (`localDir` / `projectDir` of the seed): a backing folder
//! loaded into the session's `persistent/` checkout before a turn and committed back by policy.
//!
//! Path rules: a data-dir source is a relative path inside the data directory (absolute paths, `..`,
//! the data directory itself, its `sessions/` folder, or anything resolving outside it, through
//! symlinks too, are path errors); a project source must resolve inside the project root. On a
//! path error nothing is written.
//!
//! Host-side access: the checkout lives in the session's `/persistent` mount, which commands
//! write. Its path below the mount root is walked without following symlinks, and every copy
//! (load, after-turn commit, manual commit) goes through `workspace::safe_fs`: a symlink in the
//! tree is copied as a symlink, never through, and a checkout a command replaced by a symlink
//! is refused rather than followed (docs/security-model.md, "Host-side file access").
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::data_dir::{io, LocalError, SessionDir};
use kube_harness_workspace::safe_fs::{self, WalkError};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// When a Persistent Dir's session writes reach its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPolicy {
    /// Loaded into the session; writes to it fail immediately (a read-only prefix).
    ReadOnly,
    /// Committed back to the source when the turn finishes.
    AfterTurn,
    /// Kept per turn under `manual-commits/<turn>/` until `kube-harness local commit`.
    Manual,
}

/// Where a Persistent Dir's files live outside the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Relative to the data directory (`persistent/users/u1/memory`).
    DataDir(PathBuf),
    /// Relative to the project root (`projectDir("./docs")`).
    Project(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentDir {
    /// Where the agent sees it, under `/persistent` (`/persistent/user`).
    pub harness_dir: PathBuf,
    pub source: Source,
    pub commit: CommitPolicy,
}

fn path_error(msg: String) -> LocalError {
    LocalError::Path(msg)
}

impl PersistentDir {
    /// Parses `HARNESS_DIR=SOURCE[:POLICY]`, e.g. `/persistent/user=persistent/users/u1:after-turn`
    /// or `/persistent/docs=project:./docs:read-only`. The policy defaults to `after-turn`.
    pub fn parse(spec: &str) -> Result<Self, LocalError> {
        let (harness, rest) = spec
            .split_once('=')
            .ok_or_else(|| path_error(format!("{spec:?}: expected HARNESS_DIR=SOURCE[:POLICY]")))?;
        let (source, policy) = match rest.rsplit_once(':') {
            Some((source, p @ ("read-only" | "after-turn" | "manual"))) => (source, p),
            _ => (rest, "after-turn"),
        };
        let commit = match policy {
            "read-only" => CommitPolicy::ReadOnly,
            "manual" => CommitPolicy::Manual,
            _ => CommitPolicy::AfterTurn,
        };
        let source = match source.strip_prefix("project:") {
            Some(p) => Source::Project(PathBuf::from(p)),
            None => Source::DataDir(PathBuf::from(source)),
        };
        let harness_dir = PathBuf::from(harness);
        let under_persistent = harness_dir.starts_with("/persistent")
            && harness_dir != Path::new("/persistent")
            && harness_dir
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !under_persistent {
            return Err(path_error(format!(
                "harness dir {harness:?} must be a plain path under /persistent/"
            )));
        }
        Ok(PersistentDir {
            harness_dir,
            source,
            commit,
        })
    }

    /// The backing folder, checked against the path rules. Creates nothing.
    pub fn resolve(&self, data_dir: &Path, project_root: &Path) -> Result<PathBuf, LocalError> {
        match &self.source {
            Source::DataDir(rel) => {
                let plain = !rel.as_os_str().is_empty()
                    && rel
                        .components()
                        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
                    && rel.components().any(|c| matches!(c, Component::Normal(_)));
                if !plain {
                    return Err(path_error(format!(
                        "source {} must be a relative path inside the data directory (no absolute path, no '..', not the data directory itself)",
                        rel.display()
                    )));
                }
                let path = data_dir.join(rel);
                let first = rel.components().find(|c| matches!(c, Component::Normal(_)));
                if first == Some(Component::Normal(OsStr::new("sessions"))) {
                    return Err(path_error(format!(
                        "source {} is inside the data directory's sessions/ folder, which commands write",
                        rel.display()
                    )));
                }
                check_inside(&path, data_dir, "the data directory")?;
                // Below the data directory, sources hold what sessions committed, symlinks
                // included: a source reached through one (`pd/mem/inner -> ../../sessions/x`)
                // would read or write wherever a command pointed it.
                let mut at = data_dir.to_path_buf();
                for c in rel.components() {
                    at.push(c);
                    match std::fs::symlink_metadata(&at) {
                        Ok(m) if m.file_type().is_symlink() => {
                            return Err(path_error(format!(
                                "source {} passes through the symlink {}",
                                rel.display(),
                                at.display()
                            )))
                        }
                        Ok(_) => {}
                        Err(_) => break, // not made yet: created as plain directories
                    }
                }
                Ok(path)
            }
            Source::Project(rel) => {
                let root = project_root.canonicalize().map_err(io(format!(
                    "resolving project root {}",
                    project_root.display()
                )))?;
                let path = normalize(&root.join(rel));
                if !path.starts_with(&root) {
                    return Err(path_error(format!(
                        "projectDir {} resolves outside the project root {}",
                        rel.display(),
                        root.display()
                    )));
                }
                check_inside(&path, &root, "the project root")?;
                Ok(path)
            }
        }
    }

    /// The session's checkout of this dir (what the agent sees at `harness_dir`), as a host path.
    /// Commands write below `persistent/`: copy to or from it with `checkout_place` and `mirror`.
    pub fn checkout(&self, session: &SessionDir) -> PathBuf {
        let place = self.checkout_place(session);
        place.root.join(place.rel)
    }

    /// The checkout as a `Place`: the session's `persistent/` mount root (host-made, trusted) and
    /// the path below it, which is walked without following symlinks.
    pub fn checkout_place(&self, session: &SessionDir) -> Place {
        let rel = self
            .harness_dir
            .strip_prefix("/persistent")
            .unwrap_or(&self.harness_dir);
        Place::below(session.root.join("persistent"), rel)
    }

    /// Where a `manual` commit of `turn_id` is kept (host-owned, outside every mount).
    pub fn pending_place(&self, session: &SessionDir, turn_id: &str) -> Place {
        let rel = self
            .harness_dir
            .strip_prefix("/persistent")
            .unwrap_or(&self.harness_dir);
        Place::trusted(session.root.join("manual-commits").join(turn_id).join(rel))
    }
}

/// A directory as a trusted root (made by the host, may be reached through symlinks) and a path
/// below it that a command may have changed (walked one component at a time, never through a
/// symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub root: PathBuf,
    pub rel: PathBuf,
}

impl Place {
    /// A host-owned directory: nothing on its path is written by commands.
    pub fn trusted(path: impl Into<PathBuf>) -> Place {
        Place {
            root: path.into(),
            rel: PathBuf::new(),
        }
    }

    /// `rel` (plain components) below the trusted `root`.
    pub fn below(root: impl Into<PathBuf>, rel: impl Into<PathBuf>) -> Place {
        Place {
            root: root.into(),
            rel: rel.into(),
        }
    }

    /// As a host path, for messages.
    pub fn path(&self) -> PathBuf {
        if self.rel.as_os_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(&self.rel)
        }
    }

    /// The trusted directory, the untrusted path to the parent below it, and the last name.
    fn split(&self) -> Option<(PathBuf, &Path, &OsStr)> {
        match safe_fs::split_last(&self.rel) {
            Some((parent, name)) => Some((self.root.clone(), parent, name)),
            None => Some((
                self.root.parent()?.to_path_buf(),
                Path::new(""),
                self.root.file_name()?,
            )),
        }
    }
}

/// Lexical `..` resolution (the path may not exist yet).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The deepest existing ancestor must canonicalize inside `root`: a symlink cannot lead out.
fn check_inside(path: &Path, root: &Path, what: &str) -> Result<(), LocalError> {
    let mut existing = path.to_path_buf();
    while !existing.exists() {
        if !existing.pop() {
            break;
        }
    }
    let real = existing
        .canonicalize()
        .map_err(io(format!("resolving {}", existing.display())))?;
    if !real.starts_with(root) || (real == root && existing == path) {
        return Err(path_error(format!(
            "{} resolves to {}, outside {what} {} (or to it itself)",
            path.display(),
            real.display(),
            root.display()
        )));
    }
    Ok(())
}

/// Replaces `to` with a copy of `from` (regular files, directories and symlinks, the latter as
/// symlinks; a missing `from` gives an empty `to`). The new tree is built beside `to` and renamed
/// into place. Nothing is read or written through a symlink below either place's trusted root: a
/// `from` that is a symlink (or not a directory) is a path error and `to` is left as it was; a
/// symlink or file where `to`'s parent directories should be is replaced by a directory.
pub fn mirror(from: &Place, to: &Place) -> Result<(), LocalError> {
    let shown_to = to.path();
    let (to_root, to_parent, name) = to
        .split()
        .ok_or_else(|| path_error(format!("{} has no parent", shown_to.display())))?;
    let src = open_source(from)?;
    fs::create_dir_all(&to_root).map_err(io(format!("creating {}", to_root.display())))?;
    let root_fd =
        safe_fs::open_root(&to_root).map_err(io(format!("opening {}", to_root.display())))?;
    let parent = safe_fs::ensure_dir_beneath(&root_fd, to_parent, 0o755, true)
        .map_err(|e| walk_error(&to_root.join(to_parent), e))?;
    let pid = std::process::id();
    let tag = name.to_string_lossy();
    let staging = OsString::from(format!(".{tag}.staging-{pid}"));
    let old = OsString::from(format!(".{tag}.old-{pid}"));
    let at_parent = |what: &str| io(format!("{what} in {}", to_root.join(to_parent).display()));
    safe_fs::remove_tree_at(&parent, &staging).map_err(at_parent("clearing a staging dir"))?;
    safe_fs::mkdir_at(&parent, &staging, 0o755).map_err(at_parent("creating a staging dir"))?;
    let filled = (|| {
        let dst = safe_fs::open_dir_at(&parent, &staging).map_err(WalkError::into_io)?;
        if let Some(src) = &src {
            safe_fs::copy_tree_at(src, &dst)?;
        }
        Ok(())
    })();
    if let Err(e) = filled {
        let _ = safe_fs::remove_tree_at(&parent, &staging);
        return Err(LocalError::Io {
            context: format!(
                "copying {} to {}",
                from.path().display(),
                shown_to.display()
            ),
            source: e,
        });
    }
    let swapped = (|| {
        safe_fs::remove_tree_at(&parent, &old)?;
        if safe_fs::stat_at(&parent, name)?.is_some() {
            safe_fs::rename_at(&parent, name, &old)?;
        }
        safe_fs::rename_at(&parent, &staging, name)
    })();
    if let Err(e) = swapped {
        let _ = safe_fs::remove_tree_at(&parent, &staging);
        return Err(LocalError::Io {
            context: format!("renaming into {}", shown_to.display()),
            source: e,
        });
    }
    let _ = safe_fs::remove_tree_at(&parent, &old);
    Ok(())
}

/// The directory to copy from: `None` when it does not exist (an empty copy).
fn open_source(from: &Place) -> Result<Option<OwnedFd>, LocalError> {
    let root = match safe_fs::open_root(&from.root) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(LocalError::Io {
                context: format!("opening {}", from.root.display()),
                source: e,
            })
        }
    };
    match safe_fs::open_dir_beneath(&root, &from.rel) {
        Ok(fd) => Ok(Some(fd)),
        Err(WalkError::Missing) => Ok(None),
        Err(e) => Err(walk_error(&from.path(), e)),
    }
}

fn walk_error(path: &Path, e: WalkError) -> LocalError {
    match e {
        WalkError::Blocked | WalkError::NotDir => path_error(format!(
            "{}: {e} (a symlink or file a command put there is not followed); nothing was copied",
            path.display()
        )),
        WalkError::Missing | WalkError::Io(_) => LocalError::Io {
            context: format!("opening {}", path.display()),
            source: e.into_io(),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let project = tmp.path().join("project");
        fs::create_dir_all(&data).unwrap();
        fs::create_dir_all(project.join("docs")).unwrap();
        let (data, project) = (
            data.canonicalize().unwrap(),
            project.canonicalize().unwrap(),
        );
        (tmp, data, project)
    }

    #[test]
    fn parses_specs_and_policies() {
        let d = PersistentDir::parse("/persistent/user=persistent/users/u1/memory").unwrap();
        assert_eq!(d.commit, CommitPolicy::AfterTurn);
        assert_eq!(
            d.source,
            Source::DataDir("persistent/users/u1/memory".into())
        );
        let d = PersistentDir::parse("/persistent/docs=project:./docs:read-only").unwrap();
        assert_eq!(
            (d.commit, d.source),
            (CommitPolicy::ReadOnly, Source::Project("./docs".into()))
        );
        assert_eq!(
            PersistentDir::parse("/persistent/m=x:manual")
                .unwrap()
                .commit,
            CommitPolicy::Manual
        );
        for bad in [
            "nope",
            "/session/x=a",
            "/persistent=a",
            "/persistent/../etc=a",
            "persistent/x=a",
        ] {
            assert!(PersistentDir::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn path_rules_reject_escapes_and_write_nothing() {
        let (tmp, data, project) = dirs();
        let ok = PersistentDir::parse("/persistent/user=persistent/users/u1").unwrap();
        assert_eq!(
            ok.resolve(&data, &project).unwrap(),
            data.join("persistent/users/u1")
        );
        std::os::unix::fs::symlink(tmp.path(), data.join("escape")).unwrap();
        for bad in [
            "/persistent/x=/etc",
            "/persistent/x=../company",
            "/persistent/x=a/../../b",
            "/persistent/x=.",
            "/persistent/x=escape/inner",
            "/persistent/x=project:../outside",
            "/persistent/x=project:docs/../../outside",
        ] {
            let dir = PersistentDir::parse(bad).unwrap();
            let err = dir.resolve(&data, &project).unwrap_err();
            assert!(matches!(err, LocalError::Path(_)), "{bad}: {err}");
        }
        assert!(!tmp.path().join("company").exists() && !tmp.path().join("outside").exists());
        let docs = PersistentDir::parse("/persistent/docs=project:./docs:read-only").unwrap();
        assert_eq!(docs.resolve(&data, &project).unwrap(), project.join("docs"));
    }

    #[test]
    fn mirror_replaces_the_target_with_the_source() {
        let (tmp, _, _) = dirs();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        fs::create_dir_all(a.join("sub")).unwrap();
        fs::write(a.join("sub/f.txt"), "new").unwrap();
        fs::create_dir_all(&b).unwrap();
        fs::write(b.join("stale.txt"), "old").unwrap();
        mirror(&Place::trusted(&a), &Place::trusted(&b)).unwrap();
        assert_eq!(fs::read_to_string(b.join("sub/f.txt")).unwrap(), "new");
        assert!(!b.join("stale.txt").exists());
        mirror(
            &Place::trusted(tmp.path().join("missing")),
            &Place::trusted(&b),
        )
        .unwrap();
        assert_eq!(fs::read_dir(&b).unwrap().count(), 0);
    }
}
