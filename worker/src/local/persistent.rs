//! Persistent Dirs on the local host (`localDir` / `projectDir` of the seed): a backing folder
//! loaded into the session's `persistent/` checkout before a turn and committed back by policy.
//!
//! Path rules (`PersistentDir::resolve`, one resolution for both kinds of source): a data-dir source
//! is a relative path of plain names inside the data directory (absolute paths, `..`, the data
//! directory itself are path errors); a `project:` source must resolve inside the project root
//! (`..` by name). Then, for both: the source may not lie in the data directory's `sessions/`
//! folder, may not contain the data directory, and is opened below its root one component at a
//! time without following a symlink, at load and again at every commit. On a path error nothing
//! is written.
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
use kube_harness_workspace::EntryKind;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
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

    /// The backing folder, checked against the path rules: a trusted root (the data directory or
    /// the project root, canonical, so either may be reached through symlinks) and plain
    /// components below it, which are walked without following a symlink now and again by every
    /// copy to or from the source. Both kinds of source go through the same rules: not in the
    /// data directory's `sessions/` folder, not through a symlink below the root, not containing
    /// the data directory (whose session folders a load copies into). Creates nothing.
    pub fn resolve(&self, data_dir: &Path, project_root: &Path) -> Result<Place, LocalError> {
        let data_dir = data_dir.canonicalize().map_err(io(format!(
            "resolving the data directory {}",
            data_dir.display()
        )))?;
        let (root, rel, shown) = match &self.source {
            Source::DataDir(rel) => {
                let plain = rel
                    .components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
                    && rel.components().any(|c| matches!(c, Component::Normal(_)));
                if !plain {
                    return Err(path_error(format!(
                        "source {} must be a relative path inside the data directory (no absolute path, no '..', not the data directory itself)",
                        rel.display()
                    )));
                }
                let below: PathBuf = rel
                    .components()
                    .filter(|c| matches!(c, Component::Normal(_)))
                    .collect();
                (data_dir.clone(), below, rel.display().to_string())
            }
            Source::Project(rel) => {
                let root = project_root.canonicalize().map_err(io(format!(
                    "resolving project root {}",
                    project_root.display()
                )))?;
                // `..` is resolved by name (the path may not exist yet); every component left
                // is then opened below the root without following a symlink.
                let mut below = PathBuf::new();
                for c in rel.components() {
                    let inside = match c {
                        Component::Normal(name) => {
                            below.push(name);
                            true
                        }
                        Component::CurDir => true,
                        Component::ParentDir => below.pop(),
                        Component::RootDir | Component::Prefix(_) => false,
                    };
                    if !inside {
                        return Err(path_error(format!(
                            "projectDir {} resolves outside the project root {}",
                            rel.display(),
                            root.display()
                        )));
                    }
                }
                (root, below, format!("project:{}", rel.display()))
            }
        };
        // No symlink below the root, so this is where the source really is (or will be made).
        let path = root.join(&rel);
        let sessions = data_dir.join("sessions");
        if path.starts_with(&sessions) {
            return Err(path_error(format!(
                "source {shown} is inside the data directory's sessions/ folder, which commands write"
            )));
        }
        if data_dir.starts_with(&path) {
            return Err(path_error(format!(
                "source {shown} is {}, which contains the data directory {} (and the session folders a load copies into)",
                path.display(),
                data_dir.display()
            )));
        }
        walk_source(&root, &rel, &shown, &data_dir, &sessions)?;
        Ok(Place::source(root, rel))
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

/// Walks `rel` below `root` one component at a time without following a symlink: a symlink or a
/// file on the way is a path error; the walk stops at the first missing component (the rest is
/// made as plain directories by a commit). Each directory met is also compared by identity
/// (device and inode) with the data directory's `sessions/` folder, and the source itself with
/// the data directory and its ancestors, so another name for them (a bind mount) is refused too.
fn walk_source(
    root: &Path,
    rel: &Path,
    shown: &str,
    data_dir: &Path,
    sessions: &Path,
) -> Result<(), LocalError> {
    // `DataDir::open` makes it; a data directory without one has no sessions to reach.
    let sessions_id = identity_of_path(sessions).ok();
    let mut cur = safe_fs::open_root(root).map_err(io(format!("opening {}", root.display())))?;
    let mut at = root.to_path_buf();
    let mut complete = true;
    let inside_sessions = |at: &Path| {
        path_error(format!(
            "source {shown} reaches {}, which is the data directory's sessions/ folder, which commands write",
            at.display()
        ))
    };
    let (id, fd) = identity_of_fd(cur, &at)?;
    cur = fd;
    if Some(id) == sessions_id {
        return Err(inside_sessions(&at));
    }
    let mut last = id;
    for c in rel.components() {
        at.push(c);
        let next = match safe_fs::open_dir_at(&cur, c.as_os_str()) {
            Ok(fd) => fd,
            Err(WalkError::Missing) => {
                complete = false;
                break;
            }
            Err(WalkError::Blocked) => {
                return Err(path_error(format!(
                    "source {shown} passes through the symlink {} (a source is never reached through one)",
                    at.display()
                )))
            }
            Err(WalkError::NotDir) => {
                return Err(path_error(format!(
                    "source {shown}: {} is not a directory",
                    at.display()
                )))
            }
            Err(e @ WalkError::Io(_)) => return Err(walk_error(&at, e)),
        };
        let (id, fd) = identity_of_fd(next, &at)?;
        if Some(id) == sessions_id {
            return Err(inside_sessions(&at));
        }
        cur = fd;
        last = id;
    }
    if complete {
        for ancestor in data_dir.ancestors() {
            if identity_of_path(ancestor)? == last {
                return Err(path_error(format!(
                    "source {shown} is {}, which contains the data directory {} (and the session folders a load copies into)",
                    at.display(),
                    data_dir.display()
                )));
            }
        }
    }
    Ok(())
}

fn identity_of_path(path: &Path) -> Result<(u64, u64), LocalError> {
    let m = fs::metadata(path).map_err(io(format!("reading {}", path.display())))?;
    Ok((m.dev(), m.ino()))
}

fn identity_of_fd(fd: OwnedFd, path: &Path) -> Result<((u64, u64), OwnedFd), LocalError> {
    let file = fs::File::from(fd);
    let m = file
        .metadata()
        .map_err(io(format!("reading {}", path.display())))?;
    Ok(((m.dev(), m.ino()), OwnedFd::from(file)))
}

/// A directory as a trusted root (made by the host or named by the user, may be reached through
/// symlinks) and a path below it that a command may have changed (walked one component at a
/// time, never through a symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub root: PathBuf,
    pub rel: PathBuf,
    /// Whether the host owns `rel`'s directories: a symlink or file a command put in their way is
    /// replaced by a directory when copying to the place (a checkout). Otherwise (a source) it
    /// is a path error, and so is a symlink or file where the place itself should be.
    pub host_owned: bool,
}

