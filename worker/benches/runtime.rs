//! Tier-0 command latency through the whole runtime (classification, the sandbox with namespaces,
//! landlock and seccomp, cwd/env carry-over, file tracking, events) against a bare `bash -c` spawn
//! measured in the same run, interleaved so machine load hits both alike. The bare spawn runs in
//! the session's folder, so `ls` lists the same 20 files in both.
//!
//! Run: `cargo bench -p kube-harness-worker --bench runtime` (as root, or where user namespaces are
//! allowed). `-- --iterations N` changes the sample count (default 200).

use kube_harness_classify::{ClassifyOptions, RuntimeToggles};
use kube_harness_runtime::{Collector, Emitter, Tier0Executor, Turn, TurnConfig, WorkspaceTracker};
use kube_harness_sandbox::{Presentation, SandboxConfig};
use kube_harness_worker::local::DataDir;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() as f64 - 1.0) * p) as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn bare(script: &str, dir: &std::path::Path) -> Duration {
    let start = Instant::now();
    let out = tokio::process::Command::new("bash")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .await
        .expect("bash runs");
    assert!(out.status.success());
    start.elapsed()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let iterations: usize = std::env::args()
        .skip_while(|a| a != "--iterations")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let tmp = tempfile::tempdir().expect("temp dir");
    let data = DataDir::open(tmp.path().join(".little-harness")).expect("data dir");
    let session = data.session("bench").expect("session");
    for i in 0..20 {
        std::fs::write(session.root.join(format!("session/f{i}.txt")), "x\n").unwrap();
    }
    let spec = session.workspace(RuntimeToggles::default(), vec![]);
    let tier0 = Tier0Executor::new(SandboxConfig::new(spec.clone(), Presentation::Namespace))
        .expect("the Tier-0 sandbox is available (run as root)");
    let turn = Turn::new(
        TurnConfig {
            workspace: spec.clone(),
            classify: ClassifyOptions::default(),
            inline_output_limit: 16 * 1024,
        },
        Emitter::new("bench", "t1", vec![Arc::new(Collector::default())]),
        Arc::new(tier0),
        None,
        Some(Arc::new(WorkspaceTracker::new(spec))),
        PathBuf::from("/session"),
        BTreeMap::new(),
    );
    println!(
        "{iterations} iterations each, interleaved; wall-clock latency per command; load average {}",
        loadavg()
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9}",
        "", "p50 ms", "p95 ms", "mean ms"
    );
    let dir = session.root.join("session");
    for script in ["true", "ls | wc -l"] {
        for _ in 0..10 {
            bare(script, &dir).await;
            turn.exec(script).await;
        }
        let (mut b, mut r) = (Vec::new(), Vec::new());
        for _ in 0..iterations {
            b.push(bare(script, &dir).await);
            let start = Instant::now();
            let out = turn.exec(script).await;
            r.push(start.elapsed());
            assert_eq!(out.exit_code, 0, "{}", out.stderr);
        }
        let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
        let (bm, rm) = (mean(&b), mean(&r));
        let (b50, b95) = (percentile(&mut b, 0.5), percentile(&mut b, 0.95));
        let (r50, r95) = (percentile(&mut r, 0.5), percentile(&mut r, 0.95));
        println!(
            "{:<34} {:>9.2} {:>9.2} {:>9.2}",
            format!("bare bash -c '{script}'"),
            ms(b50),
            ms(b95),
            ms(bm)
        );
        println!(
            "{:<34} {:>9.2} {:>9.2} {:>9.2}",
            format!("runtime, Tier-0 '{script}'"),
            ms(r50),
            ms(r95),
            ms(rm)
        );
        let over = ms(r50) - ms(b50);
        println!(
            "{:<34} {:>9.2} ms p50 above the bare spawn (ratio {:.2}x); goal <= 0.5 ms: {}",
            "overhead",
            over,
            ms(r50) / ms(b50),
            if over <= 0.5 { "met" } else { "MISSED" }
        );
    }
    println!("load average at the end {}", loadavg());
}

/// The 1/5/15-minute load averages: the machine is shared, so every figure is reported with it.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
