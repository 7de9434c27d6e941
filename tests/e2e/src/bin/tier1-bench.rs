//! Tier-1 bench (issue 8), on a cluster with the chart installed and the toolchain image loaded:
//!
//! - escalation latency, from the worker's escalation decision to the first Tier-1 command done
//!   (the exec round trip of an escalating `git --version` through the worker API; the worker's own
//!   `provisionMs` is printed beside it), for a 100-file / 1 MiB workspace, with a cold tier (no
//!   pool: a pod is created per escalation) against a warm pool (a prepared pod is claimed), p50/p95
//!   over KH_BENCH_RUNS (default 20) each;
//! - handoff and merge throughput for 1,000 files / 10 MiB: every file is handed over, modified on
//!   Tier-1, and merged back at the end of the turn.
//!
//! `KH_BENCH_ONLY=warm` runs the warm-pool escalations only (no cold tier, no 10 MiB round), and
//! `KH_BENCH_TIER1_LOG` sets the warm tier's agents' log filter (`KUBE_HARNESS_LOG`, e.g.
//! `kube_harness_tier1=debug,info`: their bind and exec timings). The warm rows also split the
//! round trip by the worker's events: `provisionMs`, from the escalation event to
//! `command.started` (the start made durable in the session log), from there to
//! `command.completed` (the command on Tier-1), and the rest (the worker API, the port-forward,
//! classification, the answer).
//!
//!   cargo run --release -p kube-harness-e2e --bin tier1-bench

use kube::Client;
use kube_harness_client::SessionHandle;
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::stats::{env_usize, summary};
use kube_harness_e2e::tiers::{
    pool_in, pool_settles, session, toolchain_tier, with_tier, TOOLCHAIN,
};
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_protocol::WorkerClient;
use serde_json::Value;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(180);

/// Runs `script` (ending the turn) and returns the response's events' escalation record and the
/// split of the round trip ([`Split`]).
async fn escalate_once(worker: &WorkerClient, script: &str) -> (Duration, Value, Split) {
    let t = Instant::now();
    let r = worker.exec(&ExecRequest::new(script)).await.unwrap();
    let took = t.elapsed();
    assert_eq!((r.outcome.exit_code, r.outcome.tier), (0, 1), "{r:?}");
    let event = |kind: &str| {
        r.events
            .iter()
            .find(|e| e.kind == kind)
            .unwrap_or_else(|| panic!("no {kind} event in {:?}", r.events))
    };
    let escalated = event("harness.tier.escalated");
    let started = event("harness.runtime.command.started");
    let completed = event("harness.runtime.command.completed");
    let ms = Duration::from_millis;
    let provision = ms(escalated.data["provisionMs"].as_u64().unwrap_or(0));
    let gate = ms(started.at_ms.saturating_sub(escalated.at_ms));
    let command = ms(completed.at_ms.saturating_sub(started.at_ms));
    let split = Split {
        provision,
        gate,
        command,
        rest: took.saturating_sub(provision + gate + command),
    };
    worker.end_turn().await.unwrap();
    (took, escalated.data.clone(), split)
}

/// Where one escalating exec's round trip went, by the worker's own events.
#[derive(Default)]
struct Split {
    provision: Duration,
    gate: Duration,
    command: Duration,
    rest: Duration,
}

fn workspace_script(dir: &str, files: usize, bytes_each: usize) -> String {
    format!("mkdir -p /session/{dir} && for i in $(seq 1 {files}); do head -c {bytes_each} /dev/urandom > /session/{dir}/f$i; done")
}

