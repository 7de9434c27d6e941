//! Binding a handed-over workspace into the agent's canonical directories.
//!
//! `workspace::unpack` wants an empty target it can rename whole mount directories into, but in
//! a pod `/session`, `/artifacts` and `/persistent` are volumes (mount points: they cannot be
//! renamed onto, and `/` is not empty). So the archive is unpacked, with every check, into a
//! fresh directory inside the first mount, and only a verified tree is moved into place: by
//! rename where it is the same volume, by copy where it is not. A rejected archive never
//! reaches the canonical directories.

use super::wire::BindReport;
use crate::workspace::{self, Snapshot, UnpackOptions, WorkspaceError, WorkspaceSpec};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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

/// Unpacks `archive` and places it under the tracked mounts of `spec`.
pub fn bind(archive: &Path, spec: &WorkspaceSpec) -> Result<Bound, BindError> {
    let tracked: Vec<_> = spec.tracked().cloned().collect();
    let first = tracked
        .first()
        .ok_or_else(|| BindError::Io("the agent has no tracked mounts".into()))?;
    for m in &tracked {
        fs::create_dir_all(&m.backing_path)
            .map_err(|e| BindError::Io(format!("{}: {e}", m.backing_path.display())))?;
        let mut entries = fs::read_dir(&m.backing_path)
            .map_err(|e| BindError::Io(format!("{}: {e}", m.backing_path.display())))?;
        if entries.next().is_some() {
            return Err(BindError::NotEmpty(format!(
                "{} is not empty: a workspace is bound only into empty directories",
                m.harness_path.display()
            )));
        }
    }
    let staging = first.backing_path.join(format!(
        ".kube-harness-bind-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let input = fs::File::open(archive).map_err(|e| BindError::Io(format!("spool: {e}")))?;
    let unpacked = workspace::unpack(
        io::BufReader::with_capacity(256 << 10, input),
        &staging,
        &UnpackOptions::for_spec(spec),
    );
    let report = match unpacked {
        Ok(r) => r,
        Err(e) => {
            let _ = fs::remove_dir_all(&staging);
            return Err(match e {
                WorkspaceError::Io { .. } | WorkspaceError::Target { .. } => {
                    BindError::Io(e.to_string())
                }
                other => BindError::BadArchive(other.to_string()),
            });
        }
    };
    let placed = tracked.iter().try_for_each(|m| {
        let rel = m.harness_path.strip_prefix("/").unwrap_or(&m.harness_path);
        let from = staging.join(rel);
        if !from.is_dir() {
            return Ok(());
        }
        for child in fs::read_dir(&from)? {
            let child = child?;
            move_into(&child.path(), &m.backing_path.join(child.file_name()))?;
        }
        Ok::<_, io::Error>(())
    });
    let cleaned = fs::remove_dir_all(&staging);
    placed
        .and(cleaned)
        .map_err(|e| BindError::HalfBound(format!("placing the workspace: {e}")))?;
    let base = workspace::snapshot(spec)
        .map_err(|e| BindError::HalfBound(format!("snapshotting the bound workspace: {e}")))?;
    Ok(Bound {
        report: BindReport {
            files: report.entries,
            bytes: report.total_bytes,
        },
        base,
    })
}

/// Moves `from` to `to`: a rename on the same volume, else a copy and a removal.
fn move_into(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            copy_tree(from, to)?;
            if fs::symlink_metadata(from)?.is_dir() {
                fs::remove_dir_all(from)
            } else {
                fs::remove_file(from)
            }
        }
        other => other,
    }
}

/// Copies a verified tree (directories, regular files, symlinks; unpack admits nothing else),
/// keeping modes and file mtimes. Directory modes are applied last, deepest first, so a
/// read-only directory does not block its own children.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    for entry in walkdir::WalkDir::new(from).follow_links(false) {
        let entry = entry.map_err(io::Error::other)?;
        let rel = entry.path().strip_prefix(from).map_err(io::Error::other)?;
        // `to.join("")` would add a trailing slash: a single file's own entry is `to` itself.
        let target = if rel.as_os_str().is_empty() {
            to.to_path_buf()
        } else {
            to.join(rel)
        };
        let meta = entry.path().symlink_metadata()?;
        let kind = meta.file_type();
        if kind.is_dir() {
            fs::create_dir(&target)?;
            fs::set_permissions(&target, fs::Permissions::from_mode(0o700))?;
            dir_modes.push((target, meta.permissions().mode() & 0o7777));
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &target)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &target)?;
            let file = fs::OpenOptions::new().write(true).open(&target)?;
            file.set_modified(meta.modified()?)?;
        } else {
            return Err(io::Error::other(format!(
                "{}: not a file, directory or symlink",
                entry.path().display()
            )));
        }
    }
    dir_modes.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (dir, mode) in dir_modes {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_tree_keeps_modes_links_and_mtimes() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("ro/sub")).unwrap();
        fs::write(src.join("ro/sub/f"), "x").unwrap();
        fs::set_permissions(src.join("ro/sub/f"), fs::Permissions::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink("sub/f", src.join("ro/l")).unwrap();
        fs::set_permissions(src.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
        let dst = tmp.path().join("dst");
        copy_tree(&src, &dst).unwrap();
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
        copy_tree(&src.join("ro/sub/f"), &tmp.path().join("single")).unwrap();
        assert_eq!(fs::read_to_string(tmp.path().join("single")).unwrap(), "x");
        fs::set_permissions(src.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(dst.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
    }
}
