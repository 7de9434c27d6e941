//! One walk over the tracked mounts, shared by snapshots and packing so both see the same tree.
//!
//! Only a mount's own backing path is trusted (opened by path, through symlinks); below it the
//! walk holds an open descriptor per directory level and reaches every entry relative to its
//! parent's descriptor, with `O_NOFOLLOW` (see `safe_fs`): a symlink is reported as a symlink and
//! never entered, and a directory swapped for a symlink mid-walk is not followed either. Excluded
//! names and names that are not UTF-8 are skipped, paths that belong to a more specific mount are
//! left to it, and directories deeper than `safe_fs::MAX_DEPTH` below a mount are skipped with a
//! warning.

use super::entry::EntryKind;
use super::error::WorkspaceError;
use super::paths::Exclude;
use super::safe_fs::{self, WalkError, MAX_DEPTH};
use super::spec::{Mount, WorkspaceSpec};
use rustix::fs::Stat;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// One filesystem object under a tracked mount, as the walk meets it.
pub(crate) struct Item<'a> {
    pub harness: &'a Path,
    /// The directory holding the object (`None` for a mount root, which is `root` itself).
    pub dir: &'a OwnedFd,
    pub name: Option<&'a OsStr>,
    pub stat: &'a Stat,
}

/// Called for every walked object in harness-path order (parents before children) when no
/// mount is nested in another; with nested mounts, mount by mount.
pub(crate) trait Visitor {
    fn visit(&mut self, item: Item<'_>) -> Result<(), WorkspaceError>;

    /// The directory at `harness` cannot be read (permission denied: a command's `chmod 000` in
    /// an unprivileged worker). `true`: the visitor has accounted for it and the walk goes on
    /// without its contents; `false` (the default): the walk fails.
    fn unreadable_dir(&mut self, _harness: &Path) -> bool {
        false
    }
}

fn denied(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::PermissionDenied
}

/// Walks the tracked mounts; returns warnings for what was skipped.
pub(crate) fn walk(
    spec: &WorkspaceSpec,
    exclude: &Exclude,
    visitor: &mut dyn Visitor,
) -> Result<Vec<String>, WorkspaceError> {
    let mut warnings = Vec::new();
    let mut mounts: Vec<_> = spec.tracked().collect();
    mounts.sort_by(|a, b| a.harness_path.cmp(&b.harness_path));
    let nested = spec.mounts.iter().any(|m| {
        spec.mounts.iter().any(|o| {
            o.harness_path != m.harness_path && o.harness_path.starts_with(&m.harness_path)
        })
    });
    for mount in mounts {
        let root_path = &mount.backing_path;
        let root = match safe_fs::open_root(root_path) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
                warnings.push(format!(
                    "{}: backing path is not a directory",
                    root_path.display()
                ));
                continue;
            }
            Err(e) => return Err(WorkspaceError::io(root_path, e)),
        };
        let stat = rustix::fs::fstat(&root).map_err(|e| WorkspaceError::io(root_path, e.into()))?;
        visitor.visit(Item {
            harness: &mount.harness_path,
            dir: &root,
            name: None,
            stat: &stat,
        })?;
        let mut w = Walker {
            spec,
            mount,
            exclude,
            nested,
            visitor: &mut *visitor,
            warnings: &mut warnings,
        };
        w.dir(&root, &mount.harness_path, 0)?;
    }
    Ok(warnings)
}

struct Walker<'a> {
    spec: &'a WorkspaceSpec,
    mount: &'a Mount,
    exclude: &'a Exclude,
    nested: bool,
    visitor: &'a mut dyn Visitor,
    warnings: &'a mut Vec<String>,
}

