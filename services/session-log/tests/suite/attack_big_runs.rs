//! Issue 30, item 3: the session log kept every stored event in memory, with no bound per run or
//! session. One tenant appending took it from 19 to 131 MiB, four parallel reads of a 41 MB run
//! got it OOMKilled, and a log past its memory limit would crash-loop on reload.
//!
//! The real server binary (file store, the chart's default) takes one big run (64 MB by default;
//! `KH_BIG_RUN_MB=500` for the figure in docs/session-log.md) from four writers while four readers
//! follow it, then four parallel reads of the whole run (pages of 1,000), then a SIGKILL, a reload
//! and the same reads; its peak resident
//! memory (`VmHWM`) must stay within [`LIMIT_MIB`] throughout, whatever the run's size. On the
//! code before the fix (run once against it) this failed: the peak grew with the run.

use super::process_support::ServerProcess;
use serde_json::json;
use std::time::Duration;

/// Bytes of each event's payload text; the run holds `KH_BIG_RUN_MB` (default 64) of them.
const PAYLOAD: usize = 200 * 1024;
/// The most the server may hold at its peak, whatever the run's size: what the design allows with
/// every read slot busy. In a debug build the append path (four writers, four followers) peaks
/// near 60 MiB, and each of the at most 8 reads in flight holds one page of 4 MiB of events (about
/// 8 MiB with its allocations). Observed: 71 to 83 MiB at 63 and 500 MB. The code before the fix
/// peaked at 756 MiB with a 63 MB run.
const LIMIT_MIB: u64 = 128;

/// One page of the big run after `after`: how many events it held and its `next`.
async fn page(http: &reqwest::Client, base: &str, after: usize) -> (usize, Option<u64>) {
    let page: serde_json::Value = http
        .get(format!(
            "{base}/v1/runs/big-run/events?after={after}&limit=1000"
        ))
        .bearer_auth(super::common::TOKEN)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        page["events"].as_array().unwrap().len(),
        page["next"].as_u64(),
    )
}

/// Reads the whole run, page after page; the events read.
async fn read_whole_run(base: String) -> usize {
    let http = reqwest::Client::new();
    let mut seen = 0;
    loop {
        let (n, next) = page(&http, &base, seen).await;
        seen += n;
        if next.is_none() {
            return seen;
        }
    }
}

/// Follows the run while it is appended to, as a client tailing the log does, until it has seen
/// `total` events.
async fn tail_run(base: String, total: usize) -> usize {
    let http = reqwest::Client::new();
    let mut seen = 0;
    while seen < total {
        let (n, _) = page(&http, &base, seen).await;
        seen += n;
        if n == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    seen
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
            tokio::spawn(read_whole_run(base))
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
    // Four writers append the run while four readers follow it.
    let tails: Vec<_> = (0..4)
        .map(|_| tokio::spawn(tail_run(server.base_url.clone(), events)))
        .collect();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let client = server.client();
            tokio::spawn(async move {
                let text = "x".repeat(PAYLOAD);
                for n in (w..events).step_by(4) {
                    let event = kube_harness_session_log::client::NewEvent::with_key(
                        format!("k{n}"),
                        "test.big",
                        json!({"n": n, "text": text}).as_object().unwrap().clone(),
                    );
                    client.append("big-run", &event).await.unwrap();
                }
            })
        })
        .collect();
    for task in writers {
        task.await.unwrap();
    }
    for task in tails {
        assert_eq!(task.await.unwrap(), events);
    }
    let written = std::fs::metadata(&path).unwrap().len() / 1_000_000;
    let appended = server.peak_rss_kib() / 1024;
    four_parallel_reads(&server, events).await;
    let peak = server.peak_rss_kib() / 1024;
    eprintln!(
        "appended {written} MB, 4 parallel reads, peak RSS {peak} MiB (limit {LIMIT_MIB}); {events} events by 4 writers while 4 readers followed the run: peak {appended} MiB, then 4 parallel reads of the whole run"
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
