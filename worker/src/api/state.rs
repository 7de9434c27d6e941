//! The worker's one session: its open turn (created lazily by the first exec, kept until
//! end-turn), the shell state carried between turns, usage counters, and the exec / end-turn
//! logic the HTTP handlers call.

use super::config::{SameSession, WorkerConfig};
use super::log::{keyed, Capture, LogForwarder, StartRecorder};
use super::metrics::{LogFailure, WorkerMetrics};
use super::model::{
    code, ArchiveWritten, CommandCounts, CommitOutcome, CommitRequest, EndTurnResponse,
    ExecRequest, ExecResponse, FileChangeSummary, FileWritten, PersistentCommit, Status,
    TurnSummary,
};
use super::persistent::{CommitError, PersistentDirs};
use super::refusal::Refusal;
use super::relock;
use super::replay::{self, Replay};
use super::tier0::TimedTier0;
use super::{archive, files};
use axum::http::StatusCode;
use futures::FutureExt;
use kube_harness_classify::{ClassifyOptions, Policy};
use kube_harness_runtime::{
    event::Payload, Emitter, NextTier, StartGate, Step, TraceEvent, Turn, TurnConfig,
    WorkspaceTracker,
};
use kube_harness_service_kit::body::BodyHead;
use kube_harness_session_log_client::RunId;
use kube_harness_workspace::FileChange;
use kube_harness_workspace::WorkspaceSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why the worker takes no commands: `/readyz` answers 503 with it (`worker-broken` for
/// [`NotReady::Broken`], `not-ready` otherwise).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("shutting down")]
    ShuttingDown,
    #[error("{}", .0.reason())]
    Broken(Broken),
    /// The Tier-0 sandbox could not be prepared at start-up (a restart would not help).
    #[error("{0}")]
    Sandbox(String),
    /// Commands would run, but their file events would be missing.
    #[error(transparent)]
    Tracking(#[from] kube_harness_runtime::TrackingFailed),
}

/// Why a worker could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("session log client: {0}")]
    SessionLog(#[source] kube_harness_session_log_client::ClientError),
}

/// A broken internal invariant: why the worker takes no commands although its sandbox is fine.
/// `/readyz` answers 503 with the reason, exec 503 `worker-broken` with it (never a run of 500s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    /// A panic inside the runtime left the open turn in an unknown state. Commands are refused
    /// until the turn is ended (`POST /v1/turns/end`), which disposes it (its Tier-1 pod is
    /// merged back and deleted as usual); then the worker takes commands again with a new turn.
    /// Nothing else of the worker is shared with the turn, so that recovery is safe.
    Turn(String),
    /// Nothing in the process can repair it (ending the turn panicked too, or a request panicked
    /// outside the runtime, where what it held is unknown): `/healthz` fails as well, so the
    /// kubelet restarts the container.
    Worker(String),
}

impl Broken {
    /// What the worker answers: the cause and what to do about it.
    pub fn reason(&self) -> String {
        match self {
            Broken::Turn(why) => format!(
                "{why}; the open turn is quarantined and no command runs until it is ended (POST /v1/turns/end)"
            ),
            Broken::Worker(why) => {
                format!("{why}; the worker is broken and must be restarted")
            }
        }
    }

    pub fn refusal(&self) -> Refusal {
        Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            code::WORKER_BROKEN,
            self.reason(),
        )
    }
}

/// The text of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

struct OpenTurn {
    turn: Turn,
    turn_id: String,
    capture: Arc<Capture>,
    commands: u64,
    /// Last change per harness path, bounded (see [`TurnFiles`]).
    files: TurnFiles,
}

/// Guarded by the session lock: one exec or end-turn at a time.
struct Slot {
    turn: Option<OpenTurn>,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
    exec_counter: u64,
}

#[derive(Default)]
struct Counters {
    turns: AtomicU64,
    tier0: AtomicU64,
    tier1: AtomicU64,
    refusals: AtomicU64,
    tier: AtomicU64,
    last_activity_ms: AtomicU64,
}

/// One worker: one session.
pub struct Worker {
    config: WorkerConfig,
    spec: WorkspaceSpec,
    /// `Err(reason)` when the sandbox could not be prepared at start-up (`/readyz` says why).
    tier0: Result<Arc<TimedTier0>, NotReady>,
    next_tier: Option<Arc<dyn NextTier>>,
    /// The session's Persistent Dirs (`None` without any).
    persistent: Option<Arc<PersistentDirs>>,
    /// The sandbox built after the last load of the Persistent Dirs (its landlock rules are
    /// bound to the loaded directories), for the turns that load nothing.
    loaded_tier0: Mutex<Option<Arc<TimedTier0>>>,
    log: Option<Arc<LogForwarder>>,
    slot: tokio::sync::Mutex<Slot>,
    busy: AtomicBool,
    /// Uploads being spooled at once (see [`UPLOADS_AT_ONCE`]).
    uploads: tokio::sync::Semaphore,
    shutting_down: AtomicBool,
    /// Set by a caught panic (see [`Broken`]).
    broken: Mutex<Option<Broken>>,
    /// Whether the turns' file tracking works (part of readiness).
    tracking: kube_harness_runtime::TrackingHealth,
    counters: Counters,
    /// What `GET /metrics` reports.
    metrics: WorkerMetrics,
    /// Distinguishes this process's idempotency keys from a restarted worker's.
    instance: String,
    /// When this process started (ms since the epoch), reported with `instance`.
    started_ms: u64,
}

