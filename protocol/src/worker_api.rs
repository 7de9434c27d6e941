//! The wire model of the worker API, shared by the server and [`crate::WorkerClient`] so
//! the two cannot drift apart. Field names are camelCase on the wire.

use crate::trace::{Classification, TurnUsage};
use crate::{CommandOutcome, TraceEvent};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest accepted `runId` / `stepKey`: a step's idempotency keys must stay under the session
/// log's 200-character limit.
pub const MAX_KEY_LEN: usize = 128;
/// Longest accepted script: bash receives it as one argument, which the kernel caps at 128 KiB
/// (MAX_ARG_STRLEN), and the runtime wraps it with a few lines of its own.
pub const MAX_SCRIPT_BYTES: usize = 120 * 1024;

/// `POST /v1/exec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecRequest {
    pub script: String,
    /// The session log run the command's events go to; defaults to the worker's session name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// With `runId` (or the default run): the step's identity for replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_key: Option<String>,
    /// Wall-clock limit of this command; at most the worker's `--max-timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Also return the classifier's decision and reasons (costs one more classification).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explain: bool,
    /// The turn this command belongs to, as `POST /v1/turns` gave it: while a turn opened that
    /// way is open, a command without its id is refused with 409 `turn-busy` (one client's turn
    /// at a time); a command naming a turn that ended gets 409 `turn-ended`. Without it, and with
    /// no such turn open, the command runs in the session's shared turn (opened if none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

impl ExecRequest {
    pub fn new(script: impl Into<String>) -> Self {
        ExecRequest {
            script: script.into(),
            run_id: None,
            step_key: None,
            timeout_ms: None,
            explain: false,
            turn_id: None,
        }
    }

    /// The same request with a replay identity.
    pub fn step(mut self, run_id: impl Into<String>, step_key: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self.step_key = Some(step_key.into());
        self
    }
}

/// The answer to `POST /v1/exec`: the command's outcome and the trace events it emitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecResponse {
    /// stdout, stderr, exitCode, tier, timedOut, truncated: at the top level of the JSON.
    #[serde(flatten)]
    pub outcome: CommandOutcome,
    /// With `explain`: the classifier's decision and reasons.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "sorted_keys"
    )]
    pub classification: Option<Classification>,
    /// Events of this command (empty for a replayed step: they are in the session log already).
    pub events: Vec<TraceEvent>,
    /// The result was read from the session log; nothing ran.
    pub replayed: bool,
    pub run_id: String,
    /// Events of this worker not yet in the session log (appended before the next command runs).
    #[serde(default)]
    pub log_pending: usize,
    /// A replayed step whose recorded output could not be returned (its `/artifacts/trace/…`
    /// payload is gone, or was changed after it was recorded): why, one line per stream. The
    /// stream is empty and `truncated` is set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay_problems: Vec<String>,
    /// Streamed exec only: the file holding all of stdout, when it outgrew the result's cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_file: Option<OutputFile>,
    /// Streamed exec only: the same for stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_file: Option<OutputFile>,
    /// Streamed exec only: why output past the cap was not (wholly) kept, one line per stream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_problems: Vec<String>,
}

/// A stream's whole output, kept under `/artifacts/trace/` when it outgrew the result's cap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputFile {
    /// Harness path of the file (`/artifacts/trace/<id>.stdout.txt`).
    pub path: String,
    /// Bytes in the file.
    pub bytes: u64,
    /// SHA-256 of the file's bytes, hex.
    pub sha256: String,
    /// The file holds all the stream printed; false when it stopped at `--max-file-bytes` or a
    /// write failed.
    pub complete: bool,
}

/// The media type that asks `POST /v1/exec` to stream (`Accept: application/x-ndjson`).
pub const NDJSON: &str = "application/x-ndjson";

/// One line of a streamed exec: output while the command runs, a `keepalive` during silences
/// (so that a client that went away is noticed and its command cancelled), then exactly one
/// `result` (the exec response, its fields beside `type`) or `error` line, the last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ExecStreamLine {
    /// Output as the command wrote it (UTF-8; a character split between reads is kept whole,
    /// invalid bytes become U+FFFD).
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    Keepalive,
    Result(Box<ExecResponse>),
    /// A refusal after the stream started (`status` is what the plain exec would have answered).
    Error {
        status: u16,
        error: ErrorDetail,
    },
}

