//! New files under `/artifacts/trace/`: the trace's large payloads (the turn) and a streamed
//! command's output kept past the cap (the worker). Commands can write `/artifacts`, so the
//! directory is opened beneath the mount's trusted root and the file created new (O_EXCL,
//! O_NOFOLLOW), never through a symlink; the name carries time and randomness, so a command
//! cannot plant something there first.

use kube_harness_workspace::safe_fs;
use kube_harness_workspace::spec::{WorkspaceSpec, ARTIFACTS};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;

/// A file just created under `/artifacts/trace/`.
pub struct TraceFile {
    pub file: File,
    /// Its harness path (`/artifacts/trace/<name>`).
    pub path: String,
    dir: OwnedFd,
    name: String,
}

impl TraceFile {
    /// Removes the file again (a payload that could not be written whole); best effort.
    pub fn discard(self) {
        let _ = safe_fs::unlink_at(&self.dir, OsStr::new(&self.name), false);
    }
}

/// Creates `/artifacts/trace/<unique>.<suffix>`; the error says why in words (no writable
/// /artifacts, `trace` not a plain directory, …).
pub fn create(spec: &WorkspaceSpec, suffix: &str) -> Result<TraceFile, String> {
    let artifacts = spec
        .mounts
        .iter()
        .find(|m| m.harness_path == Path::new(ARTIFACTS) && m.writable)
        .ok_or("the session has no writable /artifacts")?;
    let root = safe_fs::open_root(&artifacts.backing_path)
        .map_err(|e| format!("opening /artifacts: {e}"))?;
    let dir = safe_fs::ensure_dir_beneath(&root, Path::new("trace"), 0o755, false)
        .map_err(|e| format!("/artifacts/trace is not a plain directory ({e})"))?;
    let name = format!("{}.{suffix}", unique_name());
    let file = safe_fs::create_file_mode_at(&dir, OsStr::new(&name), 0o644)
        .map_err(|e| format!("creating /artifacts/trace/{name}: {e}"))?;
    Ok(TraceFile {
        file,
        path: format!("{ARTIFACTS}/trace/{name}"),
        dir,
        name,
    })
}

/// A unique, sortable name: time in nanoseconds, the process id and a random part.
fn unique_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "{nanos:x}-{:x}-{}",
        std::process::id(),
        random.get(..12).unwrap_or(&random)
    )
}
