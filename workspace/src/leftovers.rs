//! Directories a killed process left behind. A process killed with SIGKILL (or by a signal it
//! does not handle) never runs its destructors, so its scratch directories stay; the next process
//! of the same kind removes them. Names are `<prefix><pid>-<random>`: a directory is removed only
//! when it is a real directory (not a symlink) of this user and process `<pid>` is gone.
//!
//! Removal is [`safe_fs::remove_tree_at`]: commands wrote these trees, so any depth, any mode
//! (`chmod 000`) and symlinks must neither stop it nor redirect it.

use crate::safe_fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Removes `parent/<prefix><pid>-*` directories of this user whose process is gone. Best effort:
/// errors are ignored (another process may be sweeping the same directory).
pub fn sweep_dead(parent: &Path, prefix: &str) {
    let uid = rustix::process::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        // `DirEntry::metadata` does not follow symlinks.
        let mine = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if mine && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = remove(&entry.path());
        }
    }
}

/// The prefix of a scratch directory of this process: `<kind><pid>-`.
pub fn own_prefix(kind: &str) -> String {
    format!("{kind}{}-", std::process::id())
}

/// Removes the tree at `path` (its parent is trusted and may be reached through symlinks; nothing
/// below it is followed).
pub fn remove(path: &Path) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other(format!(
            "{}: not a removable path",
            path.display()
        )));
    };
    safe_fs::remove_tree_at(&safe_fs::open_root(parent)?, name)
}

/// A scratch directory removed with [`remove`] on drop: `tempfile::TempDir` removes with the
/// recursive `std::fs::remove_dir_all`, which a deep tree a command made turns into a stack
/// overflow, and which stops at a directory its owner made unreadable.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Takes over a directory `tempfile` made.
    pub fn from_tempdir(dir: tempfile::TempDir) -> Self {
        ScratchDir(dir.keep())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(e) = remove(&self.0) {
            tracing::warn!(error = %e, dir = %self.0.display(), "could not remove a scratch directory");
        }
    }
}
