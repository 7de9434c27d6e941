//! Task claims per second at 1, 8 and 32 concurrent workers, for each backend, in one run.
//! Each worker loops claim -> complete until the ledger is empty; the in-memory backend, measured
//! in the same run, is the baseline for the ratio column (machines are noisy, ratios less so).
//!
//! cargo bench -p kube-harness-ledger --bench claims
//! (PostgreSQL: export KH_TEST_POSTGRES_URL from `bash tests/services/postgres.sh start`.)

use kube_harness_ledger::ledger::{create_durable_orchestration_services, NewTask};
use kube_harness_ledger::{
    DurableJsonStore, FileStore, MemoryStore, PostgresStore, PostgresStoreOptions,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

const TASKS: usize = 400;
const WORKERS: [usize; 3] = [1, 8, 32];

async fn claims_per_second(store: Arc<dyn DurableJsonStore>, root: &str, workers: usize) -> f64 {
    let l = create_durable_orchestration_services(root, store).unwrap();
    for i in 0..TASKS {
        l.tasks
            .create(NewTask {
                id: None,
                payload: json!(i),
                max_attempts: 3,
                delay_ms: 0,
            })
            .await
            .unwrap();
    }
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let l = l.clone();
        handles.push(tokio::spawn(async move {
            let owner = format!("w{w}");
            let mut n = 0usize;
            while let Some(task) = l.tasks.claim(&owner, 60_000).await.unwrap() {
                let token = task.lease.unwrap().token;
                l.tasks
                    .complete(&task.id, &token, json!(null))
                    .await
                    .unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(total, TASKS, "every task claimed exactly once");
    total as f64 / elapsed
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends: Vec<(&str, Arc<dyn DurableJsonStore>)> = vec![
        ("memory", Arc::new(MemoryStore::new())),
        (
            "file",
            Arc::new(FileStore::open(dir.path().join("store")).unwrap()),
        ),
    ];
    let mut db = None;
    match std::env::var("KH_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => {
            let test_db = kube_harness_service_kit::testing::fresh_database("bench_claims").await.unwrap();
            let options = PostgresStoreOptions { max_connections: 16, ..Default::default() };
            backends.push(("postgres", Arc::new(PostgresStore::connect(&test_db.url, options).await.unwrap())));
            db = Some(test_db);
            let _ = url;
        }
        _ => println!("postgres: SKIPPED (KH_TEST_POSTGRES_URL unset; run `bash tests/services/postgres.sh start`)"),
    }
    println!(
        "task claim+complete cycles per second, {TASKS} tasks per run, {} cores",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!(
        "{:<10} {:>8} {:>12} {:>11}",
        "backend", "workers", "claims/s", "vs memory"
    );
    let mut baseline = std::collections::HashMap::new();
    for (name, store) in &backends {
        for workers in WORKERS {
            let rate = claims_per_second(store.clone(), &format!("bench-{workers}"), workers).await;
            if *name == "memory" {
                baseline.insert(workers, rate);
            }
            println!(
                "{name:<10} {workers:>8} {rate:>12.0} {:>11.4}",
                rate / baseline[&workers]
            );
        }
    }
    drop(backends);
    if let Some(db) = db {
        db.drop_database().await;
    }
}
