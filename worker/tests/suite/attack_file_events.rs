//! Attack: a command that creates a huge number of files (issue 12, B12).
//!
//! Every file change was an event, carried whole in the exec answer, the session log and the
//! end-turn answer: 200,000 files in one command gave an 80 MB exec answer (over the client's
//! 64 MiB cap, so `kube-harness exec` failed), 640 MB of worker memory and a 40 MB end-turn
//! answer. Now one command's (and one merge-back's) `harness.file.*` events stop at
//! `max_file_events`, one `harness.file.truncated` event carries the counts of the rest, and the
//! end-turn file list has the same bound with a count of what it leaves out. Here: 30,000 files
//! against a limit of 1,000, through the real worker API, with a real session log, on Tier-0 and
//! through a Tier-1 merge-back.

use super::api_support::{TestLog, TOKEN};
use kube_harness_protocol::worker_api::{EndTurnResponse, ExecResponse};
use kube_harness_runtime::event::kind;
use kube_harness_tier1::LocalTier1;
use kube_harness_worker::api::{self, Worker};
use serde_json::json;
use std::sync::Arc;

const LIMIT: usize = 1_000;
const FILES: usize = 30_000;
/// Creates a directory with FILES empty files in it: FILES + 1 created events.
const MANY: &str = "mkdir /session/many && cd /session/many && seq 1 30000 | xargs touch";

/// POSTs and returns the answer's size and body.
async fn post(base_url: &str, path: &str, body: serde_json::Value) -> (usize, Vec<u8>) {
    let response = reqwest::Client::new()
        .post(format!("{base_url}{path}"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.unwrap();
    (bytes.len(), bytes.to_vec())
}

fn kinds(events: &[kube_harness_runtime::TraceEvent]) -> Vec<(&str, usize)> {
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for e in events {
        match runs.last_mut() {
            Some((k, n)) if *k == e.kind => *n += 1,
            _ => runs.push((e.kind.as_str(), 1)),
        }
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_thousand_files_in_one_command_give_bounded_events_and_answers() {
    let log = TestLog::start().await;
    let (tmp, mut config) = super::api_support::config();
    config.max_file_events = LIMIT;
    config.session_log = Some(log.config());
    let w = super::api_support::start_with(tmp, config).await;

    let (size, body) = post(&w.base_url, "/v1/exec", json!({"script": MANY})).await;
    let r: ExecResponse = serde_json::from_slice(&body).unwrap();
    assert_eq!(r.outcome.exit_code, 0, "{}", r.outcome.stderr);
    assert_eq!(
        kinds(&r.events),
        [
            (kind::COMMAND_STARTED, 1),
            (kind::FILE_CREATED, LIMIT),
            (kind::FILE_TRUNCATED, 1),
            (kind::COMMAND_COMPLETED, 1),
        ]
    );
    let summary = &r.events[LIMIT + 1];
    assert_eq!(
        summary.data,
        json!({"source": "command", "tier": 0, "limit": LIMIT, "listed": LIMIT,
               "omitted": {"created": FILES + 1 - LIMIT, "modified": 0, "deleted": 0, "total": FILES + 1 - LIMIT}})
    );
    let seqs: Vec<u64> = r.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=LIMIT as u64 + 3).collect::<Vec<_>>());
    assert!(size < 400 * 1024, "exec answer of {size} bytes");
    // The files are all there; only their events were bounded.
    assert_eq!(
        std::fs::read_dir(w.host("/session/many")).unwrap().count(),
        FILES
    );

    // The session log got the same bounded events.
    let logged = log.client().read_all("s1").await.unwrap();
    assert_eq!(logged.len(), LIMIT + 3);
    assert_eq!(logged[LIMIT + 1].event_type, kind::FILE_TRUNCATED);

    // Deleting them: again bounded, counted as deletions.
    let (_, body) = post(
        &w.base_url,
        "/v1/exec",
        json!({"script": "rm -r /session/many"}),
    )
    .await;
    let r: ExecResponse = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        r.events[LIMIT + 1].data["omitted"],
        json!({"created": 0, "modified": 0, "deleted": FILES + 1 - LIMIT, "total": FILES + 1 - LIMIT})
    );

    // The end-turn answer lists at most LIMIT paths and counts the rest.
    let (size, body) = post(&w.base_url, "/v1/turns/end", json!({})).await;
    let ended: EndTurnResponse = serde_json::from_slice(&body).unwrap();
    let turn = ended.turn.unwrap();
    assert_eq!(turn.file_changes.len(), LIMIT);
    assert!(turn.file_changes.iter().all(|c| c.change == "deleted"));
    assert_eq!(turn.file_changes_omitted, 2 * (FILES + 1 - LIMIT) as u64);
    assert!(size < 200 * 1024, "end-turn answer of {size} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier1_merge_back_of_thirty_thousand_files_gives_bounded_events() {
    let (tmp, mut config) = super::api_support::config();
    config.max_file_events = LIMIT;
    let worker = Arc::new(Worker::new(config, Some(Arc::new(LocalTier1::default()))).unwrap());
    let listener = api::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(api::serve(
        listener,
        worker,
        api::AuthConfig::with_token(TOKEN).unwrap(),
        async {
            let _ = stopped.await;
        },
    ));

    // `make` escalates; the files are made on Tier-1 and come back at the end of the turn.
    let (_, body) = post(
        &base_url,
        "/v1/exec",
        json!({"script": format!("make --version > /dev/null; {MANY}")}),
    )
    .await;
    let r: ExecResponse = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (r.outcome.exit_code, r.outcome.tier),
        (0, 1),
        "{}",
        r.outcome.stderr
    );

    let (size, body) = post(&base_url, "/v1/turns/end", json!({})).await;
    let turn = serde_json::from_slice::<EndTurnResponse>(&body)
        .unwrap()
        .turn
        .unwrap();
    assert_eq!(
        kinds(&turn.events),
        [
            (kind::FILE_CREATED, LIMIT),
            (kind::FILE_TRUNCATED, 1),
            (kind::TURN_USAGE, 1),
        ]
    );
    assert_eq!(
        turn.events[LIMIT].data,
        json!({"source": "merge", "tier": 1, "limit": LIMIT, "listed": LIMIT,
               "omitted": {"created": FILES + 1 - LIMIT, "modified": 0, "deleted": 0, "total": FILES + 1 - LIMIT}})
    );
    assert_eq!(turn.file_changes.len(), LIMIT);
    assert_eq!(turn.file_changes_omitted, (FILES + 1 - LIMIT) as u64);
    assert!(size < 600 * 1024, "end-turn answer of {size} bytes");
    assert_eq!(
        std::fs::read_dir(tmp.path().join("session/many"))
            .unwrap()
            .count(),
        FILES
    );
    let _ = stop.send(());
}