impl Place {
    /// A host-owned directory: nothing on its path is written by commands.
    pub fn trusted(path: impl Into<PathBuf>) -> Place {
        Place {
            root: path.into(),
            rel: PathBuf::new(),
            host_owned: true,
        }
    }

    /// `rel` (plain components) below the trusted `root`, in a tree the host owns the layout of.
    pub fn below(root: impl Into<PathBuf>, rel: impl Into<PathBuf>) -> Place {
        Place {
            root: root.into(),
            rel: rel.into(),
            host_owned: true,
        }
    }

    /// A Persistent Dir source: `rel` (plain components) below the trusted `root`, whose
    /// directories are the user's (or what sessions committed): never replaced, never followed.
    pub fn source(root: impl Into<PathBuf>, rel: impl Into<PathBuf>) -> Place {
        Place {
            root: root.into(),
            rel: rel.into(),
            host_owned: false,
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

/// Replaces `to` with a copy of `from` (regular files, directories and symlinks, the latter as
/// symlinks; a missing `from` gives an empty `to`). The new tree is built beside `to` and renamed
/// into place. Nothing is read or written through a symlink below either place's trusted root: a
/// `from` that is a symlink (or not a directory) is a path error and `to` is left as it was; a
/// symlink or file where `to`'s parent directories should be is replaced by a directory when the
/// host owns them (a checkout), and is a path error otherwise (a source), as is a symlink or
/// file where a source itself should be. Every check comes before anything is written, and a
/// copy that fails (a tree deeper than the walk limit, a full disk) removes what it built: no
/// staging directory is left behind.
pub fn mirror(from: &Place, to: &Place) -> Result<(), LocalError> {
    mirror_with(from, to, &|_| Ok(()))
}

/// [`mirror`], with `finish` applied to the new tree (its staging directory) before it is
/// renamed into place: a failure there is a failed copy (nothing replaced, nothing left).
pub fn mirror_with(
    from: &Place,
    to: &Place,
    finish: &dyn Fn(&OwnedFd) -> std::io::Result<()>,
) -> Result<(), LocalError> {
    let shown_to = to.path();
    let (to_root, to_parent, name) = to
        .split()
        .ok_or_else(|| path_error(format!("{} has no parent", shown_to.display())))?;
    let src = open_source(from)?;
    fs::create_dir_all(&to_root).map_err(io(format!("creating {}", to_root.display())))?;
    let root_fd =
        safe_fs::open_root(&to_root).map_err(io(format!("opening {}", to_root.display())))?;
    let parent = safe_fs::ensure_dir_beneath(&root_fd, to_parent, 0o755, to.host_owned)
        .map_err(|e| walk_error(&to_root.join(to_parent), e))?;
    if !to.host_owned {
        match safe_fs::stat_at(&parent, name)
            .map_err(io(format!("reading {}", shown_to.display())))?
        {
            Some(st) if safe_fs::kind_of(&st) != Some(EntryKind::Dir) => {
                return Err(path_error(format!(
                    "{}: a symlink or file is where the directory should be (it is not followed or replaced); nothing was copied",
                    shown_to.display()
                )))
            }
            _ => {}
        }
    }
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
        finish(&dst)
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
            Place::source(&data, "persistent/users/u1")
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
            "/persistent/x=project:/etc",
            "/persistent/x=sessions/s1",
            "/persistent/x=./sessions",
        ] {
            let dir = PersistentDir::parse(bad).unwrap();
            let err = dir.resolve(&data, &project).unwrap_err();
            assert!(matches!(err, LocalError::Path(_)), "{bad}: {err}");
        }
        assert!(!tmp.path().join("company").exists() && !tmp.path().join("outside").exists());
        let docs = PersistentDir::parse("/persistent/docs=project:./docs:read-only").unwrap();
        assert_eq!(
            docs.resolve(&data, &project).unwrap(),
            Place::source(&project, "docs")
        );
    }

    /// Both kinds of source under one set of rules: a project whose data directory lies inside
    /// it cannot name the sessions, a source through a symlink, or a source containing the data
    /// directory.
    #[test]
    fn project_sources_keep_the_data_dir_rules() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().canonicalize().unwrap().join("proj");
        let data = project.join(".lh");
        fs::create_dir_all(data.join("sessions/victim/session")).unwrap();
        fs::create_dir_all(project.join("mem")).unwrap();
        std::os::unix::fs::symlink("../.lh/sessions/victim", project.join("mem/inner")).unwrap();
        std::os::unix::fs::symlink(".lh/sessions", project.join("link")).unwrap();
        for (bad, why) in [
            ("project:.lh/sessions/victim/session", "sessions/ folder"),
            ("project:.lh/sessions", "sessions/ folder"),
            ("project:mem/inner", "passes through the symlink"),
            ("project:mem/inner/session", "passes through the symlink"),
            ("project:link/victim", "passes through the symlink"),
            ("project:.", "contains the data directory"),
            ("project:mem/..", "contains the data directory"),
            ("project:.lh", "contains the data directory"),
        ] {
            let dir = PersistentDir::parse(&format!("/persistent/x={bad}")).unwrap();
            let err = dir.resolve(&data, &project).unwrap_err();
            assert!(
                matches!(&err, LocalError::Path(m) if m.contains(why)),
                "{bad}: {err}"
            );
        }
        for ok in [
            "project:mem",
            "project:mem/new/deeper",
            "project:.lh/shared",
        ] {
            let dir = PersistentDir::parse(&format!("/persistent/x={ok}")).unwrap();
            dir.resolve(&data, &project).unwrap();
        }
        // A project root inside the sessions folder is refused whatever the source.
        let dir = PersistentDir::parse("/persistent/x=project:session").unwrap();
        let err = dir
            .resolve(&data, &data.join("sessions/victim"))
            .unwrap_err();
        assert!(matches!(err, LocalError::Path(_)), "{err}");
    }

