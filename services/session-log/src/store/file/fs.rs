//! The three filesystem operations the file store's durability depends on, behind a trait so
//! tests can make each of them fail and can drop bytes that were written but never synced
//! ([`FaultFs`]), as a power loss would.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Write, fdatasync and directory fsync, as the file store uses them.
pub trait SyncFs: Send + Sync + 'static {
    fn write_all(&self, file: &mut File, buf: &[u8]) -> io::Result<()>;
    fn sync_data(&self, file: &File) -> io::Result<()>;
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real thing.
pub struct RealFs;

impl SyncFs for RealFs {
    fn write_all(&self, file: &mut File, buf: &[u8]) -> io::Result<()> {
        file.write_all(buf)
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// An operation [`FaultFs`] can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsOp {
    /// Fails after writing the first half of the buffer (a short, torn write).
    Write,
    SyncData,
    SyncDir,
}

/// Real files, with injected failures and a record of what was made durable.
///
/// `lose_unsynced` truncates the data file to its length at the last successful `sync_data`,
/// which is what a machine crash may leave behind: bytes written but not synced are gone.
pub struct FaultFs {
    armed: Mutex<Vec<(FsOp, bool)>>,
    durable_len: AtomicU64,
    calls: Mutex<Vec<FsOp>>,
}

impl Default for FaultFs {
    fn default() -> Self {
        Self::new()
    }
}

impl FaultFs {
    pub fn new() -> Self {
        Self {
            armed: Mutex::new(Vec::new()),
            durable_len: AtomicU64::new(0),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// The next call of `op` fails with EIO.
    pub fn fail_next(&self, op: FsOp) {
        self.armed.lock().unwrap().push((op, false));
    }

    /// Every call of `op` fails (an operation the filesystem does not support).
    pub fn fail_always(&self, op: FsOp) {
        self.armed.lock().unwrap().push((op, true));
    }

    /// Operations called so far, in order.
    pub fn calls(&self) -> Vec<FsOp> {
        self.calls.lock().unwrap().clone()
    }

    /// Length of the data file at the last successful `sync_data`.
    pub fn durable_len(&self) -> u64 {
        self.durable_len.load(Ordering::SeqCst)
    }

    /// Simulates a machine crash: cuts `path` back to what was synced.
    pub fn lose_unsynced(&self, path: &PathBuf) -> io::Result<()> {
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.set_len(self.durable_len())?;
        f.sync_all()
    }

    fn trip(&self, op: FsOp) -> bool {
        self.calls.lock().unwrap().push(op);
        let mut armed = self.armed.lock().unwrap();
        match armed.iter().position(|(o, _)| *o == op) {
            Some(i) => {
                if !armed[i].1 {
                    armed.remove(i);
                }
                true
            }
            None => false,
        }
    }
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} failure (EIO)"))
}

impl SyncFs for FaultFs {
    fn write_all(&self, file: &mut File, buf: &[u8]) -> io::Result<()> {
        if self.trip(FsOp::Write) {
            file.write_all(&buf[..buf.len() / 2])?;
            return Err(eio("write"));
        }
        file.write_all(buf)
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        if self.trip(FsOp::SyncData) {
            return Err(eio("fdatasync"));
        }
        file.sync_data()?;
        self.durable_len
            .store(file.metadata()?.len(), Ordering::SeqCst);
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.trip(FsOp::SyncDir) {
            return Err(eio("directory fsync"));
        }
        RealFs.sync_dir(dir)
    }
}