/// `POST /v1/turns/end` (body optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndTurnRequest {
    /// The run the turn's closing events (usage, dispose failures) go to; default: the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The turn to end, as `POST /v1/turns` gave it: a turn opened that way is ended only by a
    /// request naming it (409 `turn-busy` otherwise). Naming a turn that already ended answers
    /// `turn: null`, so ending twice is safe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// Most events a `GET /v1/log` page holds (and its default `limit`).
pub const MAX_LOG_PAGE: usize = 1000;

/// The answer to `GET /v1/log?run=R&after=N&limit=L`: one page of a run of the session's log,
/// as the session log keeps it (`kube-harness trace` and `doctor` read sessions through it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogPage {
    /// The run as asked (`run`, or the session's default run), without the worker's scope.
    pub run: String,
    pub events: Vec<LoggedEvent>,
    /// Pass as `after` for the next page; absent at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// One event of the session log: a trace event's `type` and `data` with the log's own position
/// and commit time (the log keeps no more of the trace line: not its turn or its time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoggedEvent {
    /// Position in the run, from 1, gapless.
    pub sequence: u64,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: Value,
    /// When the log committed it, milliseconds since the Unix epoch.
    pub recorded_at_ms: u64,
}

impl LoggedEvent {
    /// As a trace line of session `session`: `seq` is the log's sequence, `atMs` its commit
    /// time, `turnId` empty (the log does not keep it).
    pub fn trace_event(&self, session: &str) -> TraceEvent {
        TraceEvent {
            schema: crate::trace::TRACE_SCHEMA.to_string(),
            kind: self.kind.clone(),
            at_ms: self.recorded_at_ms,
            session_id: session.to_string(),
            turn_id: String::new(),
            seq: self.sequence,
            data: self.data.clone(),
        }
    }
}

/// `POST /v1/turns` (body optional): opens a turn for one client. The session runs one turn at a
/// time: while it is open, commands and end-turn requests that do not carry its id are refused
/// with 409 `turn-busy`, and opening another is too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenTurnRequest {
    /// Who opens it (a host name, a program, an agent's name: at most 128 bytes, no control
    /// characters), named in the `turn-busy` answers other clients get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// The answer to `POST /v1/turns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenTurnResponse {
    /// What the turn's commands and its end carry as `turnId`.
    pub turn_id: String,
    /// A turn with no command for this long is ended by the worker (as by `POST /v1/turns/end`,
    /// its changes merged back), so an abandoned turn does not hold the session.
    pub idle_timeout_ms: u64,
}

/// The answer to `POST /v1/turns/end`. `turn` is `None` when no turn was open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndTurnResponse {
    pub turn: Option<TurnSummary>,
}

/// A finished turn: the runtime's usage report and the files its commands changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnSummary {
    pub turn_id: String,
    pub commands: u64,
    /// `Turn::end`'s value, the data of the turn's `harness.turn.usage` event: stayedOnTier0,
    /// tier0 figures, higherTier, escalations, refusals. Kept as the runtime returns it (the
    /// readers index it); its schema is [`TurnUsage`].
    #[schemars(with = "TurnUsage")]
    pub usage: Value,
    /// Last change per harness path during the turn, sorted by path; at most the worker's
    /// `--max-file-events` paths.
    pub file_changes: Vec<FileChangeSummary>,
    /// File changes of the turn not in `fileChanges`: left out of a command's (or the merge-back's)
    /// events past `--max-file-events` (`harness.file.truncated`), or to paths past the list's
    /// bound.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub file_changes_omitted: u64,
    /// Events of the turn's end (usage, dispose failures).
    pub events: Vec<TraceEvent>,
    /// What became of each writable Persistent Dir at the turn's end (none without them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub persistent: Vec<PersistentCommit>,
}

