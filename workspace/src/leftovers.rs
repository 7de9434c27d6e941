//! Directories a killed process left behind. A process killed with SIGKILL (or by a signal it
//! does not handle) never runs its destructors, so its scratch directories stay; the next process
//! of the same kind removes them. Names are `<prefix><pid>-<random>`: a directory is removed only
//! when it is a real directory (not a symlink) of this user and process `<pid>` is gone.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

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
            // `remove_dir_all` does not follow symlinks inside the tree either.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The prefix of a scratch directory of this process: `<kind><pid>-`.
pub fn own_prefix(kind: &str) -> String {
    format!("{kind}{}-", std::process::id())
}