impl Worker {
    /// Prepares the sandbox (a failure makes the worker unready, not absent) and the session log
    /// client. `next_tier` is the escalation target; `None` refuses escalations with 126 and a
    /// message naming the missing Tier-1 tier.
    pub fn new(
        config: WorkerConfig,
        next_tier: Option<Arc<dyn NextTier>>,
    ) -> Result<Self, StartError> {
        Self::with_prepared(config, next_tier, None)
    }

    /// [`Worker::new`], taking a sandbox built ahead for this worker's default settings (a
    /// pooled worker's, [`super::tier0::Prepared`]) instead of building one if it fits.
    pub fn with_prepared(
        config: WorkerConfig,
        next_tier: Option<Arc<dyn NextTier>>,
        prepared: Option<super::tier0::Prepared>,
    ) -> Result<Self, StartError> {
        let spec = config.workspace();
        let tracking = kube_harness_runtime::TrackingHealth::default();
        let tier0 = config
            .sandbox()
            .map_err(|e| NotReady::Sandbox(e.to_string()))
            .and_then(|sandbox| {
                TimedTier0::new(
                    sandbox.workspace,
                    sandbox.presentation,
                    sandbox.limits,
                    sandbox.denied,
                    prepared,
                )
                .map(Arc::new)
                .map_err(|e| NotReady::Sandbox(e.to_string()))
            });
        if let Err(reason) = &tier0 {
            tracing::error!("the Tier-0 sandbox is not usable; the worker stays unready: {reason}");
        }
        let log = match &config.session_log {
            Some(cfg) => {
                let client = kube_harness_session_log_client::SessionLogClient::new(
                    &cfg.url,
                    cfg.token.clone(),
                    // Commands wait on the log (fail-closed): bound each attempt well below
                    // the default 30 s so a dead log costs a caller seconds, not minutes.
                    kube_harness_session_log_client::ClientOptions {
                        timeout: Duration::from_secs(5),
                        ..Default::default()
                    },
                )
                .map_err(StartError::SessionLog)?;
                Some(Arc::new(LogForwarder::new(client)))
            }
            None => None,
        };
        Ok(Worker {
            spec,
            tier0,
            persistent: config
                .persistent()
                .map(|p| Arc::new(PersistentDirs::new(p))),
            loaded_tier0: Mutex::new(None),
            next_tier: Some(next_tier.unwrap_or_else(|| Arc::new(super::escalation::NoTier1))),
            log,
            slot: tokio::sync::Mutex::new(Slot {
                turn: None,
                cwd: PathBuf::from(kube_harness_workspace::spec::SESSION),
                env: BTreeMap::new(),
                exec_counter: 0,
            }),
            busy: AtomicBool::new(false),
            uploads: tokio::sync::Semaphore::new(UPLOADS_AT_ONCE),
            shutting_down: AtomicBool::new(false),
            broken: Mutex::new(None),
            tracking,
            counters: Counters {
                last_activity_ms: AtomicU64::new(now_ms()),
                ..Counters::default()
            },
            metrics: WorkerMetrics::default(),
            instance: format!("w{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            started_ms: now_ms(),
            config,
        })
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// `Err(why)` while the worker cannot run commands.
    pub fn readiness(&self) -> Result<(), NotReady> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(NotReady::ShuttingDown);
        }
        if let Some(broken) = self.broken() {
            return Err(NotReady::Broken(broken));
        }
        self.tier0.as_ref().map_err(Clone::clone)?;
        // Commands still run, but their file events are missing: not ready until it recovers.
        Ok(self.tracking.get()?)
    }

    /// `Err(reason)` once the worker is broken beyond what it can repair itself
    /// ([`Broken::Worker`]): `/healthz` fails, so the liveness probe restarts the container.
    /// A quarantined turn is not that (ending it repairs it), nor an unusable sandbox (a
    /// restart would not help; `/readyz` says why).
    pub fn liveness(&self) -> Result<(), Broken> {
        match self.broken() {
            Some(broken @ Broken::Worker(_)) => Err(broken),
            _ => Ok(()),
        }
    }

    /// The broken invariant, if any.
    pub fn broken(&self) -> Option<Broken> {
        relock(&self.broken).clone()
    }

    /// Records a broken invariant; a broken worker is never downgraded to a broken turn.
    pub(crate) fn set_broken(&self, broken: Broken) {
        let mut current = relock(&self.broken);
        if !matches!(*current, Some(Broken::Worker(_))) {
            *current = Some(broken);
        }
    }

