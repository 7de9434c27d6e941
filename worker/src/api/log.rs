//! Forwarding trace events to the session log service.
//!
//! Fail-closed where it matters: a command's `command.started` event must be committed before the
//! command runs (the [`LogGate`]); if it cannot be, the command does not run and the caller gets
//! 503. Events after the command (file events, `command.completed`) cannot un-run it: when their
//! append fails they wait in an ordered queue that is flushed before the next command may start,
//! so the log never misses an event of a command that ran, and order is kept.
//!
//! Idempotency keys are derived, never random: `step:<stepKey>:<n>` for the n-th event of a step,
//! `<instance>:exec-<counter>:<n>` for commands without a step key, and
//! `<instance>:<turnId>:end:<n>` for a turn's closing events. A retried append (the client's own
//! retries, the pending queue) therefore never duplicates an event.

use super::relock;
use async_trait::async_trait;
use kube_harness_runtime::{EventSink, StartGate, TraceEvent};
use kube_harness_session_log::client::NewEvent;
use kube_harness_session_log::{ClientError, SessionLogClient};
use serde_json::Value;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// Keeps the events of the command in progress (and of a turn's end) for the response and the log.
#[derive(Default)]
pub struct Capture(Mutex<Vec<TraceEvent>>);

impl Capture {
    pub fn take(&self) -> Vec<TraceEvent> {
        std::mem::take(&mut *relock(&self.0))
    }

    fn since(&self, from: usize) -> Vec<TraceEvent> {
        let events = relock(&self.0);
        events.get(from..).map(<[_]>::to_vec).unwrap_or_default()
    }
}

impl EventSink for Capture {
    fn emit(&self, event: &TraceEvent) {
        relock(&self.0).push(event.clone());
    }
}

/// Where the events of the command in progress go, and how far they have been appended.
#[derive(Debug, Default, Clone)]
pub struct ExecContext {
    pub run: String,
    /// Keys are `<prefix>:<n>`, n counting this command's events from 1.
    pub key_prefix: String,
    /// Events of the capture already appended by the gate.
    pub appended: usize,
    /// Why the gate kept the command from running, if it did.
    pub refused: Option<String>,
    /// The idempotency key of the command's started event, once emitted.
    pub started_key: Option<String>,
}

/// The session log client plus the queue of events that still have to be appended.
pub struct LogForwarder {
    client: SessionLogClient,
    pending: tokio::sync::Mutex<VecDeque<(String, NewEvent)>>,
    /// Started events (`run\nkey`) whose command this process never ran: a step the log shows as
    /// started-not-completed for one of these is safe to run.
    not_run: Mutex<HashSet<String>>,
}

impl LogForwarder {
    pub fn new(client: SessionLogClient) -> Self {
        LogForwarder {
            client,
            pending: tokio::sync::Mutex::new(VecDeque::new()),
            not_run: Mutex::new(HashSet::new()),
        }
    }

    pub fn client(&self) -> &SessionLogClient {
        &self.client
    }

    /// The session log event of one trace event: its data is the payload (deterministic, so a
    /// retried append with the same key is recognised by the log as the same event).
    pub fn to_new_event(event: &TraceEvent, key: String) -> NewEvent {
        let payload = match &event.data {
            Value::Object(map) => map.clone(),
            other => {
                let mut map = serde_json::Map::new();
                map.insert("value".into(), other.clone());
                map
            }
        };
        NewEvent::with_key(key, event.kind.clone(), payload)
    }

    /// Appends everything pending, in order. On an error the rest stays queued, except events
    /// the log refused outright (a 4xx: retrying cannot help), which are dropped and logged.
    pub async fn flush_pending(&self) -> Result<(), ClientError> {
        let mut pending = self.pending.lock().await;
        while let Some((run, event)) = pending.front() {
            match self.client.append(run, event).await {
                Ok(_) => {}
                Err(ClientError::Rejected {
                    status,
                    code,
                    message,
                }) => {
                    tracing::error!(
                        run,
                        key = event.append_idempotency_key,
                        status,
                        code,
                        "session log refused an event; dropped: {message}"
                    );
                }
                Err(e) => return Err(e),
            }
            pending.pop_front();
        }
        Ok(())
    }

    /// Appends `events` now, after everything pending; nothing of `events` is queued on failure.
    pub async fn append_now(&self, events: Vec<(String, NewEvent)>) -> Result<(), ClientError> {
        self.flush_pending().await?;
        for (run, event) in &events {
            self.client.append(run, event).await?;
        }
        Ok(())
    }

    /// Queues `events` behind what is pending and tries to append them all; returns how many
    /// remain queued (0 when the log took everything).
    pub async fn enqueue_and_flush(&self, events: Vec<(String, NewEvent)>) -> usize {
        self.pending.lock().await.extend(events);
        if let Err(e) = self.flush_pending().await {
            tracing::warn!("session log append failed; events stay queued: {e}");
        }
        self.pending.lock().await.len()
    }

    pub fn mark_not_run(&self, run: &str, key: &str) {
        relock(&self.not_run).insert(format!("{run}\n{key}"));
    }

    pub fn was_not_run(&self, run: &str, key: &str) -> bool {
        relock(&self.not_run).contains(&format!("{run}\n{key}"))
    }

    pub fn forget_not_run(&self, run: &str, key: &str) {
        relock(&self.not_run).remove(&format!("{run}\n{key}"));
    }
}

/// Keys for the events `from..` of a capture (n counts from 1 over the whole capture).
pub fn keyed(
    run: &str,
    prefix: &str,
    events: &[TraceEvent],
    from: usize,
) -> Vec<(String, NewEvent)> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let key = format!("{prefix}:{}", from.saturating_add(i).saturating_add(1));
            (run.to_string(), LogForwarder::to_new_event(e, key))
        })
        .collect()
}

/// Makes a command's started event durable before the command runs.
pub struct LogGate {
    pub log: Arc<LogForwarder>,
    pub capture: Arc<Capture>,
    pub ctx: Arc<Mutex<ExecContext>>,
}

#[async_trait]
impl StartGate for LogGate {
    async fn before_run(&self) -> Result<(), String> {
        let (run, prefix, from) = {
            let ctx = relock(&self.ctx);
            (ctx.run.clone(), ctx.key_prefix.clone(), ctx.appended)
        };
        let events = self.capture.since(from);
        let batch = keyed(&run, &prefix, &events, from);
        let started_key = batch.last().map(|(_, e)| e.append_idempotency_key.clone());
        let result = self.log.append_now(batch).await;
        let mut ctx = relock(&self.ctx);
        ctx.started_key = started_key;
        match result {
            Ok(()) => {
                ctx.appended = from.saturating_add(events.len());
                Ok(())
            }
            Err(e) => {
                let reason = format!("the session log did not record the command's start: {e}");
                ctx.refused = Some(reason.clone());
                Err(reason)
            }
        }
    }
}
