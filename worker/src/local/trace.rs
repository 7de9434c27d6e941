//! `trace.ndjson`: the session's append-only trace, one `lh.trace.v2` event per line.

use kube_harness_runtime::{EventSink, TraceEvent};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;

/// Appends each event as one line. Write errors are counted, never raised: tracing must not fail
/// a turn (the runtime's results are returned to the agent either way).
pub struct FileTrace {
    file: Mutex<File>,
    failures: std::sync::atomic::AtomicU64,
}

impl FileTrace {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        // The session folder is the host's, but never follow a symlink at the trace's name.
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        Ok(FileTrace {
            file: Mutex::new(file),
            failures: Default::default(),
        })
    }

    /// Events that could not be written.
    pub fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads a trace file back, skipping nothing: a malformed line is an error naming its number.
    pub fn read(path: &Path) -> Result<Vec<TraceEvent>, TraceReadError> {
        let mut text = String::new();
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .and_then(|mut f| std::io::Read::read_to_string(&mut f, &mut text))
            .map_err(|source| TraceReadError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|source| TraceReadError::Line {
                    path: path.to_path_buf(),
                    line: i.saturating_add(1),
                    source,
                })
            })
            .collect()
    }
}

/// A trace file that could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum TraceReadError {
    #[error("{}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}: {source}", path.display())]
    Line {
        path: std::path::PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
}

impl EventSink for FileTrace {
    fn emit(&self, event: &TraceEvent) {
        let mut line = match serde_json::to_vec(event) {
            Ok(line) => line,
            Err(_) => {
                self.failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return;
            }
        };
        line.push(b'\n');
        let mut file = self.file.lock().expect("trace lock");
        if file.write_all(&line).is_err() {
            self.failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
