//! Append throughput and latency of the session log, against the physical limit of the disk.
//!
//! Measures, in one run on the same disk: a raw `write + fdatasync` loop (the floor for one
//! durable append), the file store with sync through HTTP on loopback (what users see) and
//! directly (no HTTP), and the PostgreSQL store through HTTP, at 1, 16 and 64 concurrent clients.
//! Then prints the ratios the session log is held to: file@64 / file@1 throughput >= 20 (group
//! commit) and file@1 p50 latency / raw fdatasync p50 <= 1.5.
//!
//! Run: `cargo bench -p kube-harness-session-log --bench append`
//! Env: KH_BENCH_DIR (directory on the disk to measure; default: a temp dir under
//! CARGO_TARGET_DIR or /tmp), KH_BENCH_SECONDS (per point, default 3), KH_TEST_POSTGRES_URL
//! (PostgreSQL; skipped with a loud line when unset).

/// The same allocator as the `kube-harness` binary that serves the log.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use kube_harness_service_kit::{bind, serve, AuthConfig};
use kube_harness_session_log::client::NewEvent;
use kube_harness_session_log::model::{EventInput, PreparedEvent, DEFAULT_MAX_PAYLOAD_BYTES};
use kube_harness_session_log::server::{app, ServerConfig};
use kube_harness_session_log::store::{FileStore, FileStoreOptions, RealFs};
use kube_harness_session_log::{ClientOptions, RunId, SessionLogClient, Store, StoreOptions};
use prometheus_client::registry::Registry;
use serde_json::json;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONCURRENCY: [usize; 3] = [1, 16, 64];
const ROUNDS: usize = 3;

struct Point {
    label: String,
    clients: usize,
    ops_per_sec: f64,
    p50: Duration,
    p99: Duration,
}

/// CPU time (user + system) of this whole process so far: client, server and store together.
fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct we pass; no other memory is touched.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn summarize(
    label: &str,
    clients: usize,
    mut lat: Vec<Duration>,
    elapsed: Duration,
    cpu: Duration,
) -> Point {
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let point = Point {
        label: label.to_string(),
        clients,
        ops_per_sec: lat.len() as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
    };
    println!(
        "{:<38} {:>4} clients {:>10.0} appends/s   p50 {:>9.3} ms   p99 {:>9.3} ms   cpu {:>6.0} us/append",
        point.label,
        point.clients,
        point.ops_per_sec,
        point.p50.as_secs_f64() * 1e3,
        point.p99.as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e6 / lat.len().max(1) as f64
    );
    point
}

fn payload() -> serde_json::Map<String, serde_json::Value> {
    match json!({"stepKey": "step-1", "command": "ls -la /session", "exitCode": 0, "stdout": "x".repeat(200)})
    {
        serde_json::Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// The floor: one record written and fdatasync'ed at a time, no framing, no HTTP.
fn raw_fdatasync(dir: &std::path::Path, seconds: Duration) -> Point {
    let path = dir.join("raw-fdatasync.bin");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let record = vec![b'x'; 400];
    let mut lat = Vec::new();
    let cpu0 = process_cpu();
    let start = Instant::now();
    while start.elapsed() < seconds {
        let t = Instant::now();
        file.write_all(&record).unwrap();
        file.sync_data().unwrap();
        lat.push(t.elapsed());
    }
    let point = summarize(
        "raw write+fdatasync (same disk)",
        1,
        lat,
        start.elapsed(),
        process_cpu() - cpu0,
    );
    let _ = std::fs::remove_file(path);
    point
}

async fn drive<F, Fut>(label: &str, clients: usize, seconds: Duration, op: F) -> Point
where
    F: Fn(usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    // Warm up connections and caches.
    let warm = Instant::now() + Duration::from_millis(300);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while Instant::now() < warm {
                op(c, 1_000_000 + n).await;
                n += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let cpu0 = process_cpu();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (op, stop) = (op.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                op(c, n).await;
                lat.push(t.elapsed());
                n += 1;
            }
            lat
        }));
    }
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    summarize(label, clients, all, start.elapsed(), process_cpu() - cpu0)
}

