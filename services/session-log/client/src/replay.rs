//! Replay lookup for the exec path: has this step already run?
//!
//! A command step is identified by `payload.stepKey`. The runtime appends
//! `harness.runtime.command.started` before running a command and
//! `harness.runtime.command.completed` (with the result) after. On replay:
//! - a completed event means: return the recorded result, do not run the command again;
//! - a started event without a completed one means the process died mid-command: the side effects
//!   may or may not have happened, so this is reported as [`StepOutcome::Incomplete`], never
//!   treated as "not run" (which would silently re-run it).

use crate::client::{ClientError, SessionLogClient};
use crate::model::StoredEvent;
use kube_harness_protocol::trace::step_key_of;

pub use kube_harness_protocol::trace::kind::{COMMAND_COMPLETED, COMMAND_STARTED};

/// What the log says about one step.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    /// The step completed; `completed.payload` holds the recorded result.
    Completed {
        started: Option<StoredEvent>,
        completed: StoredEvent,
    },
    /// Started, never completed: the caller must decide (report, ask, compensate); do not re-run
    /// blindly.
    Incomplete { started: StoredEvent },
    /// No event mentions this step: it is safe to run.
    NotStarted,
}

/// Looks `step_key` up in `events` (a run's events in sequence order). Only the type and the
/// step key are read, not the whole typed payload ([`step_key_of`]): a started event is
/// `Incomplete` whatever else its data holds.
pub fn find_step(events: &[StoredEvent], step_key: &str) -> StepOutcome {
    let mentions = |e: &&StoredEvent| step_key_of(&e.payload) == Some(step_key);
    let started = events
        .iter()
        .filter(mentions)
        .find(|e| e.event_type == COMMAND_STARTED)
        .cloned();
    let completed = events
        .iter()
        .filter(mentions)
        .find(|e| e.event_type == COMMAND_COMPLETED)
        .cloned();
    match (started, completed) {
        (started, Some(completed)) => StepOutcome::Completed { started, completed },
        (Some(started), None) => StepOutcome::Incomplete { started },
        (None, None) => StepOutcome::NotStarted,
    }
}

/// Reads `run` from the session log and looks `step_key` up. A damaged run is an error (its
/// history cannot be trusted), never "not started".
pub async fn lookup_step(
    client: &SessionLogClient,
    run: &str,
    step_key: &str,
) -> Result<StepOutcome, ClientError> {
    let events = client.read_all(run).await?;
    Ok(find_step(&events, step_key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    fn ev(seq: u64, ty: &str, payload: Value) -> StoredEvent {
        let Value::Object(payload) = payload else {
            unreachable!()
        };
        StoredEvent {
            run_id: "r".into(),
            sequence: seq,
            append_idempotency_key: format!("k{seq}"),
            occurrence_id: None,
            event_type: ty.into(),
            payload,
            digest: String::new(),
            recorded_at_ms: 0,
        }
    }

    #[test]
    fn completed_step_returns_the_recorded_result() {
        let events = vec![
            ev(1, COMMAND_STARTED, json!({"stepKey": "s1"})),
            ev(
                2,
                COMMAND_COMPLETED,
                json!({"stepKey": "s1", "exitCode": 0, "stdout": "hi\n"}),
            ),
            ev(3, COMMAND_STARTED, json!({"stepKey": "s2"})),
        ];
        match find_step(&events, "s1") {
            StepOutcome::Completed { started, completed } => {
                assert_eq!(started.unwrap().sequence, 1);
                assert_eq!(completed.payload["stdout"], "hi\n");
            }
            other => panic!("expected Completed, got {other:?}"),
        }
    }

    #[test]
    fn started_but_not_completed_is_incomplete_not_absent() {
        let events = vec![
            ev(1, COMMAND_STARTED, json!({"stepKey": "s1"})),
            ev(
                2,
                COMMAND_COMPLETED,
                json!({"stepKey": "s1", "exitCode": 0}),
            ),
            ev(3, COMMAND_STARTED, json!({"stepKey": "s2"})),
        ];
        assert_eq!(
            find_step(&events, "s2"),
            StepOutcome::Incomplete {
                started: events[2].clone()
            }
        );
        assert_eq!(find_step(&events, "s3"), StepOutcome::NotStarted);
        assert_eq!(find_step(&[], "s1"), StepOutcome::NotStarted);
    }

    #[test]
    fn other_event_types_and_keys_do_not_count() {
        let events = vec![
            ev(1, "harness.tool_call.started", json!({"stepKey": "s1"})),
            ev(2, COMMAND_COMPLETED, json!({"stepKey": "s10"})),
            ev(3, COMMAND_COMPLETED, json!({"stepKey": 1})),
            ev(4, COMMAND_COMPLETED, Value::Object(Map::new())),
        ];
        assert_eq!(find_step(&events, "s1"), StepOutcome::NotStarted);
        assert!(matches!(
            find_step(&events, "s10"),
            StepOutcome::Completed { started: None, .. }
        ));
    }
}
