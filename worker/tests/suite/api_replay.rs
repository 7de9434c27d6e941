//! The worker with a REAL session log server (memory store, loopback): events are appended with
//! step keys, a completed step is answered from the log without running, a started-but-never-
//! completed step is refused with 409, an unreachable log keeps commands from running, and an
//! event the log refuses is never dropped: the request fails and nothing more runs.

use super::api_support::{config, start_with, TestLog};
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_runtime::event::kind;
use kube_harness_session_log::client::NewEvent;
use kube_harness_session_log::replay::COMMAND_STARTED;
use kube_harness_worker::api::SessionLogConfig;
use serde_json::json;

/// The types of a run's events in the log, in order.
async fn log_types(log: &TestLog, run: &str) -> Vec<String> {
    let events = log.client().read_all(run).await.unwrap();
    events.into_iter().map(|e| e.event_type).collect()
}

async fn worker_with_log(log: &TestLog) -> super::api_support::TestWorker {
    let (tmp, mut cfg) = config();
    cfg.session_log = Some(log.config());
    start_with(tmp, cfg).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_step_is_replayed_without_running_again() {
    let log = TestLog::start().await;
    let w = worker_with_log(&log).await;
    let req = ExecRequest::new("echo run >> /session/count; echo hi; echo warn >&2; exit 7")
        .step("run-1", "step-1");
    let first = w.client.exec(&req).await.unwrap();
    assert_eq!(
        (
            first.outcome.stdout.as_str(),
            first.outcome.exit_code,
            first.replayed
        ),
        ("hi\n", 7, false)
    );
    assert_eq!(first.log_pending, 0);
    let again = w.client.exec(&req).await.unwrap();
    assert!(again.replayed);
    assert!(again.events.is_empty());
    assert_eq!(
        (
            again.outcome.stdout.as_str(),
            again.outcome.stderr.as_str(),
            again.outcome.exit_code,
            again.outcome.tier,
            again.run_id.as_str()
        ),
        ("hi\n", "warn\n", 7, 0, "run-1")
    );
    // It really did not run twice.
    assert_eq!(
        std::fs::read_to_string(w.host("/session/count")).unwrap(),
        "run\n"
    );

    // The log holds the command's events, with the step key, in order, exactly once.
    let events = log.client().read_all("run-1").await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            kind::COMMAND_STARTED,
            kind::FILE_CREATED,
            kind::COMMAND_COMPLETED
        ]
    );
    assert_eq!(events[0].payload["stepKey"], "step-1");
    assert_eq!(events[2].payload["stepKey"], "step-1");
    assert_eq!(events[2].payload["exitCode"], 7);
    // Same step key in another run is another step.
    let other = w
        .client
        .exec(&ExecRequest::new("echo run >> /session/count").step("run-2", "step-1"))
        .await
        .unwrap();
    assert!(!other.replayed);
    assert_eq!(
        std::fs::read_to_string(w.host("/session/count")).unwrap(),
        "run\nrun\n"
    );
    // Commands without a step key go to the session's run.
    w.client.exec(&ExecRequest::new("true")).await.unwrap();
    let session_run = log.client().read_all("s1").await.unwrap();
    assert_eq!(session_run.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_output_is_replayed_from_its_artifact() {
    let log = TestLog::start().await;
    let w = worker_with_log(&log).await;
    let req = ExecRequest::new("seq 1 20000").step("run-big", "s");
    let first = w.client.exec(&req).await.unwrap();
    assert!(first.outcome.stdout.len() > 16 * 1024);
    let again = w.client.exec(&req).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.outcome.stdout, first.outcome.stdout);
    assert!(!again.outcome.truncated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_but_never_completed_step_is_409_and_not_run() {
    let log = TestLog::start().await;
    // What a worker that died mid-command leaves behind: the start, no completion.
    log.client()
        .append(
            "run-1",
            &NewEvent::with_key(
                "step:step-9:1",
                COMMAND_STARTED,
                json!({"command": "rm -rf /session/build", "tier": 0, "cwd": "/session", "stepKey": "step-9"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    let w = worker_with_log(&log).await;
    let err = w
        .client
        .exec(&ExecRequest::new("touch /session/ran").step("run-1", "step-9"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("step-incomplete"))
    );
    assert!(err.to_string().contains("never completed"), "{err}");
    assert!(!w.host("/session/ran").exists(), "never re-run");
    // A different step of the same run is fine.
    let r = w
        .client
        .exec(&ExecRequest::new("touch /session/ran").step("run-1", "step-10"))
        .await
        .unwrap();
    assert_eq!(r.outcome.exit_code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_session_log_keeps_commands_from_running() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (tmp, mut cfg) = config();
    cfg.session_log = Some(SessionLogConfig {
        url,
        token: None,
        run_scope: None,
    });
    let w = start_with(tmp, cfg).await;
    for req in [
        ExecRequest::new("touch /session/unlogged"),
        ExecRequest::new("touch /session/unlogged").step("run-1", "a"),
    ] {
        let err = w.client.exec(&req).await.unwrap_err();
        assert_eq!(
            (err.status(), err.code()),
            (Some(503), Some("session-log-unavailable")),
            "{err}"
        );
    }
    assert!(
        !w.host("/session/unlogged").exists(),
        "fail-closed: nothing ran unlogged"
    );
    assert_eq!(w.client.status().await.unwrap().commands.tier0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_the_log_missed_fail_the_request_and_are_appended_before_the_next_command_runs() {
    let mut log = TestLog::start().await;
    let w = worker_with_log(&log).await;
    let c = w.client.clone();
    // The log goes away while the command runs: its start is recorded, its completion is not.
    let running = tokio::spawn(async move {
        c.exec(&ExecRequest::new("sleep 0.5; echo one").step("run-q", "s1"))
            .await
    });
    super::api_support::wait_busy(&w.client).await;
    // Busy is set before the start is appended: pause only once the log holds the start.
    let reader = log.client();
    for _ in 0..500 {
        let events = reader.read_all("run-q").await.unwrap();
        if events
            .iter()
            .any(|e| e.event_type == "harness.runtime.command.started")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    log.pause().await;
    // Appends are awaited: a completion the log did not take fails the request (the seeds: an
    // uncommitted append fails the turn), saying the command ran; the event stays queued.
    let failed = running.await.unwrap().unwrap_err();
    assert_eq!(failed.code(), Some("session-log-unavailable"), "{failed}");
    assert!(
        failed.to_string().contains("the command ran (exit 0)"),
        "{failed}"
    );
    // While the log is down nothing else runs.
    let err = w
        .client
        .exec(&ExecRequest::new("touch /session/x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("session-log-unavailable"));
    assert!(!w.host("/session/x").exists());

    log.resume().await;
    // The pending completion goes first, so the step now replays instead of looking incomplete.
    let again = w
        .client
        .exec(&ExecRequest::new("sleep 0.5; echo one").step("run-q", "s1"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.outcome.stdout, "one\n");
    let turn = w
        .client
        .end_turn_with(&kube_harness_protocol::worker_api::EndTurnRequest {
            run_id: Some("run-q".into()),
            turn_id: None,
        })
        .await
        .unwrap()
        .turn
        .unwrap();
    assert!(turn.events.iter().any(|e| e.kind == kind::TURN_USAGE));
    let types = log_types(&log, "run-q").await;
    assert_eq!(
        types,
        [
            kind::COMMAND_STARTED,
            kind::COMMAND_COMPLETED,
            kind::TURN_USAGE
        ],
        "each event once, in order"
    );
}

/// Two sessions with the same name and the same run and step keys, scoped (as the operator
/// scopes them, by namespace and UID): each runs its own step, writes its own runs, and never
/// replays the other's; a run id that the scope makes too long is 400 before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_sessions_never_share_runs() {
    let log = TestLog::start().await;
    let scoped = |scope: &str| {
        let mut c = log.config();
        c.run_scope = Some(scope.to_string());
        c
    };
    // The longest a scope gets: a 63-character namespace and a UID.
    let scope_a = format!("{}:0b6f3a52-1c9d-4e0f-9a7b-5d2c8e1f4a60", "a".repeat(63));
    let (tmp_a, mut cfg_a) = config();
    cfg_a.session_log = Some(scoped(&scope_a));
    let a = start_with(tmp_a, cfg_a).await;
    let (tmp_b, mut cfg_b) = config();
    cfg_b.session_log = Some(scoped("team-b:77c1d0e4-uid-b"));
    let b = start_with(tmp_b, cfg_b).await;

    let req = ExecRequest::new("echo ran >> /session/count; echo $((6*7))").step("run-1", "s1");
    let ra = a.client.exec(&req).await.unwrap();
    let rb = b.client.exec(&req).await.unwrap();
    assert_eq!(
        (ra.replayed, rb.replayed),
        (false, false),
        "each ran its own step"
    );
    assert_eq!(ra.run_id, format!("{scope_a}:run-1"));
    assert_eq!(rb.run_id, "team-b:77c1d0e4-uid-b:run-1");
    for w in [&a, &b] {
        assert_eq!(
            std::fs::read_to_string(w.host("/session/count")).unwrap(),
            "ran\n"
        );
    }
    assert!(
        a.client.exec(&req).await.unwrap().replayed,
        "its own step replays"
    );
    assert!(
        log.client().read_all("run-1").await.unwrap().is_empty(),
        "nothing unscoped"
    );
    let completed = |events: Vec<kube_harness_session_log::StoredEvent>| {
        events
            .iter()
            .filter(|e| e.event_type == kind::COMMAND_COMPLETED)
            .count()
    };
    assert_eq!(
        completed(log.client().read_all(&ra.run_id).await.unwrap()),
        1
    );
    assert_eq!(
        completed(log.client().read_all(&rb.run_id).await.unwrap()),
        1
    );

    // No runId: the scope itself is the run.
    let plain = a.client.exec(&ExecRequest::new("true")).await.unwrap();
    assert_eq!(plain.run_id, scope_a);

    // A run id valid alone but too long once scoped: refused, not run.
    let long = ExecRequest::new("echo ran >> /session/count").step("r".repeat(120), "s1");
    let err = a.client.exec(&long).await.unwrap_err().to_string();
    assert!(err.contains("scoped"), "{err}");
    assert_eq!(
        std::fs::read_to_string(a.host("/session/count")).unwrap(),
        "ran\n"
    );
}

/// The seeds: an append the log does not commit fails the turn, and nothing is dropped. A log
/// that refuses the completion (413: its payload is over the log's limit; a full session quota
/// answers the same way) fails the request, which says the command ran; the refused event stays
/// first in line, so no later command runs unrecorded; before the change it was dropped with a
/// log line and the next command ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_log_refuses_fails_the_request_and_is_never_dropped() {
    let log = TestLog::start_limited(Some(600)).await;
    let w = worker_with_log(&log).await;
    let big = "echo made > /session/first; head -c 2000 /dev/zero | tr '\\0' x";
    let failed = w
        .client
        .exec(&ExecRequest::new(big).step("run-r", "big"))
        .await
        .unwrap_err();
    assert_eq!(failed.code(), Some("session-log-unavailable"), "{failed}");
    assert!(
        failed.to_string().contains("the command ran (exit 0)"),
        "{failed}"
    );
    assert!(
        failed.to_string().contains("413"),
        "the log's refusal is named: {failed}"
    );
    assert!(w.host("/session/first").exists(), "it did run");
    // Nothing more runs: the refused completion stays first in line.
    let next = w
        .client
        .exec(&ExecRequest::new("touch /session/second"))
        .await
        .unwrap_err();
    assert_eq!(next.code(), Some("session-log-unavailable"), "{next}");
    assert!(!w.host("/session/second").exists());
    // The log holds what came before the refused completion, and nothing after it: no hole,
    // no later event out of order.
    let types = log_types(&log, "run-r").await;
    assert_eq!(
        types,
        [kind::COMMAND_STARTED, kind::FILE_CREATED],
        "{types:?}"
    );
}

/// Issue 31's attacker: a script of 120,000 tabs (under the script cap) printing 16,000 control
/// bytes on each stream. Raw, everything is within bounds; as JSON a tab is two bytes and a
/// control byte six, so the completion was over the log's 256 KiB and refused, and with awaited
/// appends that wedged the session. The worker now cuts an event's largest text fields to fit
/// (flagging the output it cut), so the command is recorded and the next one runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_escaping_past_the_logs_limit_are_cut_to_fit_not_refused() {
    let log = TestLog::start().await;
    let w = worker_with_log(&log).await;
    let script = format!(
        "{}head -c 16000 /dev/zero | tr '\\0' '\\1'; head -c 16000 /dev/zero | tr '\\0' '\\1' >&2; echo ran > /session/wedge",
        "\t".repeat(120_000)
    );
    let r = w
        .client
        .exec(&ExecRequest::new(script).step("run-w", "big"))
        .await
        .unwrap();
    assert_eq!(r.outcome.exit_code, 0);
    assert_eq!(
        r.outcome.stdout.len(),
        16_000,
        "the answer keeps what the client gets"
    );
    let next = w.client.exec(&ExecRequest::new("cat /session/wedge")).await;
    assert_eq!(
        next.unwrap().outcome.stdout,
        "ran\n",
        "the session is not wedged"
    );
    let events = log.client().read_all("run-w").await.unwrap();
    let completed = events
        .iter()
        .find(|e| e.event_type == kind::COMMAND_COMPLETED)
        .expect("the completion is recorded");
    assert!(serde_json::to_vec(&completed.payload).unwrap().len() <= 256 * 1024);
    let command = completed.payload["command"].as_str().unwrap();
    assert!(
        command.ends_with("cut to fit the session log]"),
        "{}",
        &command[command.len() - 60..]
    );
    // A replay answers from the log: what was cut is flagged, not passed off as whole.
    let again = w
        .client
        .exec(&ExecRequest::new("never run").step("run-w", "big"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.outcome.exit_code, 0);
}
