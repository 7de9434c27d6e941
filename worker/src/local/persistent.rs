//! Persistent Dirs on the local host (`localDir` / `projectDir` of the seed): a backing folder
//! loaded into the session's `persistent/` checkout before a turn and committed back by policy.
//!
//! Path rules: a data-dir source is a relative path inside the data directory (absolute paths, `..`,
//! the data directory itself, or anything resolving outside it, through symlinks too, are path
//! errors); a project source must resolve inside the project root. On a path error nothing is
//! written.

use super::data_dir::{io, LocalError, SessionDir};
use std::fs;
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
                check_inside(&path, data_dir, "the data directory")?;
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

    /// The session's checkout of this dir (what the agent sees at `harness_dir`).
    pub fn checkout(&self, session: &SessionDir) -> PathBuf {
        let rel = self
            .harness_dir
            .strip_prefix("/persistent")
            .expect("parse checked the prefix");
        session.root.join("persistent").join(rel)
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

/// Replaces `to` with a copy of `from` (regular files, directories and symlinks; a missing `from`
/// gives an empty `to`). The new tree is built beside `to` and renamed into place.
pub fn mirror(from: &Path, to: &Path) -> Result<(), LocalError> {
    let parent = to
        .parent()
        .ok_or_else(|| path_error(format!("{} has no parent", to.display())))?;
    fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
    let staging = parent.join(format!(
        ".{}.staging-{}",
        to.file_name().and_then(|n| n.to_str()).unwrap_or("dir"),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging).map_err(io(format!("creating {}", staging.display())))?;
    if from.is_dir() {
        copy_tree(from, &staging)?;
    }
    let old = parent.join(format!(
        ".{}.old-{}",
        to.file_name().and_then(|n| n.to_str()).unwrap_or("dir"),
        std::process::id()
    ));
    if to.exists() {
        fs::rename(to, &old).map_err(io(format!("moving {} aside", to.display())))?;
    }
    fs::rename(&staging, to).map_err(io(format!("renaming into {}", to.display())))?;
    let _ = fs::remove_dir_all(&old);
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), LocalError> {
    for entry in fs::read_dir(from).map_err(io(format!("listing {}", from.display())))? {
        let entry = entry.map_err(io(format!("listing {}", from.display())))?;
        let kind = entry.file_type().map_err(io("reading a file type"))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            fs::create_dir(&target).map_err(io(format!("creating {}", target.display())))?;
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            let link = fs::read_link(entry.path()).map_err(io("reading a symlink"))?;
            std::os::unix::fs::symlink(link, &target)
                .map_err(io(format!("creating {}", target.display())))?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &target)
                .map_err(io(format!("copying to {}", target.display())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
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
        mirror(&a, &b).unwrap();
        assert_eq!(fs::read_to_string(b.join("sub/f.txt")).unwrap(), "new");
        assert!(!b.join("stale.txt").exists());
        mirror(&tmp.path().join("missing"), &b).unwrap();
        assert_eq!(fs::read_dir(&b).unwrap().count(), 0);
    }
}
