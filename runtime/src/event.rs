//! Trace events (`lh.trace.v2`): one JSON object per line, the same shape from every tier because
//! one shell runtime emits them all. The line and the event types are the protocol's
//! (`kube_harness_protocol::trace`, schema `protocol/schema/lh.trace.v2.json`); emitting them is
//! the runtime's.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

pub use kube_harness_protocol::trace::{kind, Payload, TraceEvent, TRACE_SCHEMA};
use kube_harness_protocol::trace::{FileSource, FileTruncated, OmittedFiles};

/// Where events go: a trace file, the session log, a test's collector.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: &TraceEvent);
}

/// Keeps every event in memory (the `--json` output, tests).
#[derive(Default)]
pub struct Collector(Mutex<Vec<TraceEvent>>);

impl Collector {
    pub fn events(&self) -> Vec<TraceEvent> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl EventSink for Collector {
    fn emit(&self, event: &TraceEvent) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event.clone());
    }
}

/// Defaults of [`Emitter::with_file_event_limit`] and [`Emitter::with_file_event_bytes`]: the
/// worker's `--max-file-events` and `--max-file-event-bytes` defaults, defined once with them.
pub use kube_harness_protocol::worker_args::{
    DEFAULT_MAX_FILE_EVENTS, DEFAULT_MAX_FILE_EVENT_BYTES,
};

