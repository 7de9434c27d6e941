//! Races between real OS processes (the `ledger-race-worker` binary) over a shared file store and
//! a shared PostgreSQL database: several workers claim the same tasks, wakeups and queue messages;
//! one more claims an item and is killed with SIGKILL. Every item must be completed exactly once,
//! leases of one item must never overlap, and the killed worker's item must be reclaimed after
//! its lease expired. Also: a store lock held by a killed process is released.

use super::common::{open_store, Backend};
use kube_harness_ledger::ledger::{
    create_durable_orchestration_services, EnqueueRequest, NewTask, NewWakeup,
};
use kube_harness_ledger::store::locked;
use kube_harness_ledger::{Key, StoreError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const WORKERS: usize = 4;
const ITEMS: usize = 30;
const LEASE_MS: u64 = 3000;

struct Worker {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

fn spawn(store_arg: &str, schema: &str, kind: &str, owner: &str, extra: &[&str]) -> Worker {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ledger-race-worker"))
        .args([
            "--store",
            store_arg,
            "--pg-schema",
            schema,
            "--kind",
            kind,
            "--owner",
            owner,
        ])
        .args(["--lease-ms", &LEASE_MS.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ledger-race-worker");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let value: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}"));
            if tx.send(value).is_err() {
                break;
            }
        }
    });
    Worker { child, lines: rx }
}

fn sigkill(child: &mut Child) {
    let pid = child.id() as i32;
    // kill(1) sends a real SIGKILL without adding a libc binding to the test.
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait().unwrap();
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn seed(store: std::sync::Arc<dyn kube_harness_ledger::DurableJsonStore>, kind: &str) {
    let l = create_durable_orchestration_services("ledgers", store).unwrap();
    for i in 0..ITEMS {
        match kind {
            "tasks" => {
                l.tasks
                    .create(NewTask {
                        id: None,
                        payload: json!(i),
                        max_attempts: 5,
                        delay_ms: 0,
                    })
                    .await
                    .unwrap();
            }
            "wakeups" => {
                l.wakeups
                    .schedule(NewWakeup {
                        id: None,
                        due_at: now_ms() - 1,
                        payload: json!(i),
                    })
                    .await
                    .unwrap();
            }
            _ => {
                l.queues
                    .enqueue(
                        "race",
                        EnqueueRequest {
                            payload: json!(i),
                            delay_ms: 0,
                            max_deliveries: 5,
                        },
                    )
                    .await
                    .unwrap();
            }
        }
    }
}

/// Runs one race and checks its claims and completions.
async fn race(backend: Backend, kind: &str) {
    let started = Instant::now();
    let name = format!("race_{kind}_{backend:?}").to_lowercase();
    let Some(fixture) = open_store(backend, &name).await else {
        return;
    };
    let store_arg = match backend {
        Backend::File => format!(
            "file:{}",
            fixture.dir.as_ref().unwrap().path().join("store").display()
        ),
        Backend::Postgres => format!("postgres:{}", fixture.db.as_ref().unwrap().url),
        Backend::Memory => unreachable!("the memory store is per process"),
    };
    let schema = "kube_harness_ledger";
    seed(fixture.store.clone(), kind).await;

    // The victim claims one item and hangs; it is killed once its claim is on record.
    let mut victim = spawn(&store_arg, schema, kind, "victim", &["--stall-after-claim"]);
    let victim_claim = victim
        .lines
        .recv_timeout(Duration::from_secs(20))
        .expect("victim claims");
    assert_eq!(victim_claim["event"], "claimed");
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|i| {
            spawn(
                &store_arg,
                schema,
                kind,
                &format!("w{i}"),
                &["--work-ms", "20"],
            )
        })
        .collect();
    sigkill(&mut victim.child);

    let mut events = vec![victim_claim.clone()];
    for w in &mut workers {
        let status = w.child.wait().unwrap();
        assert!(status.success(), "worker exited with {status}");
        events.extend(w.lines.try_iter());
    }

    let mut claims: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    let mut completions: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in &events {
        let item = e["item"].as_str().unwrap_or_default().to_string();
        match e["event"].as_str().unwrap() {
            "claimed" => claims.entry(item).or_default().push(e),
            "completed" if e["outcome"] == "ok" => completions.entry(item).or_default().push(e),
            "completed" => panic!("a live worker lost its lease: {e}"),
            _ => {}
        }
    }
    assert_eq!(claims.len(), ITEMS, "every item was claimed");
    assert_eq!(completions.len(), ITEMS, "every item was completed");
    for (item, done) in &completions {
        assert_eq!(done.len(), 1, "item {item} completed {} times", done.len());
    }
    let victim_item = victim_claim["item"].as_str().unwrap();
    for (item, cs) in &claims {
        let expected = if item == victim_item { 2 } else { 1 };
        assert_eq!(
            cs.len(),
            expected,
            "item {item} claimed {} times: {cs:?}",
            cs.len()
        );
        // Lease windows of one item never overlap: a reclaim starts after the previous expiry.
        let mut windows: Vec<(u64, u64)> = cs
            .iter()
            .map(|c| {
                let end = c["expires_at"].as_u64().unwrap();
                (end - c["lease_ms"].as_u64().unwrap(), end)
            })
            .collect();
        windows.sort();
        for pair in windows.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "overlapping leases on {item}: {pair:?}"
            );
        }
    }
    let reclaim = claims[victim_item]
        .iter()
        .find(|c| c["owner"] != "victim")
        .expect("reclaimed");
    assert_ne!(reclaim["token"], victim_claim["token"]);
    assert_ne!(completions[victim_item][0]["owner"], "victim");
    let owners: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e["event"] == "claimed")
        .filter_map(|e| e["owner"].as_str())
        .collect();
    assert!(
        owners.len() >= 3,
        "claims spread over several processes: {owners:?}"
    );
    fixture.cleanup().await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "race took {:?}",
        started.elapsed()
    );
}

