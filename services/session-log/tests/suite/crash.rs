//! Crash tests: the real server binary as a child process, killed with SIGKILL under load.
//!
//! Afterwards every acknowledged event must be present exactly once at the sequence it was
//! acknowledged with, sequences must be gapless, and retrying an acknowledged key must return the
//! original event.

use super::common::{obj, TOKEN};
use super::process_support::ServerProcess;
use kube_harness_session_log::client::NewEvent;
use kube_harness_session_log::{ClientError, SessionLogClient, StoredEvent};
use rand::Rng;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SERVER: &str = env!("CARGO_BIN_EXE_kh-session-log-test-server");
const RUNS: [&str; 4] = ["run-0", "run-1", "run-2", "run-3"];

type Acked = Arc<Mutex<HashMap<(String, String), (NewEvent, StoredEvent)>>>;

/// Appends until `stop`, retrying each event (same key, same bytes) until it is acknowledged.
async fn writer(clients: Vec<SessionLogClient>, id: usize, stop: Arc<AtomicBool>, acked: Acked) {
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let run = RUNS[(id + n) % RUNS.len()];
        let event = NewEvent::with_key(
            format!("w{id}-{n}"),
            "test.event",
            obj(json!({"writer": id, "n": n})),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut attempt = 0usize;
        loop {
            let client = &clients[(id + attempt) % clients.len()];
            match client.append(run, &event).await {
                Ok(a) => {
                    assert_eq!(a.event.append_idempotency_key, event.append_idempotency_key);
                    acked.lock().unwrap().insert(
                        (run.to_string(), event.append_idempotency_key.clone()),
                        (event.clone(), a.event),
                    );
                    break;
                }
                Err(ClientError::Exhausted { .. }) if Instant::now() < deadline => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("append failed for good: {e}"),
            }
        }
        n += 1;
    }
}

