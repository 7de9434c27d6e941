//! Binding a handed-over workspace into the agent's canonical directories.
//!
//! `workspace::unpack` wants an empty target it can rename whole mount directories into, but in
//! a pod `/session`, `/artifacts` and `/persistent` are volumes (mount points: they cannot be
//! renamed onto, and `/` is not empty). So the archive is unpacked, with every check, into a
//! fresh directory inside the first mount, and only a verified tree is moved into place: by
//! rename where it is the same volume, by copy where it is not. A rejected archive never
//! reaches the canonical directories.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use kube_harness_protocol::tier1::BindReport;
use kube_harness_workspace::safe_fs::{self, WalkError};
use kube_harness_workspace::{
    self as workspace, Snapshot, UnpackOptions, WorkspaceError, WorkspaceSpec,
};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Names of bind staging directories in the first tracked mount.
pub const BIND_STAGING_PREFIX: &str = ".kube-harness-bind-";

/// A bound workspace: what the archive held and the base snapshot for `changes_since`.
pub struct Bound {
    pub report: BindReport,
    pub base: Snapshot,
}

/// Why a bind failed, by whose fault and with what left behind.
#[derive(Debug)]
pub enum BindError {
    /// The archive is refused (corrupt, lying manifest, unsafe entry, over a limit). Nothing
    /// was placed.
    BadArchive(String),
    /// The canonical directories already hold files. Nothing was placed.
    NotEmpty(String),
    /// Failed before anything was placed (this pod's disk or permissions).
    Io(String),
    /// Failed while moving a verified tree into place: the workspace is half there and the
    /// agent must not serve it.
    HalfBound(String),
}

/// Removes the staging directory when the bind ends, however it ends (an error, or a panic
/// unwinding through it): a failed bind leaves nothing that would make the next one find the
/// mount not empty.
struct Staging {
    parent: OwnedFd,
    name: OsString,
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = safe_fs::remove_tree_at(&self.parent, &self.name);
    }
}

/// Empties the tracked mounts of `spec` (their contents, never the mount points), without
/// following a symlink: what a kept pod's last turn left there goes before the next turn's
/// workspace is bound (`PUT /v1/workspace?replace=true`). A failure half-way leaves some of it.
pub fn clear(spec: &WorkspaceSpec) -> io::Result<()> {
    for m in spec.tracked() {
        let dir = match safe_fs::open_root(&m.backing_path) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for name in safe_fs::list_dir(&dir)? {
            safe_fs::remove_tree_at(&dir, &name).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{}: {e}", m.backing_path.join(&name).display()),
                )
            })?;
        }
    }
    Ok(())
}

/// Unpacks `archive` and places it under the tracked mounts of `spec`.
pub fn bind(archive: &Path, spec: &WorkspaceSpec) -> Result<Bound, BindError> {
    let started = std::time::Instant::now();
    let step =
        |what: &str| tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, "bind: {what}");
    let tracked: Vec<_> = spec.tracked().cloned().collect();
    let first = tracked
        .first()
        .ok_or_else(|| BindError::Io("the agent has no tracked mounts".into()))?;
    let io_err = |p: &Path, e: io::Error| BindError::Io(format!("{}: {e}", p.display()));
    for m in &tracked {
        fs::create_dir_all(&m.backing_path).map_err(|e| io_err(&m.backing_path, e))?;
    }
    let first_fd =
        safe_fs::open_root(&first.backing_path).map_err(|e| io_err(&first.backing_path, e))?;
    // Staging left by a bind that was killed half-way is ours: remove it first.
    for name in safe_fs::list_dir(&first_fd).map_err(|e| io_err(&first.backing_path, e))? {
        if name
            .as_encoded_bytes()
            .starts_with(BIND_STAGING_PREFIX.as_bytes())
        {
            safe_fs::remove_tree_at(&first_fd, &name)
                .map_err(|e| io_err(&first.backing_path.join(&name), e))?;
        }
    }
    for m in &tracked {
        let mut entries = fs::read_dir(&m.backing_path).map_err(|e| io_err(&m.backing_path, e))?;
        if entries.next().is_some() {
            return Err(BindError::NotEmpty(format!(
                "{} is not empty: a workspace is bound only into empty directories",
                m.harness_path.display()
            )));
        }
    }
    let name = OsString::from(format!(
        "{BIND_STAGING_PREFIX}{}",
        uuid::Uuid::new_v4().simple()
    ));
    let staging_path = first.backing_path.join(&name);
    let staging = Staging {
        parent: first_fd,
        name,
    };
    let input = fs::File::open(archive).map_err(|e| BindError::Io(format!("spool: {e}")))?;
    let unpacked = workspace::unpack(
        io::BufReader::with_capacity(256 << 10, input),
        &staging_path,
        &UnpackOptions::for_spec(spec),
    );
    let report = match unpacked {
        Ok(r) => r,
        Err(e) => {
            drop(staging);
            return Err(match e {
                WorkspaceError::Io { .. } | WorkspaceError::Target { .. } => {
                    BindError::Io(e.to_string())
                }
                other => BindError::BadArchive(other.to_string()),
            });
        }
    };
    step("unpacked with the archive checks");
    let placed = place(&staging, &tracked);
    let cleaned = safe_fs::remove_tree_at(&staging.parent, &staging.name);
    drop(staging);
    placed
        .and(cleaned)
        .map_err(|e| BindError::HalfBound(format!("placing the workspace: {e}")))?;
    step("placed");
    // Every file hashed: the base of `changes_since`, whose archive needs every digest; the
    // content came from an archive within the same limits.
    let base = workspace::snapshot_with(
        spec,
        &Default::default(),
        None,
        workspace::HashBudget::archive(&Default::default()),
    )
    .map_err(|e| BindError::HalfBound(format!("snapshotting the bound workspace: {e}")))?;
    step("snapshot taken");
    Ok(Bound {
        report: BindReport {
            files: report.entries,
            bytes: report.total_bytes,
        },
        base,
    })
}

