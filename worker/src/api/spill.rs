//! A streamed exec's output kept whole: once a stream outgrows the result's cap (1 MiB, the
//! sandbox's `max_output_bytes`), everything it printed, from its first byte, goes to a file
//! under `/artifacts/trace/` (where the trace keeps its large payloads, so the file is no file
//! event of the command's), and the result names the file (`stdoutFile`, `stderrFile`).
//!
//! Commands can write `/artifacts`: the directory is opened beneath the mount's trusted root and
//! the file created new, never through a symlink (`safe_fs`); one planted in the way means the
//! output is not kept, and the result's `note` says so. A file stops growing at
//! `--max-file-bytes` (`complete: false`); the stream to the client goes on.

use kube_harness_protocol::worker_api::OutputFile;
use kube_harness_runtime::trace_file;
use kube_harness_sandbox::OutputStream;
use kube_harness_workspace::spec::WorkspaceSpec;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;

/// Both streams of one command.
pub struct Spill {
    /// The session's mounts: where `/artifacts` is.
    spec: WorkspaceSpec,
    /// Bytes a stream may reach before it is kept in a file.
    cap: usize,
    /// Largest file written.
    max_bytes: u64,
    out: StreamSpill,
    err: StreamSpill,
}

/// One stream: its first `cap` bytes in memory until it outgrows them, then a file.
#[derive(Default)]
struct StreamSpill {
    held: Vec<u8>,
    file: Option<(File, String)>,
    hash: Sha256,
    seen: u64,
    written: u64,
    /// A write failed: the file holds only the first `written` bytes.
    cut: bool,
    /// Why the output is not (wholly) kept; once set, nothing more is written.
    failed: Option<String>,
}

impl Spill {
    pub fn new(spec: &WorkspaceSpec, cap: usize, max_bytes: u64) -> Spill {
        Spill {
            spec: spec.clone(),
            cap,
            max_bytes,
            out: StreamSpill::default(),
            err: StreamSpill::default(),
        }
    }

    /// Takes one chunk of a stream's output, as it streams to the client.
    pub fn push(&mut self, stream: OutputStream, data: &[u8]) {
        let (s, name) = match stream {
            OutputStream::Stdout => (&mut self.out, "stdout"),
            OutputStream::Stderr => (&mut self.err, "stderr"),
        };
        s.seen = s.seen.saturating_add(data.len() as u64);
        if s.failed.is_some() {
            return;
        }
        if s.file.is_none() {
            if s.held.len().saturating_add(data.len()) <= self.cap {
                s.held.extend_from_slice(data);
                return;
            }
            match trace_file::create(&self.spec, &format!("{name}.txt")) {
                Ok(created) => {
                    s.file = Some((created.file, created.path));
                    let held = std::mem::take(&mut s.held);
                    s.write(&held, self.max_bytes);
                }
                Err(why) => {
                    s.failed = Some(format!(
                        "{name} outgrew the result's cap but was not kept: {why}"
                    ));
                    s.held = Vec::new();
                    return;
                }
            }
        }
        s.write(data, self.max_bytes);
    }

    /// The files written (stdout, stderr) and a note for each stream that could not be kept.
    pub fn finish(self) -> (Option<OutputFile>, Option<OutputFile>, Vec<String>) {
        let mut notes = Vec::new();
        let mut done = |s: StreamSpill| {
            if let Some(why) = s.failed {
                notes.push(why);
            }
            let (mut file, path) = s.file?;
            let _ = file.flush();
            Some(OutputFile {
                path,
                bytes: s.written,
                sha256: hex::encode(s.hash.finalize()),
                complete: !s.cut && s.written == s.seen,
            })
        };
        let out = done(self.out);
        let err = done(self.err);
        (out, err, notes)
    }
}

impl StreamSpill {
    fn write(&mut self, data: &[u8], max_bytes: u64) {
        let room = max_bytes.saturating_sub(self.written);
        let take = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let Some((file, path)) = &mut self.file else {
            return;
        };
        let part = &data[..take];
        if part.is_empty() {
            return;
        }
        match file.write_all(part) {
            Ok(()) => {
                self.hash.update(part);
                self.written = self.written.saturating_add(part.len() as u64);
            }
            Err(e) => {
                // What was written stays, named in the result with `complete: false`; a chunk
                // written in part is cut off, so the file is exactly `written` bytes (what the
                // hash covers). If even that fails, the file is not named at all.
                let cut_back = file.set_len(self.written).is_ok();
                self.failed = Some(format!(
                    "writing {path} failed after {} bytes: {e}",
                    self.written
                ));
                self.cut = true;
                if !cut_back {
                    self.file = None;
                }
            }
        }
    }
}
