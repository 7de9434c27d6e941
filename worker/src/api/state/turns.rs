//! A turn: its commands (exec, answered from the session log when the step was recorded),
//! opening it (loading the Persistent Dirs first when the session has some) and ending it.

use super::super::error::{panic_message, WorkerError};
use super::super::log::{keyed, Capture, StartRecorder};
use super::super::metrics::LogFailure;
use super::super::model::{
    EndTurnResponse, ExecRequest, ExecResponse, FileChangeSummary, TurnSummary,
};
use super::super::refusal::Refusal;
use super::super::relock;
use super::super::spill::Spill;
use super::super::tier0::TimedTier0;
use super::claim::{admit, may_end, Ender};
use super::slot::{BusyFlag, OpenTurn, Slot, TurnFiles};
use super::{now_ms, Worker};
use futures::FutureExt;
use kube_harness_runtime::{
    event::Payload, Emitter, StartGate, Step, TraceEvent, Turn, TurnConfig, WorkspaceTracker,
};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Worker {
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
        Ok(self.run_command(req, output).await?)
    }

    async fn run_command(
        &self,
        req: ExecRequest,
        output: Option<kube_harness_sandbox::OutputTap>,
    ) -> Result<ExecResponse, WorkerError> {
        let tier0 = self.usable_tier0()?;
        let run = self.log_run(req.run_id.as_deref())?;
        let mut slot = self.lock().await?;
        let _busy = BusyFlag::set(&self.busy);
        self.touch();
        if let Some(log) = &self.log {
            if let Some(recorded) = self
                .before_command(log, &run, req.step_key.as_deref())
                .await?
            {
                return Ok(recorded);
            }
        }
        // After the replay lookup: a recorded step is answered from the log even now.
        self.check_broken()?;
        admit(&slot, req.turn_id.as_deref())?;
        slot.exec_counter = slot.exec_counter.saturating_add(1);
        let prefix = match &req.step_key {
            Some(step) => format!("step:{step}"),
            None => format!("{}:exec-{}", self.instance, slot.exec_counter),
        };
        let open = self.open(&mut slot, tier0).await?;
        open.last_used = Instant::now();
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
                return Err(WorkerError::LogDown(not_run.to_string()));
            }
            Err(panic) => {
                let broken = self.break_turn(format!(
                    "the runtime panicked while running a command ({}); the command's outcome is unknown",
                    panic_message(panic.as_ref())
                ));
                // What the command emitted before the panic still goes to the log (its started
                // event without a completion marks the step incomplete, never replayable).
                if let (Some(log), Some(rest)) = (&self.log, rest) {
                    // The request fails as broken either way; what the log does not take
                    // stays queued (and was logged).
                    let _ = log.enqueue_and_flush(rest).await;
                }
                return Err(broken);
            }
        };
        if let (Some(log), Some(key)) = (&self.log, &started_key) {
            log.forget_not_run(&run, key);
        }
        self.account(open, &events);
        open.last_used = Instant::now();
        if let Some(rest) = rest {
            self.record(rest).await.map_err(|e| {
                WorkerError::LogDown(format!(
                    "the command ran (exit {}) but {e}; with a step key, a retry answers its recorded result once they are in",
                    executed.outcome.exit_code
                ))
            })?;
        }
        Ok(ExecResponse {
            outcome: executed.outcome,
            classification: req
                .explain
                .then(|| kube_harness_runtime::wire::classification(&executed.classification)),
            events,
            replayed: false,
            run_id: run,
            log_pending: 0,
            replay_problems: Vec::new(),
            stdout_file: None,
            stderr_file: None,
            output_problems: Vec::new(),
        })
    }

    /// Keeps a streamed command's output past the result's cap ([`super::super::spill`]).
    pub(in super::super) fn spill(&self) -> Spill {
        Spill::new(
            &self.spec,
            kube_harness_sandbox::Limits::default().max_output_bytes,
            self.config.max_file_bytes,
        )
    }

    /// The open turn, opened (see [`Worker::begin_turn`]) if none is.
    pub(super) async fn open<'s>(
        &self,
        slot: &'s mut Slot,
        tier0: &Arc<TimedTier0>,
    ) -> Result<&'s mut OpenTurn, WorkerError> {
        Ok(match &mut slot.turn {
            Some(open) => open,
            empty => empty.insert(self.begin_turn(tier0, &slot.cwd, &slot.env).await?),
        })
    }

    /// Ends the open turn (disposing its tiers) and reports it; `turn: None` when none was open.
    /// A client's turn (`POST /v1/turns`) is ended only by a request naming it (`turn_id`;
    /// 409 `turn-busy` otherwise). A turn quarantined by a panic (see
    /// [`super::super::Broken::Turn`]) is ended the same way, and once it is gone the worker
    /// takes commands again.
    pub async fn end_turn(
        &self,
        run_id: Option<String>,
        turn_id: Option<String>,
    ) -> Result<EndTurnResponse, Refusal> {
        Ok(self
            .finish_turn(run_id, Ender::Client(turn_id.as_deref()))
            .await?)
    }

    pub(super) async fn finish_turn(
        &self,
        run_id: Option<String>,
        ender: Ender<'_>,
    ) -> Result<EndTurnResponse, WorkerError> {
        // Named before the turn is taken: a bad run id must not lose the turn's closing events.
        let run = self.log_run(run_id.as_deref())?;
        let mut slot = match ender {
            // The idle check never waits for a request that holds the session.
            Ender::Idle => match self.slot.try_lock() {
                Ok(slot) => slot,
                Err(_) => return Ok(EndTurnResponse { turn: None }),
            },
            _ => self.slot.lock().await,
        };
        if !may_end(&slot, ender, self.config.turn_idle_timeout)? {
            return Ok(EndTurnResponse { turn: None });
        }
        let _busy = BusyFlag::set(&self.busy);
        if !matches!(ender, Ender::Idle) {
            self.touch();
        }
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
        let prefix = format!("{}:{turn_id}:end", self.instance);
        // Awaited; the turn still ends (its tiers are disposed either way) before a failure is
        // answered.
        let recorded = self.record(keyed(&run, &prefix, &events, 0)).await;
        let ((cwd, env), usage) = match ended {
            Ok(ended) => ended,
            Err(panic) => {
                return Err(self.break_worker(format!(
                    "the runtime panicked while ending turn {turn_id} ({}); its tiers may not have been disposed",
                    panic_message(panic.as_ref())
                )));
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
        recorded.map_err(|e| {
            WorkerError::LogDown(format!(
                "turn {turn_id} ended ({commands} commands, its tiers disposed) but {e}"
            ))
        })?;
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

    /// Opens a turn: with Persistent Dirs to load, loads them and builds the turn its own
    /// sandbox (landlock rules bind to inodes, and the load replaced the directories the
    /// start-up sandbox's rules were bound to).
    async fn begin_turn(
        &self,
        tier0: &Arc<TimedTier0>,
        cwd: &Path,
        env: &BTreeMap<String, String>,
    ) -> Result<OpenTurn, WorkerError> {
        let tier0 = match &self.persistent {
            Some(dirs) if dirs.loads() => {
                let dirs = dirs.clone();
                let sandbox = self
                    .config
                    .sandbox()
                    .map_err(|e| WorkerError::NotReady(e.to_string()))?;
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
                .map_err(|e| self.task_error("load", &e))?;
                let built =
                    built.map_err(|e| WorkerError::Io(format!("the turn did not start: {e}")))?;
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
        match tokio::time::timeout(wait, self.finish_turn(None, Ender::Worker)).await {
            Ok(Ok(r)) => tracing::info!(ended = r.turn.is_some(), "turn ended for shutdown"),
            Ok(Err(e)) => tracing::warn!("ending the turn at shutdown: {e}"),
            Err(_) => tracing::warn!("a command was still running at shutdown; turn not ended"),
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
            claim: None,
            last_used: Instant::now(),
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
}