    /// A request task that panicked outside the runtime (which `Worker` catches itself): what it
    /// held is unknown, so the worker is marked broken for good and says so, rather than
    /// answering 500 now and whatever that state causes later. (A task that was cancelled, not
    /// panicked, means the runtime is shutting down.)
    pub fn task_failed(&self, what: &str, e: &tokio::task::JoinError) -> Refusal {
        if !e.is_panic() {
            return Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code::SHUTTING_DOWN,
                format!("the {what} task was cancelled: the worker is shutting down"),
            );
        }
        let broken = Broken::Worker(format!("the {what} task panicked"));
        tracing::error!("{}", broken.reason());
        self.set_broken(broken);
        self.broken()
            .map(|b| b.refusal())
            .unwrap_or_else(|| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", what))
    }

    /// Lifts a turn's quarantine (its turn was ended); whether there was one.
    fn clear_turn_broken(&self) -> bool {
        let mut current = relock(&self.broken);
        let was = matches!(*current, Some(Broken::Turn(_)));
        if was {
            *current = None;
        }
        was
    }

    /// Stops taking new commands (SIGTERM); queued ones are answered 503.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn status(&self) -> Status {
        let c = &self.counters;
        Status {
            session: self.config.session.clone(),
            tier: c.tier.load(Ordering::SeqCst) as u8,
            busy: self.busy.load(Ordering::SeqCst),
            turns: c.turns.load(Ordering::SeqCst),
            commands: CommandCounts {
                tier0: c.tier0.load(Ordering::SeqCst),
                tier1: c.tier1.load(Ordering::SeqCst),
            },
            refusals: c.refusals.load(Ordering::SeqCst),
            last_activity: rfc3339(c.last_activity_ms.load(Ordering::SeqCst)),
            ready: self.readiness().is_ok(),
            settings: self.config.adoption.clone(),
            instance: Some(self.instance.clone()),
            started_at: Some(rfc3339(self.started_ms)),
        }
    }

    /// The `GET /metrics` exposition.
    pub fn metrics_text(&self) -> String {
        let c = &self.counters;
        self.metrics.encode(
            self.busy.load(Ordering::SeqCst),
            c.tier.load(Ordering::SeqCst) as u8,
        )
    }

    pub(super) fn metrics(&self) -> &WorkerMetrics {
        &self.metrics
    }

    async fn lock(&self) -> Result<tokio::sync::MutexGuard<'_, Slot>, Refusal> {
        let guard = match self.config.same_session {
            SameSession::Queue => self.slot.lock().await,
            SameSession::Reject => self.slot.try_lock().map_err(|_| {
                Refusal::new(
                    StatusCode::CONFLICT,
                    code::SESSION_BUSY,
                    format!(
                        "session {} is running another command (same-session: reject)",
                        self.config.session
                    ),
                )
            })?,
        };
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code::SHUTTING_DOWN,
                "the worker is shutting down",
            ));
        }
        Ok(guard)
    }

    /// Runs (or replays) one command. `Err` only for what the client must handle differently
    /// from a command result: busy, incomplete step, session log down, not ready, broken.
    pub async fn exec(&self, req: ExecRequest) -> Result<ExecResponse, Refusal> {
        self.exec_streaming(req, None).await
    }

    /// [`Worker::exec`], with the command's output also sent to `output` as it runs (Tier-0; a
    /// higher tier's arrives with the result). Dropping the receiver cancels the command.
    pub async fn exec_streaming(
        &self,
        req: ExecRequest,
        output: Option<kube_harness_sandbox::OutputTap>,
    ) -> Result<ExecResponse, Refusal> {
        let tier0 = self.usable_tier0()?;
        let run = self.log_run(req.run_id.as_deref())?;
        let mut slot = self.lock().await?;
        let _busy = BusyFlag::set(&self.busy);
        self.touch();
        if let Some(log) = &self.log {
            log.flush_pending().await.map_err(|e| {
                self.metrics.log_failed(LogFailure::Start);
                log_down(e)
            })?;
            if let Some(step) = &req.step_key {
                match replay::lookup(log, &self.spec, &run, step)
                    .await
                    .map_err(log_down)?
                {
                    Replay::Recorded(response) => return Ok(*response),
                    Replay::Incomplete(started) => {
                        return Err(Refusal::new(
                            StatusCode::CONFLICT,
                            code::STEP_INCOMPLETE,
                            format!(
                                "step {step:?} of run {run:?} started (session log sequence {}) and never completed: the worker stopped mid-command, so its effects are unknown; it is not run again",
                                started.sequence
                            ),
                        ))
                    }
                    Replay::Run => {}
                }
            }
        }
        // After the replay lookup: a recorded step is answered from the log even now.
        if let Some(broken) = self.broken() {
            return Err(broken.refusal());
        }
        slot.exec_counter = slot.exec_counter.saturating_add(1);
        let prefix = match &req.step_key {
            Some(step) => format!("step:{step}"),
            None => format!("{}:exec-{}", self.instance, slot.exec_counter),
        };
        let slot: &mut Slot = &mut slot;
        let open = match &mut slot.turn {
            Some(open) => open,
            empty => empty.insert(self.begin_turn(tier0, &slot.cwd, &slot.env).await?),
        };
        let step = Step {
            script: &req.script,
            step_key: req.step_key.as_deref(),
            // The same limit whichever tier runs the command.
            timeout: req.timeout_ms.map(Duration::from_millis),
            output,
        };
        // With a session log, the command's start is recorded before it runs (fail-closed).
        let mut recorder = self
            .log
            .as_deref()
            .map(|log| StartRecorder::new(log, &open.capture, &run, &prefix));
        let gate = recorder.as_mut().map(|r| r as &mut dyn StartGate);
        // A panic inside the runtime (a bug, or an input it did not expect) must not take the
        // next request down with it: it is caught here, and the turn it left behind in an
        // unknown state is quarantined (see `Broken`). Unwind safety is asserted because
        // nothing touches that turn afterwards except ending it, which is guarded the same way.
        let stepped = AssertUnwindSafe(open.turn.exec_step(step, gate))
            .catch_unwind()
            .await;
        let events = open.capture.take();
        let rest = recorder.as_ref().map(|r| r.rest(&events));
        let started_key = recorder.and_then(|r| r.started_key);
        let executed = match stepped {
            Ok(Ok(executed)) => executed,
            Ok(Err(not_run)) => {
                self.metrics.log_failed(LogFailure::Start);
                if let (Some(log), Some(key)) = (&self.log, &started_key) {
                    log.mark_not_run(&run, key);
                }
                return Err(log_down_msg(not_run.to_string()));
            }
            Err(panic) => {
                let broken = Broken::Turn(format!(
                    "the runtime panicked while running a command ({}); the command's outcome is unknown",
                    panic_message(panic.as_ref())
                ));
                tracing::error!("{}", broken.reason());
                self.set_broken(broken.clone());
                // What the command emitted before the panic still goes to the log (its started
                // event without a completion marks the step incomplete, never replayable).
                if let (Some(log), Some(rest)) = (&self.log, rest) {
                    log.enqueue_and_flush(rest).await;
                }
                return Err(broken.refusal());
            }
        };
        if let (Some(log), Some(key)) = (&self.log, &started_key) {
            log.forget_not_run(&run, key);
        }
        self.account(open, &events);
        let log_pending = match (&self.log, rest) {
            (Some(log), Some(rest)) => log.enqueue_and_flush(rest).await,
            _ => 0,
        };
        if log_pending > 0 {
            self.metrics.log_failed(LogFailure::Queued);
        }
        Ok(ExecResponse {
            outcome: executed.outcome,
            classification: req
                .explain
                .then(|| serde_json::to_value(&executed.classification).unwrap_or_default()),
            events,
            replayed: false,
            run_id: run,
            log_pending,
            replay_problems: Vec::new(),
            stdout_file: None,
            stderr_file: None,
            output_problems: Vec::new(),
        })
    }

    /// Keeps a streamed command's output past the result's cap ([`super::spill`]).
    pub(super) fn spill(&self) -> super::spill::Spill {
        super::spill::Spill::new(
            &self.spec,
            kube_harness_sandbox::Limits::default().max_output_bytes,
            self.config.max_file_bytes,
        )
    }

    /// Writes one file (`PUT /v1/files?path=…`): see [`Worker::upload`].
    pub async fn put_file(
        &self,
        path: &str,
        head: &BodyHead,
        body: axum::body::Body,
    ) -> Result<FileWritten, Refusal> {
        let target = files::resolve(&self.spec, path).and_then(|t| {
            files::missing_parents(&t)?;
            Ok(t)
        });
        let limit = (self.config.max_file_bytes, "--max-file-bytes");
        let up = self
            .upload(target, head, body, limit, |target, spooled| {
                Ok((vec![files::place(&target, spooled)?.change], Vec::new()))
            })
            .await?;
        let change = up.changes.first().map(|c| c.change);
        Ok(FileWritten {
            path: path.to_string(),
            change: match change {
                Some(kube_harness_workspace::ChangeKind::Created) => "created",
                _ => "modified",
            }
            .to_string(),
            bytes: up.bytes,
            events: up.events,
            log_pending: up.log_pending,
        })
    }

    /// Unpacks a tar into a directory (`PUT /v1/archive?path=…`): see [`Worker::upload`] and
    /// `archive::extract` (checked whole before anything is written).
    pub async fn put_archive(
        &self,
        path: &str,
        head: &BodyHead,
        body: axum::body::Body,
    ) -> Result<ArchiveWritten, Refusal> {
        let target = files::resolve_dir(&self.spec, path).and_then(|t| {
            files::missing_dirs(&t, &t.rel)?;
            Ok(t)
        });
        let limit = (self.config.max_archive_bytes, "--max-archive-bytes");
        let up = self
            .upload(target, head, body, limit, |target, spooled| {
                let extracted = archive::extract(&target, spooled.file)?;
                Ok((extracted.changes, extracted.warnings))
            })
            .await?;
        Ok(ArchiveWritten {
            path: path.to_string(),
            entries: up.changes.len() as u64,
            bytes: up.bytes,
            events: up.events,
            log_pending: up.log_pending,
            warnings: up.warnings,
        })
    }

    /// An upload: checked (403 on a read-only path), the body spooled first (a slow client holds
    /// no session), then, between commands, `place`d in the worker's mounts and recorded as the
    /// open turn's `harness.file.*` events with source `upload` (the turn is opened if none is).
    /// 409 while the turn runs on Tier-1 (its copy of the workspace would not see the files, and
    /// the merge-back would fight them).
    async fn upload(
        &self,
        target: Result<files::Target, Refusal>,
        head: &BodyHead,
        body: axum::body::Body,
        (limit, flag): (u64, &str),
        place: impl FnOnce(files::Target, files::Spooled) -> Result<Placed, Refusal> + Send + 'static,
    ) -> Result<Uploaded, Refusal> {
        let checked = self.usable_tier0().and_then(|tier0| {
            let target = target?;
            if !self.spec.is_writable(&target.harness) {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    code::READ_ONLY,
                    format!("{} is read-only in this session", target.harness.display()),
                ));
            }
            Ok((tier0, target, self.log_run(None)?))
        });
        let (tier0, target, run) = match checked {
            Ok(checked) => checked,
            Err(refusal) => {
                // Read (and drop) what the client is still sending, so that it reads the answer
                // rather than a reset connection.
                files::discard(head, body).await;
                return Err(refusal);
            }
        };
        // Spools are bounded in number as well as size (each may be `limit` bytes of the
        // worker's temp directory): a third concurrent upload is told to try again.
        let Ok(_spooling) = self.uploads.try_acquire() else {
            files::discard(head, body).await;
            return Err(Refusal::new(
                StatusCode::TOO_MANY_REQUESTS,
                code::UPLOADS_BUSY,
                format!("{UPLOADS_AT_ONCE} uploads are being received; try again"),
            ));
        };
        let spooled = files::spool(head, body, limit, flag).await?;
        let bytes = spooled.bytes;
        let mut slot = self.lock().await?;
        let _busy = BusyFlag::set(&self.busy);
        self.touch();
        if let Some(broken) = self.broken() {
            return Err(broken.refusal());
        }
        slot.exec_counter = slot.exec_counter.saturating_add(1);
        let prefix = format!("{}:upload-{}", self.instance, slot.exec_counter);
        let slot: &mut Slot = &mut slot;
        let open = match &mut slot.turn {
            Some(open) => open,
            empty => empty.insert(self.begin_turn(tier0, &slot.cwd, &slot.env).await?),
        };
        if open.turn.tier().await != 0 {
            return Err(escalated());
        }
        let (changes, warnings) = tokio::task::spawn_blocking(move || place(target, spooled))
            .await
            .map_err(|e| {
                Refusal::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    code::IO_FAILED,
                    format!("the upload task failed: {e}"),
                )
            })??;
        open.turn.record_upload(&changes).await;
        let events = open.capture.take();
        open.files.record(&events);
        let log_pending = match &self.log {
            Some(log) => {
                log.enqueue_and_flush(keyed(&run, &prefix, &events, 0))
                    .await
            }
            None => 0,
        };
        if log_pending > 0 {
            self.metrics.log_failed(LogFailure::Queued);
        }
        Ok(Uploaded {
            changes,
            bytes,
            events,
            log_pending,
            warnings,
        })
    }

    /// Opens one file for `GET /v1/files?path=…`, between commands; the caller streams it after
    /// the session is let go. 409 while the turn runs on Tier-1 (the worker's copy is stale until
    /// the turn ends).
    pub async fn open_file(&self, path: &str) -> Result<(std::fs::File, u64), Refusal> {
        let target = files::resolve(&self.spec, path)?;
        self.between_commands().await?;
        files::open(&target)
    }

    /// Checks a directory for `GET /v1/archive?path=…` between commands (409 while on Tier-1),
    /// and returns it for the walk, which streams after the session is let go.
    pub async fn archive_target(&self, path: &str) -> Result<files::Target, Refusal> {
        let target = files::resolve_dir(&self.spec, path)?;
        self.between_commands().await?;
        files::require_dir(&target)?;
        Ok(target)
    }

    /// Waits for the running command, if any; 409 when the turn is on a higher tier.
    async fn between_commands(&self) -> Result<(), Refusal> {
        let slot = self.lock().await?;
        self.touch();
        if let Some(open) = &slot.turn {
            if open.turn.tier().await != 0 {
                return Err(escalated());
            }
        }
        Ok(())
    }

    fn usable_tier0(&self) -> Result<&Arc<TimedTier0>, Refusal> {
        self.tier0.as_ref().map_err(|reason| {
            Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code::NOT_READY,
                format!("the Tier-0 sandbox is not usable: {reason}"),
            )
        })
    }

    /// The session-log run a request's `runId` names (see [`SessionLogConfig::run_scope`]);
    /// 400 when the scoped name is not a valid run id (too long).
    fn log_run(&self, requested: Option<&str>) -> Result<String, Refusal> {
        let scope = self
            .config
            .session_log
            .as_ref()
            .and_then(|l| l.run_scope.as_deref());
        let run = match (scope, requested) {
            (None, requested) => requested.unwrap_or(&self.config.session).to_string(),
            (Some(scope), None) => scope.to_string(),
            (Some(scope), Some(run)) => format!("{scope}:{run}"),
        };
        RunId::parse(&run).map_err(|e| {
            let scoped = if scope.is_some() {
                " (this session's runs are scoped)"
            } else {
                ""
            };
            Refusal::new(
                StatusCode::BAD_REQUEST,
                code::BAD_REQUEST,
                format!("runId {run:?}{scoped}: {}", e.message),
            )
        })?;
        Ok(run)
    }

    /// Ends the open turn (disposing its tiers) and reports it; `turn: None` when none was open.
    /// A turn quarantined by a panic (see [`Broken::Turn`]) is ended the same way, and once it is
    /// gone the worker takes commands again.
    pub async fn end_turn(&self, run_id: Option<String>) -> Result<EndTurnResponse, Refusal> {
        // Named before the turn is taken: a bad run id must not lose the turn's closing events.
        let run = self.log_run(run_id.as_deref())?;
        let mut slot = self.slot.lock().await;
        let _busy = BusyFlag::set(&self.busy);
        self.touch();
        let Some(open) = slot.turn.take() else {
            return Ok(EndTurnResponse { turn: None });
        };
        let OpenTurn {
            turn,
            turn_id,
            capture,
            commands,
            mut files,
            ..
        } = open;
        // Caught as in `exec`: the turn is consumed either way, so nothing half-ended remains.
        let ended = AssertUnwindSafe(async move {
            let state = turn.shell_state().await;
            (state, turn.end().await)
        })
        .catch_unwind()
        .await;
        let events = capture.take();
        if let Some(log) = &self.log {
            let prefix = format!("{}:{turn_id}:end", self.instance);
            let pending = log
                .enqueue_and_flush(keyed(&run, &prefix, &events, 0))
                .await;
            if pending > 0 {
                self.metrics.log_failed(LogFailure::Queued);
            }
        }
        let ((cwd, env), usage) = match ended {
            Ok(ended) => ended,
            Err(panic) => {
                let broken = Broken::Worker(format!(
                    "the runtime panicked while ending turn {turn_id} ({}); its tiers may not have been disposed",
                    panic_message(panic.as_ref())
                ));
                tracing::error!("{}", broken.reason());
                self.set_broken(broken.clone());
                return Err(broken.refusal());
            }
        };
        slot.cwd = cwd;
        slot.env = env;
        if self.clear_turn_broken() {
            tracing::info!(
                turn_id,
                "the quarantined turn was ended; the worker takes commands again"
            );
        }
        files.record(&events);
        let persistent = self.end_persistent(&turn_id, files.persistent_dirs()).await;
        self.counters.turns.fetch_add(1, Ordering::SeqCst);
        self.counters.tier.store(0, Ordering::SeqCst);
        self.metrics.turn_ended();
        Ok(EndTurnResponse {
            turn: Some(TurnSummary {
                turn_id,
                commands,
                usage,
                file_changes_omitted: files.omitted,
                file_changes: files
                    .paths
                    .into_iter()
                    .map(|(path, change)| FileChangeSummary { path, change })
                    .collect(),
                events,
                persistent,
            }),
        })
    }

    /// Commits or keeps the session's writable Persistent Dirs as the ended turn left them
    /// (after its Tier-1 changes were merged back).
    async fn end_persistent(
        &self,
        turn_id: &str,
        changed: Option<BTreeSet<String>>,
    ) -> Vec<PersistentCommit> {
        let Some(dirs) = self.persistent.clone() else {
            return Vec::new();
        };
        let turn = turn_id.to_string();
        let reports = tokio::task::spawn_blocking(move || dirs.end_turn(&turn, changed.as_ref()))
            .await
            .unwrap_or_else(|e| {
                vec![PersistentCommit {
                    dir: String::new(),
                    turn_id: turn_id.to_string(),
                    outcome: CommitOutcome::Failed,
                    message: Some(format!("the commit task failed: {e}")),
                }]
            });
        for r in &reports {
            if matches!(r.outcome, CommitOutcome::Conflict | CommitOutcome::Failed) {
                tracing::warn!(dir = r.dir, turn_id, outcome = ?r.outcome, "Persistent Dir not committed: {}", r.message.as_deref().unwrap_or(""));
            }
        }
        reports
    }

    /// `POST /v1/persistent/commit`: writes a kept turn of a dir to its source, between
    /// commands.
    pub async fn commit_persistent(&self, req: CommitRequest) -> Result<PersistentCommit, Refusal> {
        let Some(dirs) = self.persistent.clone() else {
            return Err(Refusal::new(
                StatusCode::NOT_FOUND,
                code::NOT_FOUND,
                "this session has no Persistent Dirs",
            ));
        };
        let _slot = self.lock().await?;
        let _busy = BusyFlag::set(&self.busy);
        self.touch();
        let committed = tokio::task::spawn_blocking(move || dirs.commit(&req.dir, &req.turn_id))
            .await
            .map_err(|e| self.task_failed("commit", &e))?;
        committed.map_err(|e| {
            let (status, what) = match &e {
                CommitError::NoSuchDir(_) | CommitError::NothingKept { .. } => {
                    (StatusCode::NOT_FOUND, code::NOT_FOUND)
                }
                CommitError::ReadOnly(_) => (StatusCode::CONFLICT, code::READ_ONLY),
                CommitError::Failed(_) => (StatusCode::INTERNAL_SERVER_ERROR, code::IO_FAILED),
            };
            Refusal::new(status, what, e.to_string())
        })
    }

    /// Opens a turn: with Persistent Dirs to load, loads them and builds the turn its own
    /// sandbox (landlock rules bind to inodes, and the load replaced the directories the
    /// start-up sandbox's rules were bound to).
    async fn begin_turn(
        &self,
        tier0: &Arc<TimedTier0>,
        cwd: &Path,
        env: &BTreeMap<String, String>,
    ) -> Result<OpenTurn, Refusal> {
        let tier0 = match &self.persistent {
            Some(dirs) if dirs.loads() => {
                let dirs = dirs.clone();
                let sandbox = self.config.sandbox().map_err(|e| {
                    Refusal::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        code::NOT_READY,
                        e.to_string(),
                    )
                })?;
                let built = tokio::task::spawn_blocking(move || {
                    if !dirs.load()? {
                        return Ok(None);
                    }
                    TimedTier0::new(
                        sandbox.workspace,
                        sandbox.presentation,
                        sandbox.limits,
                        sandbox.denied,
                        None,
                    )
                    .map(|t| Some(Arc::new(t)))
                    .map_err(|e| format!("preparing the sandbox after loading: {e}"))
                })
                .await
                .map_err(|e| self.task_failed("load", &e))?;
                let built = built.map_err(|e| {
                    Refusal::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        code::IO_FAILED,
                        format!("the turn did not start: {e}"),
                    )
                })?;
                let mut last = relock(&self.loaded_tier0);
                if let Some(new) = built {
                    *last = Some(new);
                }
                last.clone().unwrap_or_else(|| tier0.clone())
            }
            _ => tier0.clone(),
        };
        Ok(self.open_turn(&tier0, cwd, env))
    }

    /// After SIGTERM and the grace period: ends the turn if the running command let go of the
    /// session within `wait`; otherwise leaves it (the process is exiting).
    pub async fn shutdown(&self, wait: Duration) {
        self.begin_shutdown();
        match tokio::time::timeout(wait, self.end_turn(None)).await {
            Ok(Ok(r)) => tracing::info!(ended = r.turn.is_some(), "turn ended for shutdown"),
            Ok(Err(e)) => tracing::warn!("ending the turn at shutdown: {}", e.message),
            Err(_) => tracing::warn!("a command was still running at shutdown; turn not ended"),
        }
    }

    fn classify_options(&self) -> ClassifyOptions {
        ClassifyOptions {
            runtime: self.config.runtime,
            policy: Policy {
                deny_commands: self.config.deny_commands.clone(),
                rule: None,
            },
            matrix: None,
        }
    }

    fn open_turn(
        &self,
        tier0: &Arc<TimedTier0>,
        cwd: &Path,
        env: &BTreeMap<String, String>,
    ) -> OpenTurn {
        let turn_id = format!("turn_{}_{}", now_ms(), &self.instance);
        let capture = Arc::new(Capture::default());
        let emitter = Emitter::new(&self.config.session, &turn_id, vec![capture.clone()])
            .with_file_event_limit(self.config.max_file_events)
            .with_file_event_bytes(self.config.max_file_event_bytes);
        let turn = Turn::new(
            TurnConfig {
                workspace: self.spec.clone(),
                classify: self.classify_options(),
                inline_output_limit: self.config.inline_output_limit,
            },
            emitter,
            tier0.clone(),
            self.next_tier.clone(),
            Some(Arc::new(WorkspaceTracker::with_health(
                self.spec.clone(),
                self.tracking.clone(),
            ))),
            cwd.to_path_buf(),
            env.clone(),
        );
        OpenTurn {
            turn,
            turn_id,
            capture,
            commands: 0,
            files: TurnFiles::new(
                self.config.max_file_events,
                self.config.max_file_event_bytes,
            ),
        }
    }

    /// Usage counters and the turn's file list, from the command's events (this turn's own
    /// `Emitter`'s, so every one of a known type parses).
    fn account(&self, open: &mut OpenTurn, events: &[TraceEvent]) {
        let c = &self.counters;
        for e in events {
            match e.payload() {
                Ok(Payload::CommandCompleted(done)) => {
                    open.commands = open.commands.saturating_add(1);
                    self.metrics.command(done.tier, done.duration_ms);
                    match done.tier {
                        0 => c.tier0.fetch_add(1, Ordering::SeqCst),
                        _ => c.tier1.fetch_add(1, Ordering::SeqCst),
                    };
                }
                Ok(Payload::TierRefused(_)) => {
                    c.refusals.fetch_add(1, Ordering::SeqCst);
                    self.metrics.refused();
                }
                Ok(Payload::TierEscalated(up)) => {
                    c.tier.store(u64::from(up.to_tier), Ordering::SeqCst);
                }
                _ => {}
            }
        }
        open.files.record(events);
        // A snapshot failed: the turn's file events may be missing some change.
        if self.tracking.get().is_err() {
            open.files.untracked = true;
        }
    }

    fn touch(&self) {
        self.counters
            .last_activity_ms
            .store(now_ms(), Ordering::SeqCst);
    }
}