/// Moves each mount's verified tree out of the staging directory into the mount, never
/// following a symlink: by rename on the same volume, by copy and removal across volumes.
fn place(staging: &Staging, tracked: &[workspace::Mount]) -> io::Result<()> {
    let staged =
        safe_fs::open_dir_at(&staging.parent, &staging.name).map_err(WalkError::into_io)?;
    for m in tracked {
        let rel = m.harness_path.strip_prefix("/").unwrap_or(&m.harness_path);
        let from = match safe_fs::open_dir_beneath(&staged, rel) {
            Ok(fd) => fd,
            Err(WalkError::Missing) => continue,
            Err(e) => return Err(e.into_io()),
        };
        let to = safe_fs::open_root(&m.backing_path)?;
        for child in safe_fs::list_dir(&from)? {
            move_into(&from, &to, &child)?;
        }
    }
    Ok(())
}

/// Moves `name` from the directory `from` to the directory `to`: a rename on the same volume,
/// else a copy and a removal.
fn move_into(from: &OwnedFd, to: &OwnedFd, name: &OsStr) -> io::Result<()> {
    match rustix::fs::renameat(from, name, to, name) {
        Err(rustix::io::Errno::XDEV) => {
            copy_entry(from, to, name)?;
            safe_fs::remove_tree_at(from, name)
        }
        other => Ok(other?),
    }
}

/// Copies one entry of a verified tree (a directory with everything below it, a regular file or
/// a symlink; unpack admits nothing else), keeping modes and file mtimes, never through a
/// symlink.
fn copy_entry(from: &OwnedFd, to: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let st =
        safe_fs::stat_at(from, name)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    match safe_fs::kind_of(&st) {
        Some(workspace::EntryKind::Dir) => {
            let src = safe_fs::open_dir_at(from, name).map_err(WalkError::into_io)?;
            safe_fs::mkdir_at(to, name, 0o700)?;
            let dst = safe_fs::open_dir_at(to, name).map_err(WalkError::into_io)?;
            safe_fs::copy_tree_at(&src, &dst)?;
            safe_fs::chmod_fd(&dst, st.st_mode & 0o777)
        }
        Some(workspace::EntryKind::File) => {
            let mut src = safe_fs::open_regular_at(from, name)?;
            let mut dst = safe_fs::create_file_at(to, name)?;
            io::copy(&mut src, &mut dst)?;
            safe_fs::chmod_fd(&dst, st.st_mode & 0o777)?;
            dst.set_modified(src.metadata()?.modified()?)
        }
        Some(workspace::EntryKind::Symlink) => {
            safe_fs::symlink_at(&safe_fs::read_link_at(from, name)?, to, name)
        }
        None => Err(io::Error::other(format!(
            "{}: not a file, directory or symlink",
            name.to_string_lossy()
        ))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn copy_entry_keeps_modes_links_and_mtimes() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("ro/sub")).unwrap();
        fs::write(src.join("ro/sub/f"), "x").unwrap();
        fs::set_permissions(src.join("ro/sub/f"), fs::Permissions::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink("sub/f", src.join("ro/l")).unwrap();
        fs::set_permissions(src.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
        let dst = tmp.path().join("dst");
        fs::create_dir_all(&dst).unwrap();
        let (s, d) = (
            safe_fs::open_root(&src).unwrap(),
            safe_fs::open_root(&dst).unwrap(),
        );
        copy_entry(&s, &d, OsStr::new("ro")).unwrap();
        let mode = |p: &str| {
            fs::symlink_metadata(dst.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("ro"), 0o555);
        assert_eq!(mode("ro/sub/f"), 0o751);
        assert_eq!(fs::read_link(dst.join("ro/l")).unwrap(), Path::new("sub/f"));
        assert_eq!(
            fs::metadata(src.join("ro/sub/f"))
                .unwrap()
                .modified()
                .unwrap(),
            fs::metadata(dst.join("ro/sub/f"))
                .unwrap()
                .modified()
                .unwrap()
        );
        let sub = safe_fs::open_root(&src.join("ro/sub")).unwrap();
        copy_entry(&sub, &d, OsStr::new("f")).unwrap();
        assert_eq!(fs::read_to_string(dst.join("f")).unwrap(), "x");
        fs::set_permissions(src.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(dst.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
    }
}
