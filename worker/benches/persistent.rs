//! What Persistent Dirs cost a turn: one-command turns (`exec` of `true`, then end-turn) through
//! the worker API on loopback, for a worker without Persistent Dirs (the baseline) and one with an
//! `after-turn` dir of 200 files of 4 KiB (0.8 MiB; `KH_BENCH_FILES=N` for N files), whose every turn loads the source, builds
//! its own Tier-0 sandbox and commits back. Both servers run in the same process and the turns
//! are interleaved, so machine load hits both alike; the ratio is what to read.
//!
//! Run: `cargo bench -p kube-harness-worker --bench persistent` (as root, or where user
//! namespaces are allowed). `-- --iterations N` changes the sample count (default 60).

use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_worker::api::{self, AuthConfig, Worker, WorkerClient, WorkerConfig};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Files in the dir (`KH_BENCH_FILES` changes it).
fn files() -> usize {
    std::env::var("KH_BENCH_FILES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() as f64 - 1.0) * p) as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn workspace(root: &Path) {
    for dir in ["session", "artifacts", "persistent", ".agents"] {
        std::fs::create_dir_all(root.join(dir)).expect("workspace dir");
    }
}

async fn serve(config: WorkerConfig) -> (WorkerClient, tokio::sync::oneshot::Sender<()>) {
    let worker = Arc::new(Worker::new(config, None).expect("worker"));
    worker
        .readiness()
        .expect("the Tier-0 sandbox is available (run as root)");
    let listener = api::bind("127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(api::serve(
        listener,
        worker,
        AuthConfig::with_token("bench-token").unwrap(),
        async {
            let _ = stopped.await;
        },
    ));
    (WorkerClient::new(&url, "bench-token").unwrap(), stop)
}

async fn one_turn(client: &WorkerClient, script: &str) -> Duration {
    let started = Instant::now();
    let r = client.exec(&ExecRequest::new(script)).await.expect("exec");
    assert_eq!(r.outcome.exit_code, 0);
    let ended = client.end_turn().await.expect("end turn");
    let turn = ended.turn.expect("a turn");
    assert!(
        turn.persistent.iter().all(|p| p.message.is_none()),
        "{:?}",
        turn.persistent
    );
    started.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iterations: usize = std::env::args()
        .skip_while(|a| a != "--iterations")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);

    let plain_dir = tempfile::tempdir().expect("temp dir");
    workspace(plain_dir.path());
    let (plain, _stop_plain) = serve(WorkerConfig::new("plain", plain_dir.path())).await;

    let dirs_dir = tempfile::tempdir().expect("temp dir");
    workspace(dirs_dir.path());
    let sources = dirs_dir.path().join("sources");
    let source = sources.join("notes/notes");
    std::fs::create_dir_all(&source).unwrap();
    let files = files();
    for i in 0..files {
        std::fs::write(source.join(format!("n{i}.md")), vec![b'x'; 4096]).unwrap();
    }
    let mut config = WorkerConfig::new("dirs", dirs_dir.path());
    config.sources_root = sources;
    config.manual_root = dirs_dir.path().join("manual-commits");
    config.persistent_dirs = vec!["notes:after-turn".parse().unwrap()];
    let (with_dirs, _stop_dirs) = serve(config).await;

    // A turn that reads (the dir is current: nothing loaded or committed) and one that changes
    // one file (loaded again only if another session committed; committed whole at the end).
    let read = "true";
    let (write_plain, write_dir) = (
        "echo $RANDOM$RANDOM$RANDOM > /session/n0.md",
        "echo $RANDOM$RANDOM$RANDOM > /persistent/notes/n0.md",
    );
    for _ in 0..5 {
        one_turn(&plain, write_plain).await;
        one_turn(&with_dirs, write_dir).await;
    }
    // What the write turn does with the dir (printed, so the figures can be read).
    with_dirs
        .exec(&ExecRequest::new(write_dir))
        .await
        .expect("exec");
    let shown = with_dirs.end_turn().await.expect("end").turn.expect("turn");
    let fate: Vec<_> = shown
        .persistent
        .iter()
        .map(|p| format!("{} {:?}", p.dir, p.outcome))
        .collect();
    println!("a write turn's Persistent Dirs: {fate:?}");
    let mut samples = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..iterations {
        samples[0].push(one_turn(&plain, read).await);
        samples[1].push(one_turn(&with_dirs, read).await);
        samples[2].push(one_turn(&plain, write_plain).await);
        samples[3].push(one_turn(&with_dirs, write_dir).await);
    }
    println!("one-command turns (exec + end-turn) through the worker API, {iterations} each, interleaved");
    let mut p50 = [0.0; 4];
    let labels = [
        "read, no Persistent Dirs".to_string(),
        format!("read, after-turn dir of {files} files"),
        "write one file, no Persistent Dirs".to_string(),
        format!("write one file, after-turn dir of {files} files"),
    ];
    for (i, s) in samples.iter_mut().enumerate() {
        p50[i] = ms(percentile(s, 0.5));
        println!(
            "  {:<44} p50 {:8.2} ms  p95 {:8.2} ms",
            labels[i],
            p50[i],
            ms(percentile(s, 0.95))
        );
    }
    println!(
        "  ratio, read turn (with / without):   {:6.2}x",
        p50[1] / p50[0]
    );
    println!(
        "  ratio, write turn (with / without):  {:6.2}x",
        p50[3] / p50[2]
    );
}