impl Walker<'_> {
    fn io(&self, harness: &Path, e: std::io::Error) -> WorkspaceError {
        let shown = match harness.strip_prefix(&self.mount.harness_path) {
            Ok(rel) if !rel.as_os_str().is_empty() => self.mount.backing_path.join(rel),
            _ => self.mount.backing_path.clone(),
        };
        WorkspaceError::io(shown, e)
    }

    /// Visits the children of the directory `fd` (at `harness`), depth first, sorted by name.
    fn dir(&mut self, fd: &OwnedFd, harness: &Path, depth: usize) -> Result<(), WorkspaceError> {
        let names = match safe_fs::list_dir(fd) {
            Ok(n) => n,
            // Removed while we walked: it is simply not in this snapshot.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if denied(&e) && self.visitor.unreadable_dir(harness) => return Ok(()),
            Err(e) => return Err(self.io(harness, e)),
        };
        for name in names {
            let child = harness.join(&name);
            if name.to_str().is_none() {
                self.warnings.push(format!(
                    "{}: name is not UTF-8, skipped",
                    child.to_string_lossy()
                ));
                continue;
            }
            if self.exclude.matches(Path::new(&name)) {
                continue;
            }
            if self.nested
                && self.spec.mount_for(&child).map(|m| &m.harness_path)
                    != Some(&self.mount.harness_path)
            {
                continue;
            }
            let stat = match safe_fs::stat_at(fd, &name) {
                Ok(Some(st)) => st,
                Ok(None) => continue,
                Err(e) => return Err(self.io(&child, e)),
            };
            self.visitor.visit(Item {
                harness: &child,
                dir: fd,
                name: Some(&name),
                stat: &stat,
            })?;
            if safe_fs::kind_of(&stat) != Some(EntryKind::Dir) {
                continue;
            }
            if depth >= MAX_DEPTH {
                self.warnings.push(format!(
                    "{}: deeper than {MAX_DEPTH} levels, contents skipped",
                    child.display()
                ));
                continue;
            }
            let sub = match safe_fs::open_dir_at(fd, &name) {
                Ok(sub) => sub,
                // Gone, or replaced by something else since the stat: not walked into.
                Err(WalkError::Missing | WalkError::Blocked | WalkError::NotDir) => continue,
                Err(WalkError::Io(e)) if denied(&e) && self.visitor.unreadable_dir(&child) => {
                    continue
                }
                Err(WalkError::Io(e)) => return Err(self.io(&child, e)),
            };
            self.dir(&sub, &child, depth.saturating_add(1))?;
        }
        Ok(())
    }
}

/// Keeps the last opened parent directory of a run of paths under one mount root, so siblings
/// (which come together in harness-path order) share one walk from the root.
pub(crate) struct ParentCache {
    roots: Vec<(PathBuf, OwnedFd)>,
    last: Option<(PathBuf, OwnedFd)>,
}

impl ParentCache {
    pub fn new() -> Self {
        ParentCache {
            roots: Vec::new(),
            last: None,
        }
    }

    /// The open directory `parent` (relative) under the trusted root `root_path`, never
    /// through a symlink.
    pub fn open(&mut self, root_path: &Path, parent: &Path) -> Result<&OwnedFd, WalkError> {
        let key = root_path.join(parent);
        let hit = self.last.as_ref().is_some_and(|(k, _)| *k == key);
        if !hit {
            let idx = match self.roots.iter().position(|(p, _)| p == root_path) {
                Some(i) => i,
                None => {
                    let fd = safe_fs::open_root(root_path).map_err(WalkError::Io)?;
                    self.roots.push((root_path.to_path_buf(), fd));
                    self.roots.len().saturating_sub(1)
                }
            };
            let root = &self
                .roots
                .get(idx)
                .ok_or_else(|| WalkError::Io(std::io::Error::other("root cache")))?
                .1;
            let fd = safe_fs::open_dir_beneath(root, parent)?;
            self.last = Some((key, fd));
        }
        match &self.last {
            Some((_, fd)) => Ok(fd),
            None => Err(WalkError::Io(std::io::Error::other("parent cache"))),
        }
    }
}