/// The turn's file list for the end-turn answer: the last change per harness path, at most
/// `limit` paths and `byte_limit` bytes of them (a turn of many commands that each create
/// thousands of files, or files with 50 KB paths, must not grow it without bound). What is left
/// out is counted: changes to paths past either limit, and the file events the emitter already
/// left out (`harness.file.truncated`).
struct TurnFiles {
    /// Set when a snapshot failed during the turn (its file events may be incomplete).
    untracked: bool,
    paths: BTreeMap<String, String>,
    limit: usize,
    bytes: usize,
    byte_limit: usize,
    omitted: u64,
}

impl TurnFiles {
    fn new(limit: usize, byte_limit: usize) -> Self {
        TurnFiles {
            untracked: false,
            paths: BTreeMap::new(),
            limit,
            bytes: 0,
            byte_limit,
            omitted: 0,
        }
    }

    /// The Persistent Dirs (`/persistent/<name>`) the turn's file events name; `None` when the
    /// events may be incomplete (a failed snapshot, changes past the list's bound).
    fn persistent_dirs(&self) -> Option<BTreeSet<String>> {
        if self.untracked || self.omitted > 0 {
            return None;
        }
        Some(
            self.paths
                .keys()
                .filter_map(|p| p.strip_prefix("/persistent/"))
                .filter_map(|rest| rest.split('/').next())
                .map(String::from)
                .collect(),
        )
    }