async fn http_server(store: Store) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = app(
        store,
        ServerConfig::new(AuthConfig::with_token("bench").unwrap()),
        Registry::default(),
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, router, async {
        let _ = rx.await;
    }));
    (format!("http://{addr}"), tx)
}

async fn http_points(
    label: &str,
    client: &SessionLogClient,
    concurrency: &[usize],
    seconds: Duration,
    tag: &str,
) -> Vec<Point> {
    let mut points = Vec::new();
    for &clients in concurrency {
        let client = client.clone();
        let tag = format!("{tag}-c{clients}");
        points.push(
            drive(label, clients, seconds, move |c, n| {
                let client = client.clone();
                let run = format!("{tag}-run{c}");
                async move {
                    let e = NewEvent::with_key(
                        format!("k{n}"),
                        "harness.runtime.command.completed",
                        payload(),
                    );
                    client.append(&run, &e).await.expect("append failed");
                }
            })
            .await,
        );
    }
    points
}

/// The floor of any request: `GET /healthz` on the same server (no body, no store), at `clients`.
/// If this alone cannot reach 20 times file@1, no store can over HTTP on this machine.
async fn http_floor(base: &str, clients: usize, seconds: Duration) -> Point {
    let http = reqwest::Client::new();
    let url = format!("{base}/healthz");
    drive(
        "HTTP floor: GET /healthz, no store",
        clients,
        seconds,
        move |_, _| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let r = http.get(&url).send().await.expect("healthz");
                assert!(r.status().is_success());
                r.bytes().await.expect("healthz body");
            }
        },
    )
    .await
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn direct_points(label: &str, store: Store, seconds: Duration) -> Vec<Point> {
    let mut points = Vec::new();
    for clients in CONCURRENCY {
        let store = store.clone();
        points.push(
            drive(label, clients, seconds, move |c, n| {
                let store = store.clone();
                async move {
                    let run = RunId::parse(&format!("direct-c{clients}-run{c}")).unwrap();
                    let input = EventInput {
                        append_idempotency_key: format!("k{n}"),
                        occurrence_id: None,
                        event_type: "harness.runtime.command.completed".into(),
                        payload: serde_json::Value::Object(payload()),
                    };
                    let e = PreparedEvent::new(input, DEFAULT_MAX_PAYLOAD_BYTES).unwrap();
                    store.append(&run, e).await.expect("append failed");
                }
            })
            .await,
        );
    }
    points
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` does not: there, a short smoke run.
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let default_seconds = if bench_mode { 3.0 } else { 0.2 };
    let seconds = Duration::from_secs_f64(
        std::env::var("KH_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default_seconds),
    );
    let base = std::env::var("KH_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::env::var("CARGO_TARGET_DIR")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|_| std::env::temp_dir())
        });
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "session log append bench: {:.1} s per point, data in {}",
        seconds.as_secs_f64(),
        dir.path().display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let _raw = tokio::task::spawn_blocking({
            let d = dir.path().to_path_buf();
            move || raw_fdatasync(&d, seconds)
        })
        .await
        .unwrap();

        let (file_url, _file_stop) = {
            let store = FileStore::open(dir.path().join("http.ndjson"), FileStoreOptions::default(), Arc::new(RealFs)).await.unwrap();
            http_server(Store::File(Arc::new(store))).await
        };
        let file_client = SessionLogClient::new(file_url.clone(), Some("bench".into()), ClientOptions::default()).unwrap();
        http_points("file store, sync, HTTP loopback", &file_client, &CONCURRENCY, seconds, "file").await;
        {
            let store = FileStore::open(dir.path().join("direct.ndjson"), FileStoreOptions::default(), Arc::new(RealFs)).await.unwrap();
            direct_points("file store, sync, direct (no HTTP)", Store::File(Arc::new(store)), seconds).await;
        }
        match std::env::var("KH_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => {
                let db = kube_harness_service_kit::testing::fresh_database("bench").await.unwrap();
                let spec = format!("postgres:{}", db.url).parse().unwrap();
                let store = Store::open(&spec, StoreOptions::default()).await.unwrap();
                let (url, stop) = http_server(store).await;
                let client = SessionLogClient::new(url, Some("bench".into()), ClientOptions::default()).unwrap();
                http_points("postgres store, HTTP loopback", &client, &CONCURRENCY, seconds, "pg").await;
                let _ = stop.send(());
                db.drop_database().await;
            }
            _ => println!("!!! SKIPPED PostgreSQL points: KH_TEST_POSTGRES_URL is unset (run `bash tests/services/postgres.sh start` and export the line it prints) !!!"),
        }
        // The disk's fsync latency drifts (other I/O on the machine), so the ratios compare points
        // measured back to back: rounds of raw, file@1, file@64; the median round ratio is reported.
        println!();
        println!("ratios: {ROUNDS} interleaved rounds of raw / file@1 / file@64 (HTTP), {:.1} s each", seconds.as_secs_f64() / 2.0);
        let mut scales = Vec::new();
        let mut latencies = Vec::new();
        let (mut floor_scales, mut floor_latencies) = (Vec::new(), Vec::new());
        let (mut raw_p50s, mut floor_rates) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let half = seconds / 2;
            let d = dir.path().to_path_buf();
            let raw = tokio::task::spawn_blocking(move || raw_fdatasync(&d, half)).await.unwrap();
            let tag = format!("round{round}");
            let file = http_points("file store, sync, HTTP loopback", &file_client, &[1, 64], half, &tag).await;
            scales.push(file[1].ops_per_sec / file[0].ops_per_sec);
            latencies.push(file[0].p50.as_secs_f64() / raw.p50.as_secs_f64());
            let floor1 = http_floor(&file_url, 1, half).await;
            let floor64 = http_floor(&file_url, 64, half).await;
            floor_scales.push(floor64.ops_per_sec / file[0].ops_per_sec);
            raw_p50s.push(raw.p50.as_secs_f64());
            floor_rates.push(floor64.ops_per_sec);
            floor_latencies.push((floor1.p50 + raw.p50).as_secs_f64() / raw.p50.as_secs_f64());
        }
        let scale = median(scales);
        let latency = median(latencies);
        println!();
        println!(
            "group commit: file@64 / file@1 throughput = {scale:.1}x (goal >= 20x) {}",
            if scale >= 20.0 { "MET" } else { "NOT MET" }
        );
        println!(
            "latency: file@1 p50 / raw fdatasync p50 = {latency:.2} (goal <= 1.5) {}",
            if latency <= 1.5 { "MET" } else { "NOT MET" }
        );
        // Both goals at once: file@1 within 1.5 raw fdatasyncs means at least 1 / (1.5 x raw p50)
        // appends/s from one client, so file@64 would need 20 times that. Compare with what bare
        // HTTP does here with no store at all.
        let joint_need = median(raw_p50s).recip() / 1.5 * 20.0;
        let floor64 = median(floor_rates);
        println!(
            "ceilings of this machine: /healthz@64 / file@1 = {:.1}x (the most any store could scale over HTTP); (/healthz@1 p50 + raw fdatasync p50) / raw fdatasync p50 = {:.2} (the best latency ratio over HTTP)",
            median(floor_scales),
            median(floor_latencies)
        );
        println!(
            "both goals at once need >= {joint_need:.0} appends/s at 64 clients (20 x 1 / (1.5 x raw p50)); bare HTTP here does {floor64:.0} requests/s with no store: {}",
            if floor64 >= joint_need { "attainable on this machine" } else { "NOT attainable on this machine (faster fdatasync than HTTP can keep up with)" }
        );
    });
}
