//! Handoff and merge through a real Tier-1 agent over loopback HTTP, for a 1,000-file / 10 MiB
//! workspace, against local `pack` + `unpack` (and local `changes_since` + `apply`) of the same
//! tree measured in the same run.
//!
//! The worker side is the real `PodTier1`; the operator's tier API is a minimal stand-in that
//! starts an in-process agent (the real agent code and HTTP server) per sandbox and answers
//! Ready at once, so the figures are the handoff and the merge, not pod scheduling.
//!
//! Run: `cargo bench -p kube-harness-worker --bench tier1_handoff` (`KH_BENCH_DIR=/dev/shm`
//! keeps disk writeback out of the figures).

use axum::extract::State;
use axum::routing::{delete, post};
use axum::{Json, Router};
use kube_harness_classify::RuntimeToggles;
use kube_harness_runtime::NextTier;
use kube_harness_service_kit::AuthConfig;
use kube_harness_tier1::{agent_http, Agent, AgentConfig, PodTier1, PodTier1Config};
use kube_harness_workspace::{
    apply, changes_since, pack, rehome, snapshot, unpack, ApplyOptions, PackOptions, UnpackOptions,
    WorkspaceSpec,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FILES: usize = 1000;
const TOTAL: usize = 10 << 20;
const ROUNDS: usize = 7;
const TOKEN: &str = "bench-token";

fn build(root: &Path) -> WorkspaceSpec {
    for m in ["session", "artifacts", "persistent"] {
        std::fs::create_dir_all(root.join(m)).unwrap();
    }
    let size = TOTAL / FILES;
    for i in 0..FILES {
        let dir = root.join("session").join(format!("dir{:02}", i % 20));
        std::fs::create_dir_all(&dir).unwrap();
        let content: Vec<u8> = (0..size).map(|j| (i * 31 + j * 7) as u8).collect();
        std::fs::write(dir.join(format!("file{i:04}.dat")), content).unwrap();
    }
    let mut spec = WorkspaceSpec::canonical(root, RuntimeToggles::default(), Vec::new());
    spec.mounts.retain(|m| m.tracked);
    spec
}

/// Rewrites every file (the whole 10 MiB comes back in the merge).
fn change_all(session: &Path) {
    for i in 0..FILES {
        let p = session.join(format!("dir{:02}/file{i:04}.dat", i % 20));
        std::fs::write(p, vec![(i % 251) as u8; TOTAL / FILES]).unwrap();
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn row(name: &str, ours: Duration, base: Duration, base_name: &str) {
    println!(
        "{name:<38} {:>8.2} ms ({:>6.1} MiB/s)   {base_name:<28} {:>8.2} ms   ratio {:>5.2}x",
        ms(ours),
        (TOTAL as f64 / (1 << 20) as f64) / ours.as_secs_f64(),
        ms(base),
        ms(ours) / ms(base)
    );
}

/// The stand-in operator: each open starts an agent over a fresh root and answers Ready.
struct Stand {
    scratch: PathBuf,
    agents: Mutex<Vec<(String, PathBuf)>>,
}

async fn open(State(s): State<Arc<Stand>>, Json(body): Json<Value>) -> Json<Value> {
    let turn = body["turn"].as_str().unwrap().to_string();
    let root = s.scratch.join(&turn);
    std::fs::create_dir_all(&root).unwrap();
    let agent = Arc::new(Agent::new(AgentConfig::new(&root)).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(agent_http::serve(
        listener,
        agent,
        AuthConfig::with_token(TOKEN).unwrap(),
        std::future::pending(),
    ));
    s.agents.lock().unwrap().push((turn.clone(), root));
    Json(
        json!({"turn": turn, "pod": "t1-bench", "phase": "Ready", "endpoint": url,
                "token": TOKEN, "source": "ordinary"}),
    )
}

#[tokio::main]
async fn main() {
    let scratch = match std::env::var_os("KH_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    println!("scratch: {}", scratch.path().display());
    let source = scratch.path().join("source");
    let source_spec = build(&source);
    let opts = UnpackOptions::for_spec(&source_spec);

    let stand = Arc::new(Stand {
        scratch: scratch.path().join("agents"),
        agents: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/namespaces/{ns}/sessions/{s}/sandboxes", post(open))
        .route(
            "/v1/namespaces/{ns}/sessions/{s}/sandboxes/{turn}",
            delete(|| async { axum::http::StatusCode::NO_CONTENT }),
        )
        .with_state(stand.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let tier = PodTier1::new(PodTier1Config::new(&url, "ns", "s", TOKEN)).unwrap();

    let mut handoff = Vec::new();
    let mut merge = Vec::new();
    let mut local_handoff = Vec::new();
    let mut local_merge = Vec::new();
    for round in 0..=ROUNDS {
        // Each round's worker is a fresh copy of the source (untimed).
        let worker_root = scratch.path().join(format!("worker{round}"));
        let mut archive = Vec::new();
        pack(&source_spec, &PackOptions::default(), &mut archive).unwrap();
        unpack(archive.as_slice(), &worker_root, &opts).unwrap();
        let spec = rehome(&source_spec, &worker_root);

        // Through the agent: provision = pack + open + PUT + bind + verify.
        let t = Instant::now();
        let shell = tier.provision(&spec).await.unwrap();
        let t_handoff = t.elapsed();
        let agent_root = stand.agents.lock().unwrap().last().unwrap().1.clone();
        change_all(&agent_root.join("session"));
        let t = Instant::now();
        let report = shell.dispose().await.unwrap();
        let t_merge = t.elapsed();
        assert_eq!(report.file_changes.len(), FILES, "{:?}", report.problems);
        assert!(report.problems.is_empty(), "{:?}", report.problems);

        // Locally: pack + unpack, then changes_since + apply, on the same sizes.
        let t = Instant::now();
        let mut archive = Vec::new();
        // From the untouched source: the worker copy already holds the agent's merge.
        let packed = pack(&source_spec, &PackOptions::default(), &mut archive).unwrap();
        let local_root = scratch.path().join(format!("local{round}"));
        let unpacked = unpack(archive.as_slice(), &local_root, &opts).unwrap();
        let t_local_handoff = t.elapsed();
        let local_spec = rehome(&source_spec, &local_root);
        std::thread::sleep(Duration::from_millis(30));
        let local_base = snapshot(&local_spec).unwrap();
        let _ = unpacked;
        change_all(&local_root.join("session"));
        let t = Instant::now();
        let mut changes = Vec::new();
        changes_since(
            &local_spec,
            &local_base,
            &PackOptions::default(),
            &mut changes,
        )
        .unwrap();
        // Applied onto a second fresh copy of the source, as the worker's tree.
        let t_changes = t.elapsed();
        let target_root = scratch.path().join(format!("target{round}"));
        unpack(archive.as_slice(), &target_root, &opts).unwrap();
        let target_spec = rehome(&source_spec, &target_root);
        let t = Instant::now();
        let applied = apply(
            &target_spec,
            changes.as_slice(),
            &packed.snapshot,
            &ApplyOptions::default(),
        )
        .unwrap();
        let t_local_merge = t_changes + t.elapsed();
        assert_eq!(applied.applied.len(), FILES);

        for dir in [worker_root, local_root, target_root, agent_root] {
            let _ = std::fs::remove_dir_all(dir);
        }
        if round > 0 {
            handoff.push(t_handoff);
            merge.push(t_merge);
            local_handoff.push(t_local_handoff);
            local_merge.push(t_local_merge);
        }
    }
    println!(
        "{FILES} files / {} MiB, median of {ROUNDS} rounds",
        TOTAL >> 20
    );
    let (h, m, lh, lm) = (
        median(handoff),
        median(merge),
        median(local_handoff),
        median(local_merge),
    );
    row(
        "handoff through the agent (PodTier1)",
        h,
        lh,
        "local pack+unpack",
    );
    row(
        "merge through the agent (PodTier1)",
        m,
        lm,
        "local changes+apply",
    );
    row("handoff + merge", h + m, lh + lm, "local, both");
}