    fn record(&mut self, events: &[TraceEvent]) {
        for e in events {
            let (change, file) = match e.payload() {
                Ok(Payload::FileCreated(f)) => ("created", f),
                Ok(Payload::FileModified(f)) => ("modified", f),
                Ok(Payload::FileDeleted(f)) => ("deleted", f),
                Ok(Payload::FileTruncated(t)) => {
                    self.omitted = self.omitted.saturating_add(t.omitted.total);
                    continue;
                }
                _ => continue,
            };
            let path = file.path.as_str();
            let bytes = kube_harness_runtime::event::json_string_bytes(path);
            if let Some(last) = self.paths.get_mut(path) {
                *last = change.to_string();
            } else if self.paths.len() < self.limit
                && self.bytes.saturating_add(bytes) <= self.byte_limit
            {
                self.bytes = self.bytes.saturating_add(bytes);
                self.paths.insert(path.to_string(), change.to_string());
            } else {
                self.omitted = self.omitted.saturating_add(1);
            }
        }
    }
}

/// How many uploads may be spooled at once (each up to its limit in the temp directory).
pub const UPLOADS_AT_ONCE: usize = 2;

/// What an upload placed and recorded.
struct Uploaded {
    changes: Vec<FileChange>,
    bytes: u64,
    events: Vec<TraceEvent>,
    log_pending: usize,
    /// What the upload did not place as asked (an archive's modes it could not keep).
    warnings: Vec<String>,
}

/// What an upload's placing made: its changes, and what it did not place as asked.
type Placed = (Vec<FileChange>, Vec<String>);

/// Marks the worker busy while held.
struct BusyFlag<'a>(&'a AtomicBool);

impl<'a> BusyFlag<'a> {
    fn set(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::SeqCst);
        BusyFlag(flag)
    }
}

impl Drop for BusyFlag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

fn escalated() -> Refusal {
    Refusal::new(
        StatusCode::CONFLICT,
        code::TURN_ESCALATED,
        "this turn runs on Tier-1, whose copy of the workspace the worker's files are not: end the turn (POST /v1/turns/end), which merges its changes back, and try again",
    )
}

fn log_down(e: kube_harness_session_log_client::ClientError) -> Refusal {
    log_down_msg(format!("session log: {e}"))
}

fn log_down_msg(message: String) -> Refusal {
    Refusal::new(
        StatusCode::SERVICE_UNAVAILABLE,
        code::SESSION_LOG_UNAVAILABLE,
        message,
    )
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn rfc3339(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
