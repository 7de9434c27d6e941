//! Issue 30, item 3: the session log kept every stored event in memory, with no bound per run or
//! session. One tenant appending took it from 19 to 131 MiB, four parallel reads of a 41 MB run
//! got it OOMKilled, and a log past its memory limit would crash-loop on reload.
//!
//! The real server binary (file store, the chart's default) takes one big run (64 MB by default;
//! `KH_BIG_RUN_MB=500` for the figure in docs/performance.md), then four parallel reads of the
//! whole run (pages of 1,000), then a SIGKILL, a reload and the same reads; its peak resident
//! memory (`VmHWM`) must stay within [`LIMIT_MIB`] throughout, whatever the run's size. On the
//! code before the fix (run once against it) this failed: the peak grew with the run.

use super::process_support::ServerProcess;
use serde_json::json;
use std::time::Duration;

/// Bytes of each event's payload text; the run holds `KH_BIG_RUN_MB` (default 64) of them.
const PAYLOAD: usize = 200 * 1024;
/// The most the server may hold at its peak, whatever the run's size: in a debug build the append
/// path peaks near 40 MiB, and each read in flight holds at most one page of 4 MiB of events
/// (about 8 MiB with its allocations). The code before the fix peaked at 756 MiB with a 64 MB run.
const LIMIT_MIB: u64 = 96;

async fn read_whole_run(base: &str, token: &str, run: &str) -> usize {
    let http = reqwest::Client::new();
    let mut after = 0;
    let mut events = 0;
    loop {
        let page: serde_json::Value = http
            .get(format!(
                "{base}/v1/runs/{run}/events?after={after}&limit=1000"
            ))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        let got = page["events"].as_array().unwrap();
        events += got.len();
        match page["next"].as_u64() {
            Some(next) => after = next,
            None => return events,
        }
    }
}

/// Megabytes to append: `KH_BIG_RUN_MB`, 64 unless set (quick enough for every test run).
fn run_mb() -> usize {
    std::env::var("KH_BIG_RUN_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

async fn four_parallel_reads(server: &ServerProcess, events: usize) {
    let reads: Vec<_> = (0..4)
        .map(|_| {
            let base = server.base_url.clone();
            tokio::spawn(
                async move { read_whole_run(&base, super::common::TOKEN, "big-run").await },
            )
        })
        .collect();
    for read in reads {
        assert_eq!(read.await.unwrap(), events);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_run_and_parallel_reads_cost_the_server_flat_memory_also_after_a_restart() {
    let mb = run_mb();
    let events = mb * 1_000_000 / PAYLOAD;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.ndjson");
    let store = format!("file:{}", path.display());
    // Without fsync: what is measured is memory, and 500 MB of synced appends would take long.
    // The session quota is raised to fit the run (the default, 256 MiB, would refuse 500 MB).
    let quota = (2 * mb * 1_000_000).to_string();
    let flags = [
        "--sync=false",
        "--max-session-bytes",
        &quota,
        "--max-namespace-bytes",
        &quota,
    ];
    let mut server = ServerProcess::start_with(&store, dir.path(), "big", &flags).await;
    let client = server.client();
    let text = "x".repeat(PAYLOAD);
    for n in 0..events {
        let event = kube_harness_session_log::client::NewEvent::with_key(
            format!("k{n}"),
            "test.big",
            json!({"n": n, "text": text}).as_object().unwrap().clone(),
        );
        client.append("big-run", &event).await.unwrap();
    }
    let written = std::fs::metadata(&path).unwrap().len() / 1_000_000;
    let appended = server.peak_rss_kib() / 1024;
    four_parallel_reads(&server, events).await;
    let peak = server.peak_rss_kib() / 1024;
    eprintln!(
        "appended {written} MB ({events} events, peak {appended} MiB), 4 parallel reads, peak RSS {peak} MiB (limit {LIMIT_MIB})"
    );
    assert!(
        peak <= LIMIT_MIB,
        "peak {peak} MiB while serving a {written} MB run"
    );

    server.kill();
    server.restart().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reloaded = server.peak_rss_kib() / 1024;
    let resident = server.rss_kib() / 1024;
    four_parallel_reads(&server, events).await;
    let peak = server.peak_rss_kib() / 1024;
    eprintln!("after a SIGKILL and reload of {written} MB: peak {reloaded} MiB loading ({resident} MiB resident after), peak RSS {peak} MiB with 4 parallel reads (limit {LIMIT_MIB})");
    assert!(peak <= LIMIT_MIB, "peak {peak} MiB after reloading");
}