/// One Persistent Dir at the end of a turn, or answering `POST /v1/persistent/commit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistentCommit {
    /// The dir's name (`/persistent/<dir>`).
    pub dir: String,
    /// The turn whose end state this is.
    pub turn_id: String,
    pub outcome: CommitOutcome,
    /// Why, for `conflict` and `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `committed`: the source now holds the turn's version. `unchanged`: an `after-turn` dir the
/// turn did not change (its file events name nothing under it): nothing was copied. `kept`: kept for a manual commit
/// (a `manual` dir, or an `after-turn` dir in `conflict`). `conflict`: another session committed
/// the source after this one loaded it, so this turn's version was kept instead of written
/// (first commit wins; `POST /v1/persistent/commit` writes it anyway). `failed`: nothing was
/// written (the message says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CommitOutcome {
    Committed,
    Unchanged,
    Kept,
    Conflict,
    Failed,
}

/// `POST /v1/persistent/commit`: write a kept turn of a dir to its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitRequest {
    pub dir: String,
    pub turn_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileChangeSummary {
    pub path: String,
    /// `created`, `modified` or `deleted`.
    pub change: String,
}

/// `GET /v1/status`: what the operator copies into the HarnessSession status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub session: String,
    /// Current tier: 0, or the higher tier a turn escalated to.
    pub tier: u8,
    pub busy: bool,
    /// Turns ended since the worker started.
    pub turns: u64,
    pub commands: CommandCounts,
    pub refusals: u64,
    /// RFC 3339, UTC: the last exec or end-turn (the start time before any).
    pub last_activity: String,
    pub ready: bool,
    /// A worker adopted from a warm pool: [`adoption_settings`] of what it was bound to, so the
    /// operator can check the pod serves exactly its session before calling it Ready. Absent on
    /// a worker started for its session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<String>,
    /// This worker process's id: its counters start at zero, so the operator adds a new
    /// instance's counters to what earlier ones counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// RFC 3339, UTC: when this worker process started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CommandCounts {
    pub tier0: u64,
    pub tier1: u64,
}

/// `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Every error: `{"error": {"code", "message"}}`: the one body type of every service, the kit's.
pub use crate::error::{ErrorBody, ErrorDetail};

/// Stable error codes (clients branch on them).
pub mod code {
    pub const UNAUTHORIZED: &str = "unauthorized";
    pub const BAD_REQUEST: &str = "bad-request";
    pub const PAYLOAD_TOO_LARGE: &str = "payload-too-large";
    pub const NOT_FOUND: &str = "not-found";
    pub const METHOD_NOT_ALLOWED: &str = "method-not-allowed";
    pub const SESSION_BUSY: &str = "session-busy";
    /// Another client's turn is open (`POST /v1/turns`): its id was not given.
    pub const TURN_BUSY: &str = "turn-busy";
    /// The turn named by `turnId` is not open any more (ended, by its idle bound, or the worker
    /// restarted): open another.
    pub const TURN_ENDED: &str = "turn-ended";
    pub const STEP_INCOMPLETE: &str = "step-incomplete";
    pub const STEP_CONFLICT: &str = "step-conflict";
    pub const SESSION_LOG_UNAVAILABLE: &str = "session-log-unavailable";
    pub const NOT_READY: &str = "not-ready";
    pub const SHUTTING_DOWN: &str = "shutting-down";
    /// A broken internal invariant (a panic inside a request): see `Broken`.
    pub const WORKER_BROKEN: &str = "worker-broken";
    /// A file path that is not a plain harness path under a mount, or runs through a symlink.
    pub const BAD_PATH: &str = "bad-path";
    /// The path names a directory, a symlink or a special file where a regular file is meant.
    pub const NOT_A_FILE: &str = "not-a-file";
    /// The mount table (or a read-only Persistent Dir) does not allow writing there.
    pub const READ_ONLY: &str = "read-only";
    /// The turn runs on a higher tier, whose copy of the workspace the worker's files are not.
    pub const TURN_ESCALATED: &str = "turn-escalated";
    /// An uploaded tar with an entry that is not a plain relative file, directory or symlink,
    /// or one that lies below a symlink or a file.
    pub const BAD_ARCHIVE: &str = "bad-archive";
    /// An upload's body sent nothing for a while (`408`): nothing was written.
    pub const BODY_TIMEOUT: &str = "body-timeout";
    /// Too many uploads are being received at once (`429`): try again.
    pub const UPLOADS_BUSY: &str = "uploads-busy";
    /// The worker's own filesystem work failed (disk full, permissions).
    pub const IO_FAILED: &str = "io-failed";
    /// A pooled worker was already adopted, or an adoption of it failed (it is one-use).
    pub const ALREADY_ADOPTED: &str = "already-adopted";
    /// An adoption's arguments, tokens or skills could not be bound.
    pub const ADOPTION_FAILED: &str = "adoption-failed";
    /// A pooled worker that no session has adopted yet serves nothing else.
    pub const NOT_ADOPTED: &str = "not-adopted";
}

