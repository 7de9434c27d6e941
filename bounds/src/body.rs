//! Bounded HTTP bodies on the client side: read an answer up to a limit, spool one to a file,
//! stream a file out, cap a writer. Shared by the worker API's client, the Tier-1 agent's and pod
//! shell's clients and the servers that stream a file, so that no body is ever read whole into
//! memory unbounded. The server side (refuse past a limit, hold to a pace, linger) is the service
//! kit's `body`, which re-exports this module.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// Buffer of the reads and writes of a spool file: what a spooled archive costs in memory.
pub const SPOOL_BUFFER: usize = 512 << 10;

/// Why a response body was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Over the limit: declared so by its Content-Length, or cut off while streaming the
    /// moment the count passed the limit.
    #[error("the body is over the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    /// A request body that did not keep its [`BodyPace`] (or, read whole, its deadline).
    #[error("the request body came too slowly ({bytes} bytes in {elapsed:.1?}): {why}")]
    TooSlow {
        bytes: u64,
        elapsed: std::time::Duration,
        why: String,
    },
    #[error("reading the body: {0}")]
    Read(String),
    #[error("spooling the body: {0}")]
    Spool(String),
}

fn over(declared: Option<u64>, limit: u64) -> Result<(), BodyError> {
    match declared {
        Some(len) if len > limit => Err(BodyError::TooLarge { limit }),
        _ => Ok(()),
    }
}

/// Reads a small answer (JSON) of at most `limit` bytes into memory.
pub async fn read(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, BodyError> {
    let limit64 = u64::try_from(limit).unwrap_or(u64::MAX);
    over(response.content_length(), limit64)?;
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| BodyError::Read(chain(&e)))?
    {
        if chunk.len() > limit.saturating_sub(bytes.len()) {
            return Err(BodyError::TooLarge { limit: limit64 });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Reads a JSON answer of at most `limit` bytes.
pub async fn json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
    limit: usize,
) -> Result<T, String> {
    let bytes = read(response, limit).await.map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| format!("invalid JSON: {e}"))
}

/// The first `limit` bytes of an error answer, as text; the rest is not read (the
/// connection is dropped instead).
pub async fn text_prefix(mut response: reqwest::Response, limit: usize) -> String {
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = limit.saturating_sub(bytes.len());
        bytes.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
        if bytes.len() >= limit {
            break;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Streams a body (an archive) into an unnamed temporary file in `dir`, counting as it
/// arrives and stopping the moment the count passes `limit`. The file has no name (
/// `O_TMPFILE` where the file system has it, else unlinked at once), so it is gone when
/// dropped, also after an error half-way, and nothing is left behind even if the process
/// dies. Returns the file, rewound, and its length.
pub async fn spool(
    mut response: reqwest::Response,
    dir: &Path,
    limit: u64,
) -> Result<(std::fs::File, u64), BodyError> {
    over(response.content_length(), limit)?;
    let spool_err = |e: std::io::Error| BodyError::Spool(format!("{}: {e}", dir.display()));
    let file = tempfile::tempfile_in(dir).map_err(spool_err)?;
    let mut file = std::io::BufWriter::with_capacity(SPOOL_BUFFER, file);
    let mut total: u64 = 0;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| BodyError::Read(chain(&e)))?
    {
        let len = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
        total = total.saturating_add(len);
        if total > limit {
            return Err(BodyError::TooLarge { limit });
        }
        file.write_all(&chunk).map_err(spool_err)?;
    }
    let mut file = file.into_inner().map_err(|e| spool_err(e.into_error()))?;
    file.seek(SeekFrom::Start(0)).map_err(spool_err)?;
    Ok((file, total))
}

/// A writer that refuses to go past `limit` bytes (and remembers that it was asked to).
pub struct Capped<W> {
    pub inner: W,
    limit: u64,
    /// Bytes taken so far.
    pub written: u64,
    /// Whether a write was refused for the limit.
    pub over: bool,
}

impl<W> Capped<W> {
    pub fn new(inner: W, limit: u64) -> Self {
        Capped {
            inner,
            limit,
            written: 0,
            over: false,
        }
    }
}

impl<W: Write> Write for Capped<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let len = u64::try_from(buf.len()).unwrap_or(u64::MAX);
        if len > self.limit.saturating_sub(self.written) {
            self.over = true;
            return Err(std::io::Error::other(format!(
                "over the limit of {} bytes",
                self.limit
            )));
        }
        let n = self.inner.write(buf)?;
        self.written = self
            .written
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A request body streamed from `file` (from its start), in chunks of [`SPOOL_BUFFER`].
pub fn from_file(file: &std::fs::File) -> std::io::Result<reqwest::Body> {
    let mut file = file.try_clone()?;
    file.seek(SeekFrom::Start(0))?;
    Ok(reqwest::Body::wrap_stream(file_chunks(file)))
}

/// The bytes of a file as a stream of chunks of up to [`SPOOL_BUFFER`], read ahead by one
/// blocking task through a small channel (at most 4 chunks in flight): one hand-off to the
/// blocking pool per file rather than one per chunk, which is what a contended machine
/// makes expensive. The reader stops when the stream is dropped (the peer went away).
pub fn file_chunks(
    mut file: std::fs::File,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::task::spawn_blocking(move || loop {
        use std::io::Read;
        let mut buf = vec![0u8; SPOOL_BUFFER];
        let item = match file.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                buf.truncate(n);
                Ok(bytes::Bytes::from(buf))
            }
            Err(e) => Err(e),
        };
        let failed = item.is_err();
        if tx.blocking_send(item).is_err() || failed {
            return;
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

/// reqwest's top-level message hides the cause ("error decoding response body"); keep the chain.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
