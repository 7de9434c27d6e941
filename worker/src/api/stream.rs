//! The streamed exec (`POST /v1/exec` with `Accept: application/x-ndjson`): one JSON object per
//! line while the command runs, then its result (docs/worker-api.md, "Streaming").
//!
//! The answer is 200 at once; a refusal (busy, session log down, not ready) is then an `error`
//! line with the status the plain exec would have answered. The command runs in its own task,
//! as a plain exec does, and reaches its output through a bounded channel: a client that reads
//! slowly slows the command down within its time limit. A client that goes away drops the
//! channel's receiver, which cancels the command (the sandbox kills its tree; the events say
//! "the command was cancelled"). Output past the result's cap is kept whole in /artifacts
//! ([`super::spill`]). Silences are broken by a `keepalive` line every
//! [`KEEPALIVE`], so that a client that went away during a silent command is noticed when the
//! write fails, not when the command ends.

use super::model::{ErrorDetail, ExecRequest, ExecResponse, ExecStreamLine, NDJSON};
use super::refusal::Refusal;
use super::spill::Spill;
use super::state::Worker;
use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use kube_harness_sandbox::{OutputChunk, OutputStream};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long the stream may stay silent before a `keepalive` line.
pub const KEEPALIVE: Duration = Duration::from_secs(2);
/// Chunks in flight between the command and the client.
const IN_FLIGHT: usize = 16;

/// Starts the command and answers with its stream.
pub fn exec(worker: Arc<Worker>, req: ExecRequest) -> Response {
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    let running = worker.clone();
    let task = tokio::spawn(async move { running.exec_streaming(req, Some(tx)).await });
    let state = Streaming {
        spill: Some(worker.spill()),
        worker,
        rx,
        task: Some(task),
        out: Utf8Carry::default(),
        err: Utf8Carry::default(),
    };
    let lines = futures::stream::unfold(state, |mut st| async move {
        let line = st.next_line().await?;
        Some((Ok::<_, std::convert::Infallible>(line), st))
    });
    let mut response = Body::from_stream(lines).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(NDJSON));
    response
}

struct Streaming {
    worker: Arc<Worker>,
    rx: mpsc::Receiver<OutputChunk>,
    /// `None` once the last line was produced.
    task: Option<JoinHandle<Result<ExecResponse, Refusal>>>,
    out: Utf8Carry,
    err: Utf8Carry,
    /// Output past the result's cap, kept in /artifacts; taken when the result is written.
    spill: Option<Spill>,
}

impl Streaming {
    /// The next line; `None` after the last.
    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            let task = self.task.as_mut()?;
            let chunk = tokio::select! {
                biased;
                chunk = self.rx.recv() => chunk,
                () = tokio::time::sleep(KEEPALIVE) => return Some(encode(&ExecStreamLine::Keepalive)),
            };
            match chunk {
                Some(chunk) => {
                    let is_stdout = matches!(chunk.stream, OutputStream::Stdout);
                    self.worker.metrics().streamed(is_stdout, chunk.data.len());
                    if let Some(spill) = &mut self.spill {
                        spill.push(chunk.stream, &chunk.data);
                    }
                    let (carry, text_of) = match chunk.stream {
                        OutputStream::Stdout => {
                            (&mut self.out, stdout as fn(String) -> ExecStreamLine)
                        }
                        OutputStream::Stderr => {
                            (&mut self.err, stderr as fn(String) -> ExecStreamLine)
                        }
                    };
                    let text = carry.push(&chunk.data);
                    if !text.is_empty() {
                        return Some(encode(&text_of(text)));
                    }
                }
                // Every sender is gone: the command is over. A character left unfinished at the
                // end of either stream goes out (as U+FFFD) first; its answer is the last line.
                None => {
                    for (carry, text_of) in [
                        (&mut self.out, stdout as fn(String) -> ExecStreamLine),
                        (&mut self.err, stderr as fn(String) -> ExecStreamLine),
                    ] {
                        let text = carry.finish();
                        if !text.is_empty() {
                            return Some(encode(&text_of(text)));
                        }
                    }
                    let done = task.await;
                    self.task = None;
                    let line = match done {
                        Ok(Ok(mut response)) => {
                            if let Some(spill) = self.spill.take() {
                                let (out, err, problems) = spill.finish();
                                for (is_stdout, file) in [(true, &out), (false, &err)] {
                                    if let Some(file) = file {
                                        self.worker.metrics().kept(is_stdout, file.bytes);
                                    }
                                }
                                response.stdout_file = out;
                                response.stderr_file = err;
                                response.output_problems = problems;
                            }
                            ExecStreamLine::Result(Box::new(response))
                        }
                        Ok(Err(refusal)) => error_line(refusal),
                        Err(e) => error_line(self.worker.task_failed("exec", &e)),
                    };
                    return Some(encode(&line));
                }
            }
        }
    }
}

fn stdout(data: String) -> ExecStreamLine {
    ExecStreamLine::Stdout { data }
}

fn stderr(data: String) -> ExecStreamLine {
    ExecStreamLine::Stderr { data }
}

fn error_line(refusal: Refusal) -> ExecStreamLine {
    ExecStreamLine::Error {
        status: refusal.status.as_u16(),
        error: ErrorDetail {
            code: refusal.code.to_string(),
            message: refusal.message,
        },
    }
}

fn encode(line: &ExecStreamLine) -> Bytes {
    let mut bytes = serde_json::to_vec(line).unwrap_or_else(|e| {
        format!(r#"{{"type":"error","status":500,"error":{{"code":"internal","message":"encoding a stream line: {e}"}}}}"#)
            .into_bytes()
    });
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// Output bytes as text, chunk by chunk: a UTF-8 sequence split between two reads is held back
/// until it is whole; bytes that can never be UTF-8 become U+FFFD.
#[derive(Default)]
struct Utf8Carry(Vec<u8>);

impl Utf8Carry {
    /// What is held back (an unfinished character at the end of the output), as text.
    fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.0)).into_owned()
    }

    fn push(&mut self, data: &[u8]) -> String {
        self.0.extend_from_slice(data);
        let mut text = String::new();
        loop {
            match std::str::from_utf8(&self.0) {
                Ok(valid) => {
                    text.push_str(valid);
                    self.0.clear();
                    return text;
                }
                Err(e) => {
                    let (valid, rest) = self.0.split_at(e.valid_up_to());
                    text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // An incomplete sequence at the end: kept for the next chunk.
                        None => {
                            self.0 = rest.to_vec();
                            return text;
                        }
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            self.0 = rest.get(bad..).unwrap_or_default().to_vec();
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Carry;

    #[test]
    fn a_character_split_between_chunks_arrives_whole() {
        let mut carry = Utf8Carry::default();
        let euro = "€".as_bytes();
        assert_eq!(carry.push(&[b'a', euro[0]]), "a");
        assert_eq!(carry.push(&euro[1..]), "€");
        assert_eq!(carry.push(&[0xff, b'b']), "\u{fffd}b");
        assert_eq!(carry.push(b""), "");
        // An unfinished character at the very end is given out when the stream ends.
        assert_eq!(carry.push(&[b'c', euro[0], euro[1]]), "c");
        assert_eq!(carry.finish(), "\u{fffd}");
        assert_eq!(carry.finish(), "");
    }
}