#[tokio::main]
async fn main() {
    let runs = env_usize("KH_BENCH_RUNS", 20);
    let warm_only = std::env::var("KH_BENCH_ONLY").as_deref() == Ok("warm");
    let client = Client::try_default().await.unwrap();
    let mut warm = toolchain_tier("bench-warm");
    // The bench's workspace is 1 MiB: let prepared pods take it.
    warm.spec = serde_json::from_value({
        let mut v = serde_json::to_value(&warm.spec).unwrap();
        v["warmPool"]["maxWorkspaceBytes"] = (4u64 << 20).into();
        if let Ok(filter) = std::env::var("KH_BENCH_TIER1_LOG") {
            v["template"]["env"] =
                serde_json::json!([{"name": "KUBE_HARNESS_LOG", "value": filter}]);
        }
        v
    })
    .unwrap();
    let c2 = client.clone();
    with_tier(&client, toolchain_tier("bench-cold"), || async move {
        with_tier(&c2, warm, || async {
            with_namespace("t1bench", |client, ns| async move {
                pool_in(&client, "bench-warm", 2, &ns).await;
                let mut workers = Vec::new();
                for (name, tier) in [("cold", "bench-cold"), ("warm", "bench-warm")] {
                    session(&client, &ns, name, tier).await;
                    let h = SessionHandle::new(client.clone(), &ns, name);
                    let connected = h.connect(WAIT).await.unwrap();
                    let r = connected
                        .worker
                        .exec(&ExecRequest::new(workspace_script("ws", 100, 10 * 1024)))
                        .await
                        .unwrap();
                    assert_eq!((r.outcome.exit_code, r.outcome.tier), (0, 0), "{r:?}");
                    connected.worker.end_turn().await.unwrap();
                    workers.push(connected);
                }
                println!("== escalation latency, 100 files / 1 MiB workspace, {runs} runs each");
                let mut results = Vec::new();
                for (i, label) in ["cold (ordinary pod per escalation)", "warm pool (prepared pod)"].iter().enumerate() {
                    if warm_only && i == 0 {
                        continue;
                    }
                    let (mut total, mut splits) = (Vec::new(), Vec::new());
                    for _ in 0..runs {
                        if i == 1 {
                            pool_settles(&client, "bench-warm", 2, TOOLCHAIN).await;
                        }
                        let (took, escalated, split) = escalate_once(&workers[i].worker, "git --version").await;
                        let source = escalated["sandbox"]["source"].as_str().unwrap_or("?").to_string();
                        assert_eq!(source, if i == 0 { "ordinary" } else { "prepared" }, "{escalated}");
                        total.push(took);
                        splits.push(split);
                    }
                    let (p50, p95) = summary(&format!("{label}: exec round trip"), total);
                    let part = |f: fn(&Split) -> Duration| splits.iter().map(f).collect::<Vec<_>>();
                    summary(&format!("{label}: provisionMs"), part(|s| s.provision));
                    if i == 1 {
                        summary("  escalated -> command.started", part(|s| s.gate));
                        summary("  command.started -> completed", part(|s| s.command));
                        summary("  rest of the round trip", part(|s| s.rest));
                    }
                    results.push((p50, p95));
                }
                if warm_only {
                    return;
                }
                println!(
                    "ratio cold / warm: p50 {:.2}x, p95 {:.2}x",
                    results[0].0.as_secs_f64() / results[1].0.as_secs_f64(),
                    results[0].1.as_secs_f64() / results[1].1.as_secs_f64()
                );

                println!("\n== handoff and merge, 1,000 files / 10 MiB (cold tier)");
                let cold = &workers[0].worker;
                let r = cold.exec(&ExecRequest::new(workspace_script("big", 1000, 10 * 1024))).await.unwrap();
                assert_eq!(r.outcome.exit_code, 0, "{r:?}");
                cold.end_turn().await.unwrap();
                let script = "git --version >/dev/null && for f in /session/big/*; do echo x >> \"$f\"; done";
                let t = Instant::now();
                let r = cold.exec(&ExecRequest::new(script)).await.unwrap();
                let exec_took = t.elapsed();
                assert_eq!((r.outcome.exit_code, r.outcome.tier), (0, 1), "{r:?}");
                let t = Instant::now();
                let ended = cold.end_turn().await.unwrap().turn.unwrap();
                let merge_took = t.elapsed();
                let higher = &ended.usage["higherTier"];
                let over = higher["bytesHandedOver"].as_u64().unwrap_or(0) as f64;
                let back = higher["bytesReturned"].as_u64().unwrap_or(0) as f64;
                let changed = ended.file_changes.len();
                assert!(changed >= 1000, "{changed} files merged back");
                let mib = |b: f64| b / (1 << 20) as f64;
                println!("exec (provision + handoff + command): {:>8.1} ms, {:.1} MiB handed over", exec_took.as_secs_f64() * 1e3, mib(over));
                println!("  of which provisionMs (pod start + handoff): {}", higher["provisionMs"]);
                println!(
                    "end of turn (changes + merge + release): {:>8.1} ms, {:.1} MiB back, {changed} files, {:.1} MiB/s",
                    merge_took.as_secs_f64() * 1e3,
                    mib(back),
                    mib(back) / merge_took.as_secs_f64()
                );
            })
            .await;
        })
        .await;
    })
    .await;
}
