//! Attack: forge the output of a replayed step (issue 12, B14).
//!
//! Output over the inline limit is written to `/artifacts/trace/<name>.stdout.txt` and the
//! completed event refers to it; replaying the step (same runId and stepKey) reads the file back.
//! `/artifacts` is writable by commands, so a later command can rewrite the payload with text of
//! the same length, and the tester got the forged text back with `"replayed": true`. The
//! reference now carries the payload's SHA-256 and replay checks it. A real worker and a real
//! session log on loopback, real sandbox runs.

use super::api_support::TestLog;
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_runtime::event::kind;
use kube_harness_session_log::client::NewEvent;
use serde_json::json;
use sha2::Digest;

const BIG: usize = 20_000;

async fn worker_with_log() -> (TestLog, super::api_support::TestWorker) {
    let log = TestLog::start().await;
    let (tmp, mut cfg) = super::api_support::config();
    cfg.session_log = Some(log.config());
    let w = super::api_support::start_with(tmp, cfg).await;
    (log, w)
}

fn big_step() -> ExecRequest {
    ExecRequest::new(format!("head -c {BIG} /dev/zero | tr '\\0' A")).step("run-1", "big")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_rewritten_with_the_same_length_is_not_replayed() {
    let (_log, w) = worker_with_log().await;
    let first = w.client.exec(&big_step()).await.unwrap();
    assert_eq!(first.outcome.stdout, "A".repeat(BIG));
    let done = first
        .events
        .iter()
        .find(|e| e.kind == kind::COMMAND_COMPLETED)
        .unwrap();
    assert_eq!(done.data["stdoutRef"]["bytes"], BIG);
    assert_eq!(
        done.data["stdoutRef"]["sha256"],
        hex::encode(sha2::Sha256::digest("A".repeat(BIG)))
    );

    // A later command rewrites the payload in place: same name, same length, other text.
    let forge = format!(
        "f=$(ls /artifacts/trace/*.stdout.txt) && head -c {BIG} /dev/zero | tr '\\0' F > \"$f\" && wc -c < \"$f\""
    );
    let out = w.client.exec(&ExecRequest::new(&forge)).await.unwrap();
    assert_eq!(
        (out.outcome.exit_code, out.outcome.stdout.trim()),
        (0, BIG.to_string().as_str()),
        "{}",
        out.outcome.stderr
    );

    let again = w.client.exec(&big_step()).await.unwrap();
    assert!(again.replayed);
    assert!(
        !again.outcome.stdout.contains('F'),
        "the forged output was replayed"
    );
    assert_eq!(
        (again.outcome.stdout.as_str(), again.outcome.truncated),
        ("", true)
    );
    assert_eq!(again.outcome.exit_code, 0);
    assert_eq!(
        again.replay_problems.len(),
        1,
        "{:?}",
        again.replay_problems
    );
    let problem = &again.replay_problems[0];
    assert!(
        problem.starts_with("stdout: the recorded output /artifacts/trace/")
            && problem.ends_with(
                ".stdout.txt was changed after it was recorded (SHA-256 mismatch); not returned"
            ),
        "{problem}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untouched_payload_is_replayed_whole() {
    let (_log, w) = worker_with_log().await;
    w.client.exec(&big_step()).await.unwrap();
    let again = w.client.exec(&big_step()).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.outcome.stdout, "A".repeat(BIG));
    assert!(!again.outcome.truncated);
    assert!(again.replay_problems.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_payload_is_replayed_empty_and_said_so() {
    let (_log, w) = worker_with_log().await;
    w.client.exec(&big_step()).await.unwrap();
    let out = w
        .client
        .exec(&ExecRequest::new("rm /artifacts/trace/*.stdout.txt"))
        .await
        .unwrap();
    assert_eq!(out.outcome.exit_code, 0, "{}", out.outcome.stderr);
    let again = w.client.exec(&big_step()).await.unwrap();
    assert_eq!(
        (again.outcome.stdout.as_str(), again.outcome.truncated),
        ("", true)
    );
    assert_eq!(again.replay_problems.len(), 1);
    assert!(
        again.replay_problems[0].ends_with("is missing or no longer the recorded size"),
        "{:?}",
        again.replay_problems
    );
}

/// A completed event recorded before references carried a hash (`{"contentRef", "bytes"}`)
/// replays as it always did: the file, if it has the recorded length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_recorded_without_a_hash_replays_as_before() {
    let (log, w) = worker_with_log().await;
    let text = "old".repeat(7000);
    std::fs::create_dir_all(w.host("/artifacts/trace")).unwrap();
    std::fs::write(w.host("/artifacts/trace/legacy.stdout.txt"), &text).unwrap();
    let client = log.client();
    let payload = |v: serde_json::Value| v.as_object().unwrap().clone();
    client
        .append(
            "run-1",
            &NewEvent::with_key(
                "legacy-started",
                kind::COMMAND_STARTED,
                payload(
                    json!({"command": "old", "tier": 0, "cwd": "/session", "stepKey": "legacy"}),
                ),
            ),
        )
        .await
        .unwrap();
    client
        .append(
            "run-1",
            &NewEvent::with_key(
                "legacy-completed",
                kind::COMMAND_COMPLETED,
                payload(json!({
                    "command": "old", "tier": 0, "cwd": "/session", "stepKey": "legacy",
                    "exitCode": 0, "durationMs": 1, "timedOut": false, "truncated": false,
                    "stdoutRef": {"contentRef": "/artifacts/trace/legacy.stdout.txt", "bytes": text.len()},
                    "stderr": "",
                })),
            ),
        )
        .await
        .unwrap();
    let again = w
        .client
        .exec(&ExecRequest::new("old").step("run-1", "legacy"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.outcome.stdout, text);
    assert!(!again.outcome.truncated && again.replay_problems.is_empty());
}