/// The bytes `s` takes inside a JSON string, as serde_json writes it: `"` and `\` and the usual
/// control characters escaped in two bytes, the other control characters in six
/// (`\u0001`), everything else as its UTF-8.
pub fn json_string_bytes(s: &str) -> usize {
    s.chars().fold(0usize, |n, c| {
        n.saturating_add(match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
    })
}

/// Stamps events with the session, turn and sequence, and fans them out to sinks.
///
/// File events are bounded: of one run of consecutive `harness.file.created/modified/deleted`
/// events (the changes of one command, or of one merge-back: the runtime emits them together,
/// between the command's started and completed events, or before the turn's usage event), at
/// most `file_event_limit` go out, and only while their paths together take at most
/// `file_event_bytes` ([`json_string_bytes`]): the first event that would pass it and every
/// later one of the run are left out. The rest are counted, and one `harness.file.truncated`
/// event with the counts goes out just before the next event of another type, so what a command
/// that creates 200,000 files, or 5,000 files with 50 KB paths, costs (events in memory, in the
/// exec answer, in the session log, in the trace file) stays bounded.
pub struct Emitter {
    session_id: String,
    turn_id: String,
    state: Mutex<EmitState>,
    file_event_limit: usize,
    file_event_bytes: usize,
    sinks: Vec<std::sync::Arc<dyn EventSink>>,
}

#[derive(Default)]
struct EmitState {
    seq: u64,
    /// The current run of file events.
    files: FileRun,
}

#[derive(Default)]
struct FileRun {
    listed: u64,
    /// Bytes of the listed events' paths ([`json_string_bytes`]).
    listed_bytes: u64,
    /// The byte budget, not the count, stopped the listing.
    out_of_bytes: bool,
    created: u64,
    modified: u64,
    deleted: u64,
    /// `source` and `tier` of the first omitted event (one run has one of each).
    first_omitted: Option<(FileSource, u8)>,
}

impl FileRun {
    fn omitted(&self) -> u64 {
        self.created
            .saturating_add(self.modified)
            .saturating_add(self.deleted)
    }

    /// The `harness.file.truncated` payload, if events of this run were left out.
    fn summary(&self, limit: usize, byte_limit: usize) -> Option<FileTruncated> {
        let (source, tier) = self.first_omitted?;
        let total = self.omitted();
        (total > 0).then(|| {
            // The byte fields only when the byte budget stopped the listing (the count's
            // summary keeps its shape).
            let bytes = |n: u64| self.out_of_bytes.then_some(n);
            FileTruncated {
                source,
                tier,
                limit: limit as u64,
                listed: self.listed,
                omitted: OmittedFiles {
                    created: self.created,
                    modified: self.modified,
                    deleted: self.deleted,
                    total,
                },
                byte_limit: bytes(byte_limit as u64),
                listed_bytes: bytes(self.listed_bytes),
            }
        })
    }
}

impl Emitter {
    pub fn new(session_id: &str, turn_id: &str, sinks: Vec<std::sync::Arc<dyn EventSink>>) -> Self {
        Emitter {
            session_id: session_id.to_string(),
            turn_id: turn_id.to_string(),
            state: Mutex::new(EmitState::default()),
            file_event_limit: DEFAULT_MAX_FILE_EVENTS,
            file_event_bytes: DEFAULT_MAX_FILE_EVENT_BYTES,
            sinks,
        }
    }

    /// At most `limit` `harness.file.*` events per command and per merge-back (see [`Emitter`]).
    pub fn with_file_event_limit(mut self, limit: usize) -> Self {
        self.file_event_limit = limit;
        self
    }

    /// At most `bytes` of paths ([`json_string_bytes`]) in the `harness.file.*` events of one
    /// command and of one merge-back (see [`Emitter`]).
    pub fn with_file_event_bytes(mut self, bytes: usize) -> Self {
        self.file_event_bytes = bytes;
        self
    }

    pub fn emit(&self, payload: Payload) {
        let mut out: Vec<(u64, Payload)> = Vec::with_capacity(2);
        {
            let mut st = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(file) = payload.file() {
                let run = &mut st.files;
                let bytes = json_string_bytes(&file.path) as u64;
                if !run.out_of_bytes
                    && run.listed < self.file_event_limit as u64
                    && run.listed_bytes.saturating_add(bytes) > self.file_event_bytes as u64
                {
                    run.out_of_bytes = true;
                }
                if run.out_of_bytes || run.listed >= self.file_event_limit as u64 {
                    let counter = match payload {
                        Payload::FileCreated(_) => &mut run.created,
                        Payload::FileModified(_) => &mut run.modified,
                        _ => &mut run.deleted,
                    };
                    *counter = counter.saturating_add(1);
                    run.first_omitted.get_or_insert((file.source, file.tier));
                    return;
                }
                run.listed = run.listed.saturating_add(1);
                run.listed_bytes = run.listed_bytes.saturating_add(bytes);
            } else {
                let run = std::mem::take(&mut st.files);
                if let Some(summary) = run.summary(self.file_event_limit, self.file_event_bytes) {
                    st.seq = st.seq.saturating_add(1);
                    out.push((st.seq, Payload::FileTruncated(summary)));
                }
            }
            st.seq = st.seq.saturating_add(1);
            out.push((st.seq, payload));
        }
        self.send(out);
    }

    /// Ends a run of file events that no other event follows (an upload's): its
    /// `harness.file.truncated`, if the bound left some out.
    pub fn flush_file_events(&self) {
        let mut out = Vec::with_capacity(1);
        {
            let mut st = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let run = std::mem::take(&mut st.files);
            if let Some(summary) = run.summary(self.file_event_limit, self.file_event_bytes) {
                st.seq = st.seq.saturating_add(1);
                out.push((st.seq, Payload::FileTruncated(summary)));
            }
        }
        self.send(out);
    }

    fn send(&self, out: Vec<(u64, Payload)>) {
        for (seq, payload) in out {
            let at_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            let event = TraceEvent::new(&self.session_id, &self.turn_id, seq, at_ms, payload);
            for sink in &self.sinks {
                sink.emit(&event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_harness_protocol::trace::{
        CommandCompleted, FileEvent, FileKind, TierFigures, TurnUsage,
    };
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn file(change: fn(FileEvent) -> Payload, path: &str, source: FileSource, tier: u8) -> Payload {
        change(FileEvent {
            path: path.into(),
            kind: FileKind::File,
            size: 0,
            mode: 0o644,
            tier,
            source,
        })
    }

    fn completed() -> Payload {
        Payload::CommandCompleted(CommandCompleted {
            command: "true".into(),
            tier: 0,
            cwd: "/session".into(),
            exit_code: 0,
            duration_ms: 1,
            timed_out: false,
            truncated: false,
            step_key: None,
            file_tracking_skipped: None,
            stdout: Some(String::new()),
            stdout_ref: None,
            stdout_truncated: false,
            stderr: Some(String::new()),
            stderr_ref: None,
            stderr_truncated: false,
        })
    }

    fn usage() -> Payload {
        Payload::TurnUsage(TurnUsage {
            stayed_on_tier0: true,
            tier0: TierFigures::default(),
            higher_tier: None,
            escalations: vec![],
            refusals: 0,
        })
    }

    #[test]
    fn each_run_of_file_events_is_bounded_and_summarised_on_its_own() {
        let sink = Arc::new(Collector::default());
        let emitter = Emitter::new("s", "t", vec![sink.clone()]).with_file_event_limit(2);
        let x = |change| file(change, "/session/x", FileSource::Command, 0);
        for event in [
            x(Payload::FileCreated),
            x(Payload::FileModified),
            x(Payload::FileDeleted),
            x(Payload::FileCreated),
        ] {
            emitter.emit(event);
        }
        emitter.emit(completed());
        // A new run starts from zero; one at the limit needs no summary.
        for path in ["/session/y", "/session/z"] {
            emitter.emit(file(Payload::FileCreated, path, FileSource::Merge, 1));
        }
        emitter.emit(usage());
        let events = sink.events();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                kind::FILE_CREATED,
                kind::FILE_MODIFIED,
                kind::FILE_TRUNCATED,
                kind::COMMAND_COMPLETED,
                kind::FILE_CREATED,
                kind::FILE_CREATED,
                kind::TURN_USAGE
            ]
        );
        assert_eq!(
            events[2].data,
            json!({"source": "command", "tier": 0, "limit": 2, "listed": 2,
                   "omitted": {"created": 1, "modified": 0, "deleted": 1, "total": 2}})
        );
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    }

    /// Issue 12: a count of events did not bound their bytes (5,000 files with 50 KB paths made
    /// an 81 MB exec answer). The paths of one run stop at the byte budget; the summary says so.
    #[test]
    #[allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
    fn each_run_of_file_events_is_bounded_in_bytes_too() {
        let sink = Arc::new(Collector::default());
        let emitter = Emitter::new("s", "t", vec![sink.clone()])
            .with_file_event_limit(100)
            .with_file_event_bytes(250);
        let long = format!("/session/{}", "d".repeat(91)); // 100 bytes
        for change in [
            Payload::FileCreated,
            Payload::FileCreated,
            Payload::FileModified, // would pass 250: left out, and so is every later one
            Payload::FileDeleted,
        ] {
            emitter.emit(file(change, &long, FileSource::Merge, 1));
        }
        // Short as it is, it comes after the budget ran out.
        emitter.emit(file(
            Payload::FileCreated,
            "/session/a",
            FileSource::Merge,
            1,
        ));
        emitter.emit(usage());
        let events = sink.events();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                kind::FILE_CREATED,
                kind::FILE_CREATED,
                kind::FILE_TRUNCATED,
                kind::TURN_USAGE
            ]
        );
        assert_eq!(
            events[2].data,
            json!({"source": "merge", "tier": 1, "limit": 100, "listed": 2,
                   "byteLimit": 250, "listedBytes": 200,
                   "omitted": {"created": 1, "modified": 1, "deleted": 1, "total": 3}})
        );
        // The summary with its byte fields is what the trace schema allows.
        let schema: Value =
            serde_json::from_str(include_str!("../../protocol/schema/lh.trace.v2.json")).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let line = serde_json::to_value(&events[2]).unwrap();
        assert!(validator.is_valid(&line), "{line}");
        let mut bogus = line.clone();
        bogus["data"]["bogus"] = json!(1);
        assert!(!validator.is_valid(&bogus));
        // Escapes count as serde_json writes them.
        let odd = "/session/\"q\\\n\u{1}é";
        assert_eq!(
            json_string_bytes(odd),
            serde_json::to_string(odd).unwrap().len() - 2
        );
    }
}
