//! Attack (issue 12): file events bounded in number but not in bytes.
//!
//! One command's file events stopped at `--max-file-events` (10,000), but each carries its full
//! path, and a path may be about 64 KB (256 levels of 250-character names): 5,000 files at depth
//! 200 made a 258 MB trace.ndjson and 981 MB of host memory on the local host, and through the
//! worker API an 81 MB exec answer (over WorkerClient's 64 MiB cap) and an 81 MB end-turn
//! answer. Now the paths of one command's (and one merge-back's) file events are bounded in bytes
//! too (`--max-file-event-bytes`, 4 MiB by default), the rest counted in the
//! `harness.file.truncated` event, and the end-turn file list has the same byte bound. Through the
//! real `kube-harness worker` over loopback and the real `kube-harness local exec`.

use kube_harness_worker::api::model::ExecRequest;
use kube_harness_worker::api::WorkerClient;
use kube_harness_worker::runtime::event::kind;
use kube_harness_worker::runtime::TraceEvent;
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::support::{exec, show};

/// `levels` directories of 250-character names, one in the other, and `files` empty files with
/// such a name in the deepest: levels + files created events, each path about 251 × levels bytes.
fn deep(levels: usize, files: usize) -> String {
    format!(
        "n=$(printf 'd%.0s' $(seq 1 250)); cd /session; for i in $(seq 1 {levels}); do mkdir $n; cd $n; done; for i in $(seq 1 {files}); do : > f$i$n; done"
    )
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real worker on loopback with `args`, and a client for it once it is ready.
fn worker(root: &std::path::Path, args: &[&str]) -> (Running, String) {
    for dir in ["session", "artifacts", "persistent"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let token = root.join("token");
    std::fs::write(&token, "bytes-token-1\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_kube-harness"))
        .args(["worker", "--session", "bytes"])
        .args(args)
        .arg("--token-file")
        .arg(&token)
        .env("KH_WORKER_LISTEN", format!("127.0.0.1:{port}"))
        .env("KH_WORKER_WORKSPACE_ROOT", root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Running(child), format!("http://127.0.0.1:{port}"))
}

async fn ready(client: &WorkerClient) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.readyz().await.is_err() {
        assert!(Instant::now() < deadline, "the worker never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs of equal event types: `[(type, how many)]`.
fn kinds(events: &[TraceEvent]) -> Vec<(&str, usize)> {
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for e in events {
        match runs.last_mut() {
            Some((k, n)) if *k == e.kind => *n += 1,
            _ => runs.push((e.kind.as_str(), 1)),
        }
    }
    runs
}

fn path_bytes(events: &[TraceEvent]) -> u64 {
    events
        .iter()
        .filter(|e| e.kind == kind::FILE_CREATED)
        .map(|e| e.data["path"].as_str().unwrap().len() as u64)
        .sum()
}

#[test]
fn deep_long_paths_stop_at_the_byte_budget_and_the_rest_are_counted() {
    const BUDGET: u64 = 200_000;
    const CREATED: usize = 20 + 100;
    let tmp = tempfile::tempdir().unwrap();
    let (_worker, url) = worker(
        &tmp.path().join("ws"),
        &["--max-file-event-bytes", &BUDGET.to_string()],
    );
    let client = WorkerClient::new(&url, "bytes-token-1").unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        ready(&client).await;
        // About 580 KB of paths: 20 directories 251 bytes deeper each, 100 files at ~5.3 KB.
        let r = client.exec(&ExecRequest::new(deep(20, 100))).await.unwrap();
        assert_eq!(r.outcome.exit_code, 0, "{}", r.outcome.stderr);
        let runs = kinds(&r.events);
        let listed = runs[1].1;
        assert_eq!(
            runs,
            [
                (kind::COMMAND_STARTED, 1),
                (kind::FILE_CREATED, listed),
                (kind::FILE_TRUNCATED, 1),
                (kind::COMMAND_COMPLETED, 1),
            ]
        );
        let listed_bytes = path_bytes(&r.events);
        // The budget is used up to less than one path (each under 5.3 KB) and never passed.
        assert!(
            listed_bytes <= BUDGET && listed_bytes > BUDGET - 5_300,
            "{listed_bytes}"
        );
        let omitted = CREATED - listed;
        assert_eq!(
            r.events[listed + 1].data,
            json!({"source": "command", "tier": 0, "limit": 10_000, "listed": listed,
                   "byteLimit": BUDGET, "listedBytes": listed_bytes,
                   "omitted": {"created": omitted, "modified": 0, "deleted": 0, "total": omitted}})
        );

        // The end-turn file list has the same byte bound, and counts what it leaves out.
        let turn = client.end_turn().await.unwrap().turn.unwrap();
        let listed_paths: u64 = turn.file_changes.iter().map(|c| c.path.len() as u64).sum();
        assert!(listed_paths <= BUDGET, "{listed_paths}");
        assert_eq!(turn.file_changes.len(), listed);
        assert_eq!(turn.file_changes_omitted, omitted as u64);
    });
}

#[test]
fn the_attackers_deep_tree_gives_answers_well_under_the_clients_cap() {
    const CAP: usize = 8 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let (_worker, url) = worker(&tmp.path().join("ws"), &[]);
    // A client that refuses any answer over 8 MiB (the default refuses over 64 MiB).
    let client = WorkerClient::new(&url, "bytes-token-1")
        .unwrap()
        .with_max_answer_bytes(CAP);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        ready(&client).await;
        // 400 files at depth 200: 20 MB of paths (the attacker's 5,000 made 250 MB).
        let r = client
            .exec(&ExecRequest::new(deep(200, 400)))
            .await
            .unwrap();
        assert_eq!(r.outcome.exit_code, 0, "{}", r.outcome.stderr);
        let size = serde_json::to_vec(&r).unwrap().len();
        assert!(size < 5 << 20, "exec answer of {size} bytes");
        let truncated: Vec<&TraceEvent> = r
            .events
            .iter()
            .filter(|e| e.kind == kind::FILE_TRUNCATED)
            .collect();
        assert_eq!(truncated.len(), 1);
        let data = &truncated[0].data;
        assert_eq!(data["byteLimit"], json!(4 << 20));
        assert_eq!(data["listedBytes"], json!(path_bytes(&r.events)));
        assert_eq!(
            data["listed"].as_u64().unwrap() + data["omitted"]["total"].as_u64().unwrap(),
            600
        );
        let turn = client.end_turn().await.unwrap().turn.unwrap();
        let size = serde_json::to_vec(&turn).unwrap().len();
        assert!(size < 5 << 20, "end-turn answer of {size} bytes");
    });
}

#[test]
fn the_local_hosts_trace_of_a_deep_tree_stays_small() {
    let tmp = tempfile::tempdir().unwrap();
    let o = exec(tmp.path(), &[], &deep(200, 400));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let trace = tmp.path().join(".little-harness/sessions/s1/trace.ndjson");
    let size = std::fs::metadata(&trace).unwrap().len();
    assert!(size < 5 << 20, "trace of {size} bytes");
    let text = std::fs::read_to_string(&trace).unwrap();
    let truncated: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == kind::FILE_TRUNCATED)
        .collect();
    assert_eq!(truncated.len(), 1, "{truncated:?}");
    assert_eq!(truncated[0]["data"]["byteLimit"], json!(4 << 20));
}
