//! Typed client of the worker API, for the operator and `kube-harness exec` (which port-forwards
//! to a local port and points this client at it).
//!
//! No retries here: an exec is not idempotent unless it carries a step key, so whether to retry
//! is the caller's decision (with a step key, retrying is safe: the worker replays).

use crate::worker_api::{
    ArchiveWritten, CommitRequest, EndTurnRequest, EndTurnResponse, ErrorBody, ExecRequest,
    ExecResponse, ExecStreamLine, FileWritten, Health, LogPage, OpenTurnRequest, OpenTurnResponse,
    PersistentCommit, Status, NDJSON,
};
use kube_harness_bounds::body::{self, chain, BodyError};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Why a call failed. A command that ran and failed is NOT an error: it is an
/// [`ExecResponse`] with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum WorkerClientError {
    /// The worker answered with an error (`code` as in `model::code`).
    #[error("worker refused the request ({status} {code}): {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// The worker could not be reached or the connection broke (the pod died mid-command, a
    /// port-forward closed): the command's fate is unknown; retry with a step key to find out.
    #[error("cannot reach the worker: {0}")]
    Transport(String),
    #[error("invalid worker response: {0}")]
    Decode(String),
    #[error("cannot build the client: {0}")]
    Build(String),
}

impl WorkerClientError {
    /// The API error code, when the worker answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            WorkerClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            WorkerClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

#[derive(Clone)]
pub struct WorkerClient {
    http: reqwest::Client,
    base_url: String,
    token: String,
    max_answer_bytes: usize,
}

/// What a `?path=` value leaves as it is: letters, digits, `-._~` and the slashes between names;
/// everything else (`+`, spaces, `%`, `&`, `#`, non-ASCII) is percent-encoded.
const PATH_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// Default of [`WorkerClient::with_max_answer_bytes`]: 64 MiB (an end-turn answer lists every
/// file the turn changed).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 64 << 20;

impl WorkerClient {
    /// `base_url` like `http://127.0.0.1:18080`; `token` from the session's Secret. Requests have
    /// no overall timeout (a command may run up to the worker's limit); connecting times out
    /// after 10 s.
    pub fn new(
        base_url: impl Into<String>,
        token: impl Into<String>,
    ) -> Result<Self, WorkerClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| WorkerClientError::Build(e.to_string()))?;
        Ok(WorkerClient {
            http,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            token: token.into(),
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
        })
    }

    /// The same client over `http` (its own connect timeout, pool, time limits).
    pub fn with_http(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// Caps what is read of an answer; a larger one is a `Decode` error, never read whole.
    pub fn with_max_answer_bytes(mut self, limit: usize) -> Self {
        self.max_answer_bytes = limit;
        self
    }

    /// Runs (or replays) one command.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecResponse, WorkerClientError> {
        self.send(self.http.post(self.url("/v1/exec")).json(req))
            .await
    }

    /// Runs one command with its output streamed (`Accept: application/x-ndjson`): `on_output`
    /// gets each `stdout`/`stderr` line as it arrives; the `result` line is the answer, an
    /// `error` line an `Api` error. Dropping the future (or a connection that breaks) cancels a
    /// command that is still running.
    pub async fn exec_stream(
        &self,
        req: &ExecRequest,
        mut on_output: impl FnMut(&ExecStreamLine),
    ) -> Result<ExecResponse, WorkerClientError> {
        let sent = self
            .http
            .post(self.url("/v1/exec"))
            .header(reqwest::header::ACCEPT, NDJSON)
            .bearer_auth(&self.token)
            .json(req)
            .send()
            .await;
        let mut response = sent.map_err(|e| WorkerClientError::Transport(chain(&e)))?;
        if response.status() != StatusCode::OK {
            return self.decode(Ok(response)).await;
        }
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|e| WorkerClientError::Transport(chain(&e)))?;
            let Some(chunk) = chunk else {
                return Err(WorkerClientError::Transport(
                    "the stream ended without a result line".into(),
                ));
            };
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line: ExecStreamLine = serde_json::from_slice(&line)
                    .map_err(|e| WorkerClientError::Decode(format!("a stream line: {e}")))?;
                match line {
                    ExecStreamLine::Result(response) => return Ok(*response),
                    ExecStreamLine::Error { status, error } => {
                        return Err(WorkerClientError::Api {
                            status,
                            code: error.code,
                            message: error.message,
                        })
                    }
                    ExecStreamLine::Keepalive => {}
                    output => on_output(&output),
                }
            }
            if pending.len() > self.max_answer_bytes {
                return Err(WorkerClientError::Decode(format!(
                    "a stream line over {} bytes",
                    self.max_answer_bytes
                )));
            }
        }
    }

    /// Opens a turn of this client's own (`POST /v1/turns`): its commands and its end carry the
    /// id it answers, and no other client's may run meanwhile (409 `turn-busy`).
    pub async fn open_turn(
        &self,
        req: &OpenTurnRequest,
    ) -> Result<OpenTurnResponse, WorkerClientError> {
        self.send(self.http.post(self.url("/v1/turns")).json(req))
            .await
    }

    /// One page of a run of the session's log (`GET /v1/log`): `run` None is the session's
    /// default run; events after sequence `after`, at most `limit`.
    pub async fn log_page(
        &self,
        run: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<LogPage, WorkerClientError> {
        let mut query: Vec<(&str, String)> =
            vec![("after", after.to_string()), ("limit", limit.to_string())];
        if let Some(run) = run {
            query.push(("run", run.to_string()));
        }
        self.send(self.http.get(self.url("/v1/log")).query(&query))
            .await
    }

    /// Ends the session's open turn; `turn: None` when none was open.
    pub async fn end_turn(&self) -> Result<EndTurnResponse, WorkerClientError> {
        self.end_turn_with(&EndTurnRequest::default()).await
    }

    pub async fn end_turn_with(
        &self,
        req: &EndTurnRequest,
    ) -> Result<EndTurnResponse, WorkerClientError> {
        self.send(self.http.post(self.url("/v1/turns/end")).json(req))
            .await
    }

    /// Writes a kept turn of a Persistent Dir to its source (`POST /v1/persistent/commit`).
    pub async fn commit_persistent(
        &self,
        req: &CommitRequest,
    ) -> Result<PersistentCommit, WorkerClientError> {
        self.send(self.http.post(self.url("/v1/persistent/commit")).json(req))
            .await
    }

    /// Writes one file of the session (`PUT /v1/files`); `data` is streamed (a
    /// `reqwest::Body` made from a file, or bytes).
    pub async fn write_file(
        &self,
        path: &str,
        data: impl Into<reqwest::Body>,
    ) -> Result<FileWritten, WorkerClientError> {
        let request = self
            .http
            .put(self.path_url("/v1/files", path))
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(data);
        self.send(request).await
    }

    /// Reads one file of the session (`GET /v1/files`) into `out` as it arrives; returns its
    /// length. A worker error is an `Api` error, as for every call.
    pub async fn read_file_into<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        path: &str,
        out: &mut W,
    ) -> Result<u64, WorkerClientError> {
        self.download("/v1/files", path, out).await
    }

    /// Unpacks a tar into a directory of the session (`PUT /v1/archive`), streamed.
    pub async fn write_archive(
        &self,
        path: &str,
        tar: impl Into<reqwest::Body>,
    ) -> Result<ArchiveWritten, WorkerClientError> {
        let request = self
            .http
            .put(self.path_url("/v1/archive", path))
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
            .body(tar);
        self.send(request).await
    }

    /// Reads a directory of the session as a tar (`GET /v1/archive`) into `out`; its length.
    pub async fn read_archive_into<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        path: &str,
        out: &mut W,
    ) -> Result<u64, WorkerClientError> {
        self.download("/v1/archive", path, out).await
    }

    async fn download<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        route: &str,
        path: &str,
        out: &mut W,
    ) -> Result<u64, WorkerClientError> {
        use tokio::io::AsyncWriteExt;
        let sent = self
            .http
            .get(self.path_url(route, path))
            .bearer_auth(&self.token)
            .send()
            .await;
        let mut response = sent.map_err(|e| WorkerClientError::Transport(chain(&e)))?;
        if response.status() != StatusCode::OK {
            return self
                .decode::<serde_json::Value>(Ok(response))
                .await
                .and_then(|_| {
                    Err(WorkerClientError::Decode(
                        "the worker answered a file read with JSON".into(),
                    ))
                });
        }
        let mut total: u64 = 0;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| WorkerClientError::Transport(chain(&e)))?
        {
            out.write_all(&chunk)
                .await
                .map_err(|e| WorkerClientError::Transport(format!("writing the file: {e}")))?;
            total = total.saturating_add(chunk.len() as u64);
        }
        out.flush()
            .await
            .map_err(|e| WorkerClientError::Transport(format!("writing the file: {e}")))?;
        Ok(total)
    }

    pub async fn status(&self) -> Result<Status, WorkerClientError> {
        self.send(self.http.get(self.url("/v1/status"))).await
    }

    /// Liveness (no token sent).
    pub async fn healthz(&self) -> Result<Health, WorkerClientError> {
        self.decode(self.http.get(self.url("/healthz")).send().await)
            .await
    }

    /// Readiness (no token sent): `Err` with code `not-ready` while the sandbox is unusable.
    pub async fn readyz(&self) -> Result<Health, WorkerClientError> {
        self.decode(self.http.get(self.url("/readyz")).send().await)
            .await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// `route?path=<path>`, the path percent-encoded by hand: the worker decodes `?path=` as
    /// plain percent-encoding (a `+` is a plus), while reqwest's `query` writes a form (a space
    /// as `+`), so a name with a space would come back with a plus.
    fn path_url(&self, route: &str, path: &str) -> String {
        let encoded = percent_encoding::utf8_percent_encode(path, PATH_VALUE);
        format!("{}{route}?path={encoded}", self.base_url)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, WorkerClientError> {
        self.decode(request.bearer_auth(&self.token).send().await)
            .await
    }

    async fn decode<T: DeserializeOwned>(
        &self,
        sent: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<T, WorkerClientError> {
        let response = sent.map_err(|e| WorkerClientError::Transport(chain(&e)))?;
        let status = response.status();
        let bytes = match body::read(response, self.max_answer_bytes).await {
            Ok(bytes) => bytes,
            Err(e @ BodyError::TooLarge { .. }) => {
                return Err(WorkerClientError::Decode(format!(
                    "the worker's answer: {e}"
                )))
            }
            Err(e) => return Err(WorkerClientError::Transport(e.to_string())),
        };
        if status == StatusCode::OK {
            return serde_json::from_slice(&bytes)
                .map_err(|e| WorkerClientError::Decode(e.to_string()));
        }
        Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => WorkerClientError::Api {
                status: status.as_u16(),
                code: body.error.code,
                message: body.error.message,
            },
            Err(_) => WorkerClientError::Api {
                status: status.as_u16(),
                code: String::new(),
                message: String::from_utf8_lossy(&bytes).into_owned(),
            },
        })
    }
}
