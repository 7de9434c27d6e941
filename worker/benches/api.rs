//! Exec round trip of `true` through the worker API (HTTP over loopback, bearer auth, JSON, the
//! session lock, the runtime, the Tier-0 sandbox) against the same command through the runtime
//! directly (a `Turn` over the same kind of sandbox), measured in the same run and interleaved so
//! machine load hits both alike: the API's own overhead. A third worker appends to a real
//! session log (the chart's default file store, fsync'd, over loopback HTTP), every event
//! awaited before the answer (issue 31): what recording a command costs, against the worker
//! without a log.
//!
//! Run: `cargo bench -p kube-harness-worker --bench api` (as root, or where user namespaces are
//! allowed). `-- --iterations N` changes the sample count (default 200).

use kube_harness_classify::ClassifyOptions;
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_runtime::{Collector, Emitter, Tier0Executor, Turn, TurnConfig, WorkspaceTracker};
use kube_harness_sandbox::{Presentation, SandboxConfig};
use kube_harness_session_log::server::{app, ServerConfig};
use kube_harness_session_log::{Store, StoreOptions};
use kube_harness_worker::api::{
    self, AuthConfig, SessionLogConfig, Worker, WorkerClient, WorkerConfig,
};
use kube_harness_workspace::WorkspaceSpec;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    for i in 0..20 {
        std::fs::write(root.join(format!("session/f{i}.txt")), "x\n").unwrap();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iterations: usize = std::env::args()
        .skip_while(|a| a != "--iterations")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);

    // The API: a real server on loopback, and another appending to a real session log.
    let api_dir = tempfile::tempdir().expect("temp dir");
    let (client, _served) = serve_worker(WorkerConfig::new("bench", api_dir.path())).await;
    let log_dir = tempfile::tempdir().expect("temp dir");
    let log_url = serve_log(&log_dir.path().join("log.ndjson")).await;
    let logged_dir = tempfile::tempdir().expect("temp dir");
    let mut logged_config = WorkerConfig::new("bench", logged_dir.path());
    logged_config.session_log = Some(SessionLogConfig {
        url: log_url,
        token: Some("bench-log-token".into()),
        run_scope: Some("bench:uid".into()),
    });
    let (logged, _logged_served) = serve_worker(logged_config).await;

    // The baseline: the runtime directly, over its own workspace of the same shape.
    let direct_dir = tempfile::tempdir().expect("temp dir");
    workspace(direct_dir.path());
    let spec = WorkspaceSpec::canonical(direct_dir.path(), Default::default(), vec![]);
    let tier0 = Tier0Executor::new(SandboxConfig::new(spec.clone(), Presentation::Namespace))
        .expect("the Tier-0 sandbox is available (run as root)");
    let turn = Turn::new(
        TurnConfig {
            workspace: spec.clone(),
            classify: ClassifyOptions::default(),
            inline_output_limit: 16 * 1024,
        },
        Emitter::new("bench", "turn", vec![Arc::new(Collector::default())]),
        Arc::new(tier0),
        None,
        Some(Arc::new(WorkspaceTracker::new(spec))),
        PathBuf::from("/session"),
        BTreeMap::new(),
    );

    let request = ExecRequest::new("true");
    for _ in 0..10 {
        assert_eq!(client.exec(&request).await.unwrap().outcome.exit_code, 0);
        assert_eq!(logged.exec(&request).await.unwrap().outcome.exit_code, 0);
        assert_eq!(turn.exec("true").await.exit_code, 0);
    }
    let mut over_http = Vec::with_capacity(iterations);
    let mut with_log = Vec::with_capacity(iterations);
    let mut direct = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let r = client.exec(&request).await.expect("exec over HTTP");
        over_http.push(start.elapsed());
        assert_eq!(r.outcome.exit_code, 0);
        let start = Instant::now();
        let r = logged
            .exec(&request)
            .await
            .expect("exec with a session log");
        with_log.push(start.elapsed());
        assert_eq!((r.outcome.exit_code, r.log_pending), (0, 0));
        let start = Instant::now();
        let o = turn.exec("true").await;
        direct.push(start.elapsed());
        assert_eq!(o.exit_code, 0);
    }
    let (h50, h95) = (
        percentile(&mut over_http, 0.5),
        percentile(&mut over_http, 0.95),
    );
    let (d50, d95) = (percentile(&mut direct, 0.5), percentile(&mut direct, 0.95));
    let (l50, l95) = (
        percentile(&mut with_log, 0.5),
        percentile(&mut with_log, 0.95),
    );
    println!("exec `true`, {iterations} iterations each, interleaved");
    println!(
        "  worker API over loopback HTTP: p50 {:>7.2} ms  p95 {:>7.2} ms",
        ms(h50),
        ms(h95)
    );
    println!(
        "  runtime directly (Turn::exec): p50 {:>7.2} ms  p95 {:>7.2} ms",
        ms(d50),
        ms(d95)
    );
    println!(
        "  ratio API/direct: p50 {:.2}x  p95 {:.2}x  (API overhead at p50: {:.2} ms)",
        ms(h50) / ms(d50),
        ms(h95) / ms(d95),
        ms(h50) - ms(d50)
    );
    println!(
        "  worker API + session log (every append awaited): p50 {:>7.2} ms  p95 {:>7.2} ms",
        ms(l50),
        ms(l95)
    );
    println!(
        "  ratio logged/unlogged API: p50 {:.2}x  p95 {:.2}x  (recording at p50: {:.2} ms)",
        ms(l50) / ms(h50),
        ms(l95) / ms(h95),
        ms(l50) - ms(h50)
    );
}

/// A worker over `config` (its workspace made) served on loopback until the process ends.
async fn serve_worker(
    config: WorkerConfig,
) -> (WorkerClient, tokio::task::JoinHandle<std::io::Result<()>>) {
    workspace(&config.workspace_root);
    let worker = Arc::new(Worker::new(config, None).expect("worker"));
    worker
        .readiness()
        .expect("the Tier-0 sandbox is available (run as root)");
    let listener = api::bind("127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(api::serve(
        listener,
        worker,
        AuthConfig::with_token("bench-token").unwrap(),
        std::future::pending::<()>(),
    ));
    (WorkerClient::new(&url, "bench-token").unwrap(), served)
}

/// A session log (file store at `path`, as the chart runs it) on loopback; its URL.
async fn serve_log(path: &Path) -> String {
    let spec = format!("file:{}", path.display());
    let store = Store::open(&spec.parse().unwrap(), StoreOptions::default())
        .await
        .expect("file store");
    let listener = kube_harness_service_kit::bind("127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = app(
        store,
        ServerConfig::new(AuthConfig::with_token("bench-log-token").unwrap()),
        prometheus_client::registry::Registry::default(),
    );
    tokio::spawn(kube_harness_service_kit::serve(
        listener,
        router,
        std::future::pending::<()>(),
    ));
    url
}