async fn verify(client: &SessionLogClient, acked: &Acked) -> usize {
    let acked = acked.lock().unwrap().clone();
    let mut total = 0;
    for run in RUNS {
        let events = client.read_all(run).await.unwrap();
        total += events.len();
        let mut keys = HashSet::new();
        for (i, e) in events.iter().enumerate() {
            assert_eq!(
                e.sequence,
                i as u64 + 1,
                "run {run}: gap or reordering at index {i}"
            );
            assert!(
                keys.insert(e.append_idempotency_key.clone()),
                "run {run}: key {} stored twice",
                e.append_idempotency_key
            );
        }
        let by_key: HashMap<_, _> = events
            .iter()
            .map(|e| (e.append_idempotency_key.clone(), e))
            .collect();
        for ((r, key), (_, stored)) in &acked {
            if r == run {
                let found = by_key
                    .get(key)
                    .unwrap_or_else(|| panic!("acknowledged {run}/{key} is missing"));
                assert_eq!(
                    *found, stored,
                    "{run}/{key} differs from what was acknowledged"
                );
            }
        }
    }
    // Same-key retries return the originals.
    for ((run, _), (event, stored)) in acked.iter().take(50) {
        let again = client.append(run, event).await.unwrap();
        assert_eq!(&again.event, stored);
    }
    // And a changed payload under an acknowledged key is refused.
    if let Some(((run, _), (event, _))) = acked.iter().next() {
        let mut changed = event.clone();
        changed.payload.insert("changed".into(), json!(true));
        assert_eq!(
            client.append(run, &changed).await.unwrap_err().code(),
            Some("idempotency-conflict")
        );
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_keeps_every_acknowledged_event_across_sigkill_loops() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file:{}", dir.path().join("sessions.ndjson").display());
    let mut server = ServerProcess::start(&store, dir.path(), "server").await;
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let writers: Vec<_> = (0..8)
        .map(|id| {
            tokio::spawn(writer(
                vec![server.client()],
                id,
                stop.clone(),
                acked.clone(),
            ))
        })
        .collect();
    let cycles = 22;
    for _ in 0..cycles {
        let pause = rand::thread_rng().gen_range(50..250);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        server.kill();
        server.restart().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }
    let n_acked = acked.lock().unwrap().len();
    assert!(
        n_acked >= 200,
        "too little progress under kills: {n_acked} acknowledged"
    );
    let stored = verify(&server.client(), &acked).await;
    eprintln!("{cycles} SIGKILL cycles: {n_acked} acknowledged, {stored} stored");
    assert!(stored >= n_acked);
}

#[tokio::test]
async fn restart_truncates_a_torn_tail_and_refuses_a_damaged_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.ndjson");
    let mut server =
        ServerProcess::start(&format!("file:{}", path.display()), dir.path(), "server").await;
    let client = server.client();
    for i in 0..5 {
        for run in ["a", "b"] {
            client
                .append(run, &NewEvent::new("t", obj(json!({"i": i}))))
                .await
                .unwrap();
        }
    }
    server.kill();
    let clean = std::fs::read(&path).unwrap();
    let mut torn = clean.clone();
    torn.extend_from_slice(br#"{"crc32c":"1234abcd","event":{"runId":"a","sequence":6,"#);
    std::fs::write(&path, &torn).unwrap();
    server.restart().await;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        clean,
        "restart cut exactly the torn fragment"
    );
    assert_eq!(client.read_all("a").await.unwrap().len(), 5);
    assert_eq!(
        client
            .append("a", &NewEvent::new("t", obj(json!({}))))
            .await
            .unwrap()
            .sequence,
        6
    );

    server.kill();
    let data = std::fs::read(&path).unwrap();
    let mut lines: Vec<Vec<u8>> = data
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    let text = String::from_utf8(lines[2].clone()).unwrap();
    assert!(text.contains(r#""runId":"a""#), "{text}");
    lines[2] = text.replacen(r#""i":1"#, r#""i":7"#, 1).into_bytes();
    std::fs::write(&path, lines.concat()).unwrap();
    server.restart().await;
    let http = reqwest::Client::new();
    let resp = http
        .get(format!("{}/v1/runs/a/events", server.base_url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 500);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "run-corrupt");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("line 3") && message.contains("checksum mismatch"),
        "{message}"
    );
    let err = client.read_all("a").await.unwrap_err();
    assert_eq!(
        err.code(),
        Some("run-corrupt"),
        "the client reports it, not an empty history"
    );
    assert_eq!(
        client.read_all("b").await.unwrap().len(),
        5,
        "run b is intact"
    );
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(
        log.contains("damaged record") && log.contains("truncating a torn final record"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_replicas_stay_gapless_across_sigkill_loops() {
    let Some(db) = kube_harness_service_kit::testing::fresh_database("crash_replicas").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("postgres:{}", db.url);
    let mut servers = vec![
        ServerProcess::start(&store, dir.path(), "replica-0").await,
        ServerProcess::start(&store, dir.path(), "replica-1").await,
    ];
    let clients: Vec<_> = servers.iter().map(ServerProcess::client).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    // Each writer talks to both replicas (failing over on errors), so both append to every run.
    let writers: Vec<_> = (0..8)
        .map(|id| tokio::spawn(writer(clients.clone(), id, stop.clone(), acked.clone())))
        .collect();
    for cycle in 0..20 {
        tokio::time::sleep(Duration::from_millis(rand::thread_rng().gen_range(50..200))).await;
        let victim = &mut servers[cycle % 2];
        victim.kill();
        victim.restart().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }
    let n_acked = acked.lock().unwrap().len();
    assert!(n_acked >= 200, "too little progress: {n_acked}");
    for server in &servers {
        let stored = verify(&server.client(), &acked).await;
        assert!(stored >= n_acked);
    }
    drop(servers);
    db.drop_database().await;
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly_and_releases_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.ndjson");
    let store = format!("file:{}", path.display());
    let mut server = ServerProcess::start(&store, dir.path(), "server").await;
    let client = server.client();
    client
        .append("r", &NewEvent::new("t", obj(json!({}))))
        .await
        .unwrap();
    // SAFETY: sending a signal to our own child process.
    assert_eq!(
        unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "server ignored SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "SIGTERM exit status: {status}");
    // The lock is released: a new server opens the same file and sees the event.
    server.restart().await;
    assert_eq!(client.read_all("r").await.unwrap().len(), 1);
}

#[test]
fn refuses_to_start_without_a_token_or_on_a_bad_store() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(SERVER).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--store", "memory", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("no token configured") && err.contains("--insecure-no-auth"),
        "{err}"
    );
    let (code, err) = run(&["--store", "nope", "--insecure-no-auth"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("expected memory, file:PATH or postgres:URL"),
        "{err}"
    );
    let missing = dir.path().join("missing/dir/x.ndjson");
    let store = format!("file:{}", missing.display());
    let (code, err) = run(&[
        "--store",
        &store,
        "--insecure-no-auth",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("does not exist"), "{err}");
}