    /// A copy that fails (a source deeper than the walk limit) leaves no staging directory, and
    /// the target as it was.
    #[test]
    fn a_failed_copy_leaves_no_staging_directory() {
        let (tmp, _, _) = dirs();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let mut deep = a.clone();
        for _ in 0..300 {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        fs::create_dir_all(b.join("t")).unwrap();
        fs::write(b.join("t/keep.txt"), "kept").unwrap();
        let err = mirror(&Place::trusted(&a), &Place::below(&b, "t")).unwrap_err();
        assert!(err.to_string().contains("deeper than"), "{err}");
        let names: Vec<_> = fs::read_dir(&b)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["t"]);
        assert_eq!(fs::read_to_string(b.join("t/keep.txt")).unwrap(), "kept");
    }

    /// A commit never replaces or follows a symlink on a source's path.
    #[test]
    fn a_commit_to_a_source_refuses_a_symlink_in_its_way() {
        let (tmp, _, _) = dirs();
        let (from, root) = (tmp.path().join("from"), tmp.path().join("root"));
        let victim = tmp.path().join("victim");
        fs::create_dir_all(&from).unwrap();
        fs::write(from.join("f"), "x").unwrap();
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&victim).unwrap();
        std::os::unix::fs::symlink(&victim, root.join("mem")).unwrap();
        for rel in ["mem", "mem/notes"] {
            let err = mirror(&Place::trusted(&from), &Place::source(&root, rel)).unwrap_err();
            assert!(matches!(err, LocalError::Path(_)), "{rel}: {err}");
        }
        assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
        assert!(fs::symlink_metadata(root.join("mem"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_dir(&root).unwrap().count(), 1);
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
