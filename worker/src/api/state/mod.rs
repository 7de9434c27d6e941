//! The worker's one session: the [`Worker`], what it holds and how a request takes the session.
//! What it does is split by question, each an `impl Worker` of its own: `turns` (exec, end-turn,
//! replay), `uploads` (files and directories in and out), `health` (readiness, liveness, panic
//! quarantine, status and metrics), `persistent` (the Persistent Dirs at a turn's end and on
//! request), `logging` (the session-log wiring); `slot` the state the session lock guards.
//! Every refusal is a [`WorkerError`]; the public methods, the API's, answer it as a `Refusal`.

pub mod claim;
mod health;
mod logging;
mod persistent;
mod slot;
mod turns;
mod uploads;

use super::config::{SameSession, WorkerConfig};
use super::error::{Broken, NotReady, StartError, WorkerError};
use super::log::LogForwarder;
use super::metrics::WorkerMetrics;
use super::persistent::PersistentDirs;
use super::tier0::TimedTier0;
use kube_harness_classify::{ClassifyOptions, Policy};
use kube_harness_runtime::NextTier;
use kube_harness_workspace::WorkspaceSpec;
use slot::{Counters, Slot};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many uploads may be spooled at once (each up to its limit in the temp directory).
pub const UPLOADS_AT_ONCE: usize = 2;

/// How long a `GET /v1/log` waits for the one read a worker makes at a time before 429.
pub const LOG_READ_WAIT: Duration = Duration::from_secs(10);

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
    /// `GET /v1/log` reads the shared session log one page at a time per worker: a session's
    /// client flooding it must not take the log's time from every other session's appends.
    log_reads: tokio::sync::Semaphore,
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
            log_reads: tokio::sync::Semaphore::new(1),
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

    /// Takes the session: waits for the running command (`same-session: queue`) or refuses
    /// (`reject`); refused once the worker is shutting down.
    async fn lock(&self) -> Result<tokio::sync::MutexGuard<'_, Slot>, WorkerError> {
        let guard = match self.config.same_session {
            SameSession::Queue => self.slot.lock().await,
            SameSession::Reject => self.slot.try_lock().map_err(|_| {
                WorkerError::Busy(format!(
                    "session {} is running another command (same-session: reject)",
                    self.config.session
                ))
            })?,
        };
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(WorkerError::ShuttingDown(
                "the worker is shutting down".to_string(),
            ));
        }
        Ok(guard)
    }

    fn usable_tier0(&self) -> Result<&Arc<TimedTier0>, WorkerError> {
        self.tier0.as_ref().map_err(|reason| {
            WorkerError::NotReady(format!("the Tier-0 sandbox is not usable: {reason}"))
        })
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

    fn touch(&self) {
        self.counters
            .last_activity_ms
            .store(now_ms(), Ordering::SeqCst);
    }
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
