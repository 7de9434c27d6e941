//! Replay lookup through a real server: completed steps return their recorded result; a step
//! started but never completed is reported as incomplete (a damaged run is an error: crash.rs).

use super::common::obj;
use kube_harness_session_log::client::NewEvent;
use kube_harness_session_log::replay::{
    lookup_step, StepOutcome, COMMAND_COMPLETED, COMMAND_STARTED,
};
use serde_json::json;

#[tokio::test]
async fn lookup_reports_completed_incomplete_and_not_started_steps() {
    let server = super::common::file_server().await.unwrap();
    let client = server.client();
    let run = "run-replay";
    let appends = [
        (COMMAND_STARTED, json!({"stepKey": "s1", "command": "ls"})),
        (
            COMMAND_COMPLETED,
            json!({"stepKey": "s1", "exitCode": 0, "stdout": "a\nb\n"}),
        ),
        (
            COMMAND_STARTED,
            json!({"stepKey": "s2", "command": "rm -rf build"}),
        ),
    ];
    for (ty, payload) in appends {
        client
            .append(run, &NewEvent::new(ty, obj(payload)))
            .await
            .unwrap();
    }
    match lookup_step(&client, run, "s1").await.unwrap() {
        StepOutcome::Completed { completed, started } => {
            assert_eq!(completed.payload["stdout"], "a\nb\n");
            assert_eq!(completed.sequence, 2);
            assert_eq!(started.unwrap().sequence, 1);
        }
        other => panic!("s1 should be completed, got {other:?}"),
    }
    match lookup_step(&client, run, "s2").await.unwrap() {
        StepOutcome::Incomplete { started } => {
            assert_eq!(started.payload["command"], "rm -rf build")
        }
        other => panic!("s2 should be incomplete, got {other:?}"),
    }
    assert_eq!(
        lookup_step(&client, run, "s3").await.unwrap(),
        StepOutcome::NotStarted
    );
    assert_eq!(
        lookup_step(&client, "other-run", "s1").await.unwrap(),
        StepOutcome::NotStarted
    );
}
