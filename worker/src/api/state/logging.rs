//! The session-log wiring: which run a request's events go to, what is flushed before a command
//! may start, a replayed step answered from the log, and the events appended after the fact.

use super::super::error::WorkerError;
use super::super::log::LogForwarder;
use super::super::metrics::LogFailure;
use super::super::model::{ExecResponse, LogPage, LoggedEvent, MAX_LOG_PAGE};
use super::super::refusal::Refusal;
use super::super::replay::{self, Replay};
use super::Worker;
use kube_harness_session_log_client::client::NewEvent;
use kube_harness_session_log_client::{ClientError, RunId};

impl Worker {
    /// One page of a run of this session's log (`GET /v1/log`): `run` as an exec's `runId`
    /// names it (scoped like the worker's own appends, so no other session's run is reachable),
    /// events after sequence `after`, at most `limit` (1..=[`MAX_LOG_PAGE`]).
    pub async fn read_log(
        &self,
        run: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<LogPage, Refusal> {
        Ok(self.log_page(run, after, limit).await?)
    }

    async fn log_page(
        &self,
        run: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<LogPage, WorkerError> {
        if limit == 0 || limit > MAX_LOG_PAGE {
            return Err(WorkerError::BadRequest(format!(
                "limit must be 1..={MAX_LOG_PAGE}"
            )));
        }
        let Some(log) = &self.log else {
            return Err(WorkerError::NotFound(
                "this worker has no session log (it runs without --session-log-url)".into(),
            ));
        };
        let scoped = self.log_run(run)?;
        let _one_at_a_time = tokio::time::timeout(super::LOG_READ_WAIT, self.log_reads.acquire())
            .await
            .map_err(|_| {
                WorkerError::LogReadsBusy(format!(
                    "another read of this session's log has been running for {} s: the worker reads one page at a time",
                    super::LOG_READ_WAIT.as_secs()
                ))
            })?
            .map_err(|e| WorkerError::Internal(format!("the log-read gate closed: {e}")))?;
        let page = log
            .client()
            .read(&scoped, after, limit)
            .await
            .map_err(|e| match e {
                ClientError::Rejected { message, .. } => {
                    WorkerError::BadRequest(format!("the session log refused the read: {message}"))
                }
                other => WorkerError::LogDown(format!("reading the session log: {other}")),
            })?;
        Ok(LogPage {
            run: run.unwrap_or(&self.config.session).to_string(),
            events: page
                .events
                .into_iter()
                .map(|e| LoggedEvent {
                    sequence: e.sequence,
                    kind: e.event_type,
                    data: serde_json::Value::Object(e.payload),
                    recorded_at_ms: e.recorded_at_ms,
                })
                .collect(),
            next: page.next,
        })
    }

    /// The session-log run a request's `runId` names (see
    /// [`super::super::SessionLogConfig::run_scope`]); 400 when the scoped name is not a valid
    /// run id (too long).
    pub(super) fn log_run(&self, requested: Option<&str>) -> Result<String, WorkerError> {
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
            WorkerError::BadRequest(format!("runId {run:?}{scoped}: {}", e.message))
        })?;
        Ok(run)
    }

    /// Before a command: what earlier commands left pending is appended first (503 when the log
    /// does not take it), then a step already recorded is answered from the log (`Some`), one
    /// that started and never completed refused (409 `step-incomplete`); `None`: run it.
    pub(super) async fn before_command(
        &self,
        log: &LogForwarder,
        run: &str,
        step_key: Option<&str>,
    ) -> Result<Option<ExecResponse>, WorkerError> {
        log.flush_pending().await.map_err(|e| {
            self.metrics.log_failed(LogFailure::Start);
            log_down(e)
        })?;
        let Some(step) = step_key else {
            return Ok(None);
        };
        match replay::lookup(log, &self.spec, run, step)
            .await
            .map_err(log_down)?
        {
            Replay::Recorded(response) => Ok(Some(*response)),
            Replay::Incomplete(started) => Err(WorkerError::StepIncomplete(format!(
                "step {step:?} of run {run:?} started (session log sequence {}) and never completed: the worker stopped mid-command, so its effects are unknown; it is not run again",
                started.sequence
            ))),
            Replay::Run => Ok(None),
        }
    }

    /// Appends events that record what was done already, awaited (the seeds: an append that
    /// does not commit fails the turn). `Err` (503 `session-log-unavailable`) when the log does
    /// not take them: they stay queued, first in line, never dropped (counted in the metrics).
    pub(super) async fn record(&self, events: Vec<(String, NewEvent)>) -> Result<(), WorkerError> {
        let Some(log) = &self.log else {
            return Ok(());
        };
        log.enqueue_and_flush(events).await.map_err(|e| {
            self.metrics.log_failed(LogFailure::Queued);
            WorkerError::LogDown(format!(
                "its events are not in the session log ({e}); they stay queued, first in line, \
                 and nothing more runs in this session until the log takes them"
            ))
        })
    }

    /// How many events wait to be appended (0 without a log).
    pub(super) async fn log_pending(&self) -> usize {
        match &self.log {
            Some(log) => log.pending_len().await,
            None => 0,
        }
    }
}

/// 503 `session-log-unavailable`.
pub(super) fn log_down(e: kube_harness_session_log_client::ClientError) -> WorkerError {
    WorkerError::LogDown(format!("session log: {e}"))
}
