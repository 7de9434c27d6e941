//! Whether the worker takes commands: readiness, liveness, the quarantine a caught panic puts
//! the turn (or the worker) in, shutting down; and what it reports of itself (`/v1/status`,
//! `/metrics`).

use super::super::error::{Broken, NotReady, WorkerError};
use super::super::metrics::WorkerMetrics;
use super::super::model::{CommandCounts, Status};
use super::super::refusal::Refusal;
use super::super::relock;
use super::{rfc3339, Worker};
use std::sync::atomic::Ordering;

impl Worker {
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

    /// Refused with the broken invariant, if there is one.
    pub(super) fn check_broken(&self) -> Result<(), WorkerError> {
        match self.broken() {
            Some(broken) => Err(WorkerError::Broken(broken)),
            None => Ok(()),
        }
    }

    /// A request task that panicked outside the runtime (which `Worker` catches itself): what it
    /// held is unknown, so the worker is marked broken for good and says so, rather than
    /// answering 500 now and whatever that state causes later. (A task that was cancelled, not
    /// panicked, means the runtime is shutting down.)
    pub fn task_failed(&self, what: &str, e: &tokio::task::JoinError) -> Refusal {
        self.task_error(what, e).into()
    }

    /// [`Worker::task_failed`], as the error the worker's logic returns.
    pub(super) fn task_error(&self, what: &str, e: &tokio::task::JoinError) -> WorkerError {
        if !e.is_panic() {
            return WorkerError::ShuttingDown(format!(
                "the {what} task was cancelled: the worker is shutting down"
            ));
        }
        let broken = Broken::Worker(format!("the {what} task panicked"));
        tracing::error!("{}", broken.reason());
        self.set_broken(broken);
        self.broken()
            .map(WorkerError::Broken)
            .unwrap_or_else(|| WorkerError::Internal(what.to_string()))
    }

    /// Quarantines for good after a panic the worker cannot recover from, and says why.
    pub(super) fn break_worker(&self, why: String) -> WorkerError {
        self.quarantine(Broken::Worker(why))
    }

    /// Quarantines the open turn after a panic inside the runtime, and says why.
    pub(super) fn break_turn(&self, why: String) -> WorkerError {
        self.quarantine(Broken::Turn(why))
    }

    fn quarantine(&self, broken: Broken) -> WorkerError {
        tracing::error!("{}", broken.reason());
        self.set_broken(broken.clone());
        WorkerError::Broken(broken)
    }

    /// Lifts a turn's quarantine (its turn was ended); whether there was one.
    pub(super) fn clear_turn_broken(&self) -> bool {
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

    pub(in super::super) fn metrics(&self) -> &WorkerMetrics {
        &self.metrics
    }
}
