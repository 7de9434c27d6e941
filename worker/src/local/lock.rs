//! One session never runs two turns at once: an exclusive `flock` on the session's `turn.lock`,
//! which holds across processes. `--max-concurrent-sessions N` is N slot lock files.

use super::data_dir::{io, LocalError, SessionDir};
use fs4::fs_std::FileExt;
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::time::Duration;

/// What a second turn for a busy session does: wait for the running one (`Queue`, the default)
/// or fail at once (`Reject`). The worker API's setting, shared.
pub use kube_harness_protocol::SameSession;

/// Held for the duration of a turn; dropping it releases the locks.
pub struct TurnGuard {
    _session: File,
    _slot: Option<File>,
}

fn open_lock(path: &Path) -> Result<File, LocalError> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io(format!("opening {}", path.display())))
}

impl TurnGuard {
    /// Takes the session's turn lock (and a concurrency slot when `max_sessions` is set).
    pub fn acquire(
        data_root: &Path,
        session: &SessionDir,
        same_session: SameSession,
        max_sessions: Option<usize>,
    ) -> Result<TurnGuard, LocalError> {
        let file = open_lock(&session.lock_path())?;
        match same_session {
            SameSession::Queue => file
                .lock_exclusive()
                .map_err(io(format!("locking {}", session.lock_path().display())))?,
            SameSession::Reject => {
                if !file.try_lock_exclusive().unwrap_or(false) {
                    return Err(LocalError::SessionBusy(session.id.clone()));
                }
            }
        }
        let slot = match max_sessions {
            Some(n) => Some(take_slot(data_root, n.max(1))?),
            None => None,
        };
        Ok(TurnGuard {
            _session: file,
            _slot: slot,
        })
    }
}

/// Waits for one of `n` slot locks: a process-crossing semaphore.
fn take_slot(data_root: &Path, n: usize) -> Result<File, LocalError> {
    let dir = data_root.join("locks");
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    loop {
        for i in 0..n {
            let file = open_lock(&dir.join(format!("slot-{i}.lock")))?;
            if file.try_lock_exclusive().unwrap_or(false) {
                return Ok(file);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
