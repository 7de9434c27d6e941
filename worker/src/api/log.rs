//! Forwarding trace events to the session log service.
//!
//! Fail-closed where it matters: a command's `command.started` event must be committed before the
//! command runs (its [`StartRecorder`]); if it cannot be, the command does not run and the caller gets
//! 503. Events after the command (file events, `command.completed`) cannot un-run it, but the
//! request waits for them too: when their append fails, or the log refuses one, the request
//! fails (503) and they wait in an ordered queue that is flushed before the next command may
//! start. Nothing is dropped: an event the log refused stays first in line (the session runs
//! nothing more until the log takes it), so the log never misses an event of a command that ran,
//! and order is kept.
//!
//! Idempotency keys are derived, never random: `step:<stepKey>:<n>` for the n-th event of a step,
//! `<instance>:exec-<counter>:<n>` for commands without a step key, and
//! `<instance>:<turnId>:end:<n>` for a turn's closing events. A retried append (the client's own
//! retries, the pending queue) therefore never duplicates an event.

use super::relock;
use async_trait::async_trait;
use kube_harness_runtime::{EventSink, NotRun, StartGate, TraceEvent};
use kube_harness_session_log_client::client::NewEvent;
use kube_harness_session_log_client::{ClientError, SessionLogClient};
use serde_json::Value;
use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

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
    /// retried append with the same key is recognised by the log as the same event), cut to fit
    /// the log ([`fit`]).
    pub fn to_new_event(event: &TraceEvent, key: String) -> NewEvent {
        let mut payload = match &event.data {
            Value::Object(map) => map.clone(),
            other => {
                let mut map = serde_json::Map::new();
                map.insert("value".into(), other.clone());
                map
            }
        };
        fit(&mut payload, MAX_LOG_PAYLOAD);
        NewEvent::with_key(key, event.kind.clone(), payload)
    }

    /// Appends everything pending, in order. On an error it and the rest stay queued, also an
    /// event the log refused outright (a 4xx, such as a full session quota: retrying cannot
    /// help, but dropping it would leave a hole in the record of what ran).
    pub async fn flush_pending(&self) -> Result<(), ClientError> {
        let mut pending = self.pending.lock().await;
        while let Some((run, event)) = pending.front() {
            if let Err(e) = self.client.append(run, event).await {
                if let ClientError::Rejected { status, code, .. } = &e {
                    tracing::error!(
                        run,
                        key = event.append_idempotency_key,
                        status,
                        code,
                        "session log refused an event; it stays queued and nothing more runs: {e}"
                    );
                }
                return Err(e);
            }
            pending.pop_front();
        }
        Ok(())
    }

    /// How many events wait to be appended.
    pub async fn pending_len(&self) -> usize {
        self.pending.lock().await.len()
    }

    /// Appends `events` now, after everything pending; nothing of `events` is queued on failure.
    pub async fn append_now(&self, events: Vec<(String, NewEvent)>) -> Result<(), ClientError> {
        self.flush_pending().await?;
        for (run, event) in &events {
            self.client.append(run, event).await?;
        }
        Ok(())
    }

    /// Queues `events` behind what is pending and appends them all, awaited: `Err` when the
    /// log did not take them (they stay queued, in order).
    pub async fn enqueue_and_flush(
        &self,
        events: Vec<(String, NewEvent)>,
    ) -> Result<(), ClientError> {
        self.pending.lock().await.extend(events);
        let flushed = self.flush_pending().await;
        if let Err(e) = &flushed {
            tracing::warn!("session log append failed; events stay queued: {e}");
        }
        flushed
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

/// Most bytes of JSON the worker sends as one event's payload: the session log refuses (413)
/// over its limit (256 KiB by default, counted on the canonical JSON), less a margin.
pub const MAX_LOG_PAYLOAD: usize =
    kube_harness_session_log_client::model::DEFAULT_MAX_PAYLOAD_BYTES - 16 * 1024;

/// What replaces the cut end of a field.
pub const CUT_MARK: &str = "…[kube-harness: cut to fit the session log]";

/// Cuts an event's largest text fields (`stdout`, `stderr`, `command`) until its JSON fits in
/// `limit` bytes, setting `stdoutTruncated`/`stderrTruncated` for the output it cut. Raw sizes
/// are bounded (a script at 120 KiB, inline output at 16 KiB a stream), but JSON escaping makes a
/// control byte six: a command printing them would otherwise have its completion refused by the
/// log, and an event the log refuses stays queued and stops the session (issue 31's attacker).
/// Deterministic, so a retried append under the same key sends the same bytes.
pub fn fit(payload: &mut serde_json::Map<String, Value>, limit: usize) {
    loop {
        let size = serde_json::to_vec(&*payload).map_or(0, |v| v.len());
        if size <= limit {
            return;
        }
        let longest = ["stdout", "stderr", "command"]
            .into_iter()
            .filter_map(|k| Some((k, payload.get(k)?.as_str()?.len())))
            .max_by_key(|(_, len)| *len);
        let Some((key, len)) = longest.filter(|(_, len)| *len > CUT_MARK.len().saturating_mul(2))
        else {
            return;
        };
        let Some(text) = payload.get(key).and_then(Value::as_str) else {
            return;
        };
        let mut keep = len / 2;
        while !text.is_char_boundary(keep) {
            keep = keep.saturating_sub(1);
        }
        let cut = format!("{}{CUT_MARK}", &text[..keep]);
        payload.insert(key.to_string(), Value::String(cut));
        if key != "command" {
            payload.insert(format!("{key}Truncated"), Value::Bool(true));
        }
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

/// One command's [`StartGate`]: before the command runs, appends what the turn emitted for it so
/// far (an escalation's events, then `command.started`), and remembers how far it got. It lives
/// for one command only; the worker reads it afterwards.
pub struct StartRecorder<'a> {
    log: &'a LogForwarder,
    capture: &'a Capture,
    run: &'a str,
    /// Keys are `<prefix>:<n>`, n counting this command's events from 1.
    prefix: &'a str,
    /// Events of the capture already appended.
    pub appended: usize,
    /// The idempotency key of the command's (last) started event, once the gate saw it.
    pub started_key: Option<String>,
}

impl<'a> StartRecorder<'a> {
    pub fn new(log: &'a LogForwarder, capture: &'a Capture, run: &'a str, prefix: &'a str) -> Self {
        StartRecorder {
            log,
            capture,
            run,
            prefix,
            appended: 0,
            started_key: None,
        }
    }

    /// The events of `events` (this command's capture) not appended yet, with their keys.
    pub fn rest(&self, events: &[TraceEvent]) -> Vec<(String, NewEvent)> {
        keyed(
            self.run,
            self.prefix,
            events.get(self.appended..).unwrap_or_default(),
            self.appended,
        )
    }
}

#[async_trait]
impl StartGate for StartRecorder<'_> {
    async fn before_run(&mut self) -> Result<(), NotRun> {
        let events = self.capture.since(self.appended);
        let batch = keyed(self.run, self.prefix, &events, self.appended);
        self.started_key = batch.last().map(|(_, e)| e.append_idempotency_key.clone());
        match self.log.append_now(batch).await {
            Ok(()) => {
                self.appended = self.appended.saturating_add(events.len());
                Ok(())
            }
            Err(e) => Err(NotRun(format!(
                "the session log did not record the command's start: {e}"
            ))),
        }
    }
}