/// The answer to `PUT /v1/archive?path=…`: how many entries were placed, and their events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveWritten {
    pub path: String,
    /// Entries created or changed (directories that were there already are not counted).
    pub entries: u64,
    pub bytes: u64,
    /// The `harness.file.*` events (bounded as a command's are; `harness.file.truncated` counts
    /// the rest).
    pub events: Vec<TraceEvent>,
    #[serde(default)]
    pub log_pending: usize,
    /// Entries whose mode was not set as the archive has it, one line each (the setuid, setgid
    /// and sticky bits are never set; a directory stays open to its owner; a directory that was
    /// there keeps its mode): at most 100, then a line counting the rest. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The answer to `PUT /v1/files?path=…`: what was written and the file event it made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileWritten {
    pub path: String,
    /// `created` or `modified`.
    pub change: String,
    pub bytes: u64,
    /// The upload's `harness.file.*` event (also appended to the session log).
    pub events: Vec<TraceEvent>,
    /// Events of this worker not yet in the session log.
    #[serde(default)]
    pub log_pending: usize,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Writes a value as a `serde_json::Value` would be written: object keys sorted (serde_json keeps
/// its maps ordered by key), as this body's untyped field was before it was typed.
fn sorted_keys<T: Serialize, S: serde::Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// `POST /v1/adopt`: binds a pooled worker (started with `--adopt-token-file`, before any session
/// existed) to one session, once. The bearer is the pool's token, never a session's. Everything
/// session-specific travels here; the worker then runs exactly as one started with these
/// arguments and files (docs/operator.md "Warm pool").
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdoptRequest {
    /// `kube-harness worker` arguments for the session (`WorkerArgs::to_args`); `--listen`,
    /// `--workspace-root` and `--adopt-token-file` are ignored (the pooled worker keeps its
    /// socket and layout, and cannot be adopted twice), and so are the paths of `--token-file`
    /// and `--session-log-token-file`: the tokens below go where the pooled worker's own
    /// arguments say (`--session-log-token-file` only says whether a session-log token comes).
    pub args: Vec<String>,
    /// The session's bearer token (written to the pooled worker's `--token-file`): visible
    /// ASCII, one piece.
    pub token: String,
    /// The session's session-log token (written beside it as `session-log-token`, or to the
    /// pooled worker's own `--session-log-token-file`): visible ASCII, one piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_log_token: Option<String>,
    /// The session's skills, written under `/.agents` before the first command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<SkillFile>,
}

impl std::fmt::Debug for AdoptRequest {
    /// Without the tokens: a request may be logged.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdoptRequest")
            .field("args", &self.args)
            .field("skills", &self.skills.len())
            .finish_non_exhaustive()
    }
}

/// One file under `/.agents`: `path` relative to it (plain names, no `..`), content base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillFile {
    pub path: String,
    pub content_base64: String,
}

/// `POST /v1/adopt`'s answer: the session now served and [`adoption_settings`] of the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdoptResponse {
    pub session: String,
    pub settings: String,
}

/// A digest of everything an adoption binds but the tokens (which the operator proves by using
/// them): the arguments and the skills, length-prefixed so that no two requests share one.
pub fn adoption_settings(req: &AdoptRequest) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(b"args");
    for a in &req.args {
        field(a.as_bytes());
    }
    field(b"skills");
    for s in &req.skills {
        field(s.path.as_bytes());
        field(s.content_base64.as_bytes());
    }
    let digest = h.finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