/// A lock held by a process is exclusive across processes and released when it is SIGKILLed.
async fn killed_lock_holder(backend: Backend) {
    let Some(fixture) = open_store(backend, &format!("lock_{backend:?}").to_lowercase()).await
    else {
        return;
    };
    let store_arg = match backend {
        Backend::File => format!(
            "file:{}",
            fixture.dir.as_ref().unwrap().path().join("store").display()
        ),
        _ => format!("postgres:{}", fixture.db.as_ref().unwrap().url),
    };
    let mut holder = spawn(
        &store_arg,
        "kube_harness_ledger",
        "tasks",
        "holder",
        &["--hold-lock", "ledgers/tasks/x"],
    );
    let line = holder
        .lines
        .recv_timeout(Duration::from_secs(20))
        .expect("holder locks");
    assert_eq!(line["event"], "locked");
    let key = Key::new("ledgers/tasks/x").unwrap();
    let store = fixture.store.clone();
    let attempt = tokio::time::timeout(
        Duration::from_millis(500),
        locked::<(), StoreError, _, _>(store.as_ref(), &key, |_| async { Ok(()) }),
    )
    .await;
    assert!(attempt.is_err(), "lock must be exclusive across processes");
    sigkill(&mut holder.child);
    tokio::time::timeout(
        Duration::from_secs(10),
        locked::<(), StoreError, _, _>(store.as_ref(), &key, |_| async { Ok(()) }),
    )
    .await
    .expect("lock released after SIGKILL")
    .unwrap();
    fixture.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tasks_race() {
    race(Backend::File, "tasks").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_wakeups_race() {
    race(Backend::File, "wakeups").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_queue_race() {
    race(Backend::File, "queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tasks_race() {
    race(Backend::Postgres, "tasks").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wakeups_race() {
    race(Backend::Postgres, "wakeups").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_queue_race() {
    race(Backend::Postgres, "queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_lock_released_when_holder_is_killed() {
    killed_lock_holder(Backend::File).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lock_released_when_holder_is_killed() {
    killed_lock_holder(Backend::Postgres).await;
}

/// A writer SIGKILLed at random points mid-write never leaves a torn document: readers always see
/// a complete earlier or later version (temp file + fsync + rename).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_writes_survive_sigkill_mid_write() {
    let fixture = open_store(Backend::File, "kill_writer").await.unwrap();
    let store_arg = format!(
        "file:{}",
        fixture.dir.as_ref().unwrap().path().join("store").display()
    );
    let key = Key::new("docs/hot").unwrap();
    for round in 0..6u64 {
        let mut writer = spawn(
            &store_arg,
            "kube_harness_ledger",
            "tasks",
            "writer",
            &["--write-loop", "docs/hot"],
        );
        let line = writer
            .lines
            .recv_timeout(Duration::from_secs(20))
            .expect("writer starts");
        assert_eq!(line["event"], "writing");
        tokio::time::sleep(Duration::from_millis(20 + 37 * round)).await;
        sigkill(&mut writer.child);
        let doc = fixture
            .store
            .read_json(&key)
            .await
            .expect("document parses after SIGKILL")
            .expect("present");
        assert_eq!(
            doc["pad"].as_str().map(str::len),
            Some(256 * 1024),
            "complete document"
        );
        assert!(doc["n"].is_u64(), "a numbered version: {}", doc["n"]);
    }
    // Only the document is visible; leftover temp files of killed writers are hidden names.
    assert_eq!(
        fixture
            .store
            .list_dir(Some(&Key::new("docs").unwrap()))
            .await
            .unwrap(),
        vec!["hot"]
    );
    fixture.cleanup().await;
}
