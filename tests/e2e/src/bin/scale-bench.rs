//! Scale bench (issue 16): N HarnessSessions whose worker pods land on kwok's fake nodes, against
//! N bare pods on the same nodes in the same run (the baseline). Measures the time from the last
//! create until all are Ready, API requests per object (the API server's
//! `apiserver_request_total`, by verb and resource, all clients), the operator's CPU and peak RSS
//! (/proc of its process on this host), reconcile latency p50/p99 and the error rate (the
//! operator's /metrics), a quiet spell after everything is Ready (what idle sessions cost), and the
//! time from deleting everything until every child object is gone.
//!
//!   tests/cluster/kwok.sh build && tests/cluster/kwok.sh start
//!   flock /tmp/kh-cluster-bench.lock cargo run --release -p kube-harness-e2e --bin scale-bench
//!
//! Env: KH_SCALE_SESSIONS (2000), KH_SCALE_CONCURRENCY (creates in flight, 32), KH_SCALE_BARE (1:
//! run the bare-pod baseline), KH_SCALE_STEADY_SECS (30), KH_SCALE_TIMEOUT_SECS (each wait, 300;
//! a Ready wait that runs out is reported, and the run goes on to the delete).
//! The operator is the chart's pod (KH_RELEASE_NAMESPACE); for one run as a host process set
//! KH_SCALE_OPERATOR_PID and KH_SCALE_OPERATOR_METRICS (its /metrics URL).

use futures::FutureExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::procstat::{self, ProcSample};
use kube_harness_e2e::promtext::{self, Sample};
use kube_harness_e2e::scale::{self, FirstSeen};
use kube_harness_e2e::stats::env_usize;
use kube_harness_e2e::wait::{self, Check};
use kube_harness_e2e::{harness, E2eError, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let cfg = Config {
        n: env_usize("KH_SCALE_SESSIONS", 2000),
        concurrency: env_usize("KH_SCALE_CONCURRENCY", 32),
        bare: env_usize("KH_SCALE_BARE", 1) != 0,
        steady: Duration::from_secs(env_usize("KH_SCALE_STEADY_SECS", 30) as u64),
        timeout: Duration::from_secs(env_usize("KH_SCALE_TIMEOUT_SECS", 300) as u64),
    };
    with_namespace("scale", |client, ns| async move {
        let run = ns.clone();
        let outcome = std::panic::AssertUnwindSafe(bench(&client, &ns, &run, &cfg))
            .catch_unwind()
            .await;
        // Sessions first (their finalizers need the operator), then the run's cluster objects.
        let sessions: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
        if let Err(e) = scale::delete_all(&sessions, &ListParams::default(), 32).await {
            eprintln!("warning: deleting the sessions: {e}");
        }
        if let Err(e) = wait_gone(&client, &ns, cfg.timeout).await {
            eprintln!("warning: {e}");
        }
        scale::delete_run_objects(&client, &run).await;
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("scale bench failed: {e}"),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
    .await;
}

struct Config {
    n: usize,
    concurrency: usize,
    bare: bool,
    steady: Duration,
    timeout: Duration,
}

async fn bench(client: &Client, ns: &str, run: &str, cfg: &Config) -> Result<()> {
    let nodes = scale::fake_nodes(client).await?;
    let op = Operator::find(client).await?;
    // Another replica (or someone's host process) holding the Lease would do the work unseen.
    let leader = promtext::sum(&op.metrics().await?, "kube_harness_leader", &[]);
    if leader != 1.0 {
        return Err(E2eError::Failed(format!(
            "the operator at {} does not hold the Lease (kube_harness_leader {leader}); see `kubectl -n {} get lease`",
            op.metrics,
            harness::release_namespace()
        )));
    }
    println!(
        "== scale: {} sessions on {} kwok nodes, {} creates in flight; operator pid {} ({}); load average {}",
        cfg.n,
        nodes.len(),
        cfg.concurrency,
        op.pid,
        op.metrics,
        procstat::load_average()
    );
    harness::restrict(client, ns).await?;
    let sampler = Sampler::start(op.pid);
    let mut rows: Vec<Row> = Vec::new();

    let bare = if cfg.bare {
        Some(bare_phase(client, ns, cfg).await?)
    } else {
        None
    };
    let sessions = session_phase(client, ns, run, cfg, &op, &sampler).await?;

    let ratio = |a: f64, b: Option<f64>| match b {
        Some(b) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    };
    let b = bare.as_ref();
    rows.push(Row::new(
        "create rate (objects/s)",
        b.map(|b| format!("{:.0}", b.rate)),
        format!("{:.0}", sessions.create.rate),
        ratio(sessions.create.rate, b.map(|b| b.rate)),
    ));
    rows.push(Row::new(
        "last create -> all Ready",
        b.map(|b| secs(b.ready)),
        if sessions.create.ready_count < cfg.n {
            format!(
                "> {} ({} of {} Ready)",
                secs(cfg.timeout),
                sessions.create.ready_count,
                cfg.n
            )
        } else {
            secs(sessions.create.ready)
        },
        ratio(
            sessions.create.ready.as_secs_f64(),
            b.map(|b| b.ready.as_secs_f64()),
        ),
    ));
    rows.push(Row::new(
        "  p50 / p99 of Ready (after the first create)",
        b.map(|b| format!("{} / {}", secs(b.ready_p50), secs(b.ready_p99))),
        format!(
            "{} / {}",
            secs(sessions.create.ready_p50),
            secs(sessions.create.ready_p99)
        ),
        "".into(),
    ));
    rows.push(Row::new(
        "API requests per object (create..Ready)",
        b.map(|b| format!("{:.1}", b.api_per_object)),
        format!("{:.1}", sessions.create.api_per_object),
        ratio(sessions.create.api_per_object, b.map(|b| b.api_per_object)),
    ));
    rows.push(Row::new(
        "delete -> every child gone",
        b.map(|b| secs(b.gone)),
        format!(
            "{}{} (deletes sent in {})",
            if sessions.gone_left.is_some() {
                "not all gone after "
            } else {
                ""
            },
            secs(sessions.gone),
            secs(sessions.issued)
        ),
        ratio(sessions.gone.as_secs_f64(), b.map(|b| b.gone.as_secs_f64())),
    ));
    rows.push(Row::new(
        "operator CPU, create..Ready",
        None,
        format!(
            "{:.1} s ({:.0}% of a core)",
            sessions.create.cpu,
            100.0 * sessions.create.cpu / sessions.create.wall.as_secs_f64()
        ),
        "".into(),
    ));
    rows.push(Row::new(
        "operator RSS peak (sampled / VmHWM)",
        None,
        format!("{} / {} MiB", mib(sessions.peak_rss), mib(sessions.vm_hwm)),
        "".into(),
    ));
    rows.push(Row::new(
        "reconciles (create..Ready), errors",
        None,
        format!(
            "{:.0}, {:.0} ({:.2}%)",
            sessions.create.reconciles,
            sessions.create.errors,
            100.0 * sessions.create.errors / sessions.create.reconciles.max(1.0)
        ),
        "".into(),
    ));
    rows.push(Row::new(
        "reconcile p50 / p99",
        None,
        format!(
            "{} / {}",
            ms(sessions.create.reconcile_p50),
            ms(sessions.create.reconcile_p99)
        ),
        "".into(),
    ));
    rows.push(Row::new(
        &format!(
            "all Ready, quiet {} s: API requests/s",
            cfg.steady.as_secs()
        ),
        None,
        format!("{:.1}", sessions.steady.api_per_sec),
        "".into(),
    ));
    rows.push(Row::new(
        "  reconciles/s, operator CPU",
        None,
        format!(
            "{:.1}/s, {:.0}% of a core",
            sessions.steady.reconciles_per_sec,
            100.0 * sessions.steady.cpu_share
        ),
        "".into(),
    ));
    rows.push(Row::new(
        "errors over the whole run",
        None,
        format!(
            "{:.0} of {:.0} reconciles ({:.2}%) {}",
            sessions.total_errors,
            sessions.total_reconciles,
            100.0 * sessions.total_errors / sessions.total_reconciles.max(1.0),
            sessions.error_causes
        ),
        "".into(),
    ));
    if sessions.restarts > 0 {
        rows.push(Row::new(
            "OPERATOR RESTARTED during the run",
            None,
            format!("{} time(s): {}", sessions.restarts, sessions.last_state),
            "".into(),
        ));
    }

    println!(
        "\n== {} objects, {} kwok nodes, load average now {}",
        cfg.n,
        nodes.len(),
        procstat::load_average()
    );
    println!(
        "{:<46} {:>18} {:>30} {:>8}",
        "", "bare pods", "HarnessSessions", "ratio"
    );
    for r in &rows {
        println!(
            "{:<46} {:>18} {:>30} {:>8}",
            r.what,
            r.bare.as_deref().unwrap_or(""),
            r.sessions,
            r.ratio
        );
    }
    println!("\nAPI requests per session, create..Ready, by verb and resource (all clients):");
    for ((verb, resource), per) in &sessions.create.by_verb {
        println!("  {verb:<8} {resource:<48} {per:>7.2}");
    }
    if let Some(b) = &bare {
        println!("\nAPI requests per bare pod, create..Ready:");
        for ((verb, resource), per) in &b.by_verb {
            println!("  {verb:<8} {resource:<48} {per:>7.2}");
        }
    }
    println!(
        "\nAPI requests/s while all sessions sat Ready ({} s):",
        cfg.steady.as_secs()
    );
    for ((verb, resource), per) in &sessions.steady.by_verb {
        println!("  {verb:<8} {resource:<48} {per:>7.2}");
    }
    Ok(())
}

struct Row {
    what: String,
    bare: Option<String>,
    sessions: String,
    ratio: String,
}

impl Row {
    fn new(what: &str, bare: Option<String>, sessions: String, ratio: String) -> Self {
        Row {
            what: what.into(),
            bare,
            sessions,
            ratio,
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn ms(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{:.1} ms", s * 1e3))
}

fn mib(b: u64) -> String {
    format!("{:.0}", b as f64 / (1024.0 * 1024.0))
}

/// What the bare-pod baseline measured.
struct BarePhase {
    rate: f64,
    ready: Duration,
    ready_p50: Duration,
    ready_p99: Duration,
    api_per_object: f64,
    by_verb: Vec<VerbRow>,
    gone: Duration,
}

async fn bare_phase(client: &Client, ns: &str, cfg: &Config) -> Result<BarePhase> {
    println!("-- baseline: {} bare pods", cfg.n);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let label = "kubeharness.dev/scale-bare=true";
    let seen = FirstSeen::start(
        pods.clone(),
        watcher::Config::default().labels(label),
        scale::pod_ready,
    );
    let api0 = api_requests(client).await?;
    let start = Instant::now();
    scale::bounded(cfg.n, cfg.concurrency, |i| {
        let pods = pods.clone();
        async move { scale::create_retrying(&pods, &scale::bare_pod(&format!("bare-{i}"))).await }
    })
    .await?;
    let created = start.elapsed();
    let last = Instant::now();
    seen.wait_for(cfg.n, "bare pods Ready", cfg.timeout).await?;
    let times = seen.times();
    let ready = times
        .last()
        .map_or(Duration::ZERO, |t| t.saturating_duration_since(last));
    let api1 = api_requests(client).await?;
    let (total, by_verb) = per_object(&api0, &api1, cfg.n as f64);
    drop(seen);
    let t = Instant::now();
    scale::delete_all(&pods, &ListParams::default().labels(label), cfg.concurrency).await?;
    wait::until("bare pods gone", cfg.timeout, || async {
        let left = scale::count::<Pod>(client, ns, &ListParams::default().labels(label)).await?;
        Ok(if left == 0 {
            Check::Done(())
        } else {
            Check::Pending(format!("{left} pods"))
        })
    })
    .await?;
    let gone = t.elapsed();
    println!(
        "   created in {}, all Ready {} after the last create, gone {} after the delete",
        secs(created),
        secs(ready),
        secs(gone)
    );
    Ok(BarePhase {
        rate: cfg.n as f64 / created.as_secs_f64(),
        ready,
        ready_p50: quantile_after(&times, start, 0.5),
        ready_p99: quantile_after(&times, start, 0.99),
        api_per_object: total,
        by_verb,
        gone,
    })
}

/// The `q` quantile of the times after `start`.
fn quantile_after(times: &[Instant], start: Instant, q: f64) -> Duration {
    if times.is_empty() {
        return Duration::ZERO;
    }
    let i = ((times.len() as f64 - 1.0) * q).round() as usize;
    times[i.min(times.len() - 1)].saturating_duration_since(start)
}

/// From creating the sessions until all are Ready.
struct CreatePhase {
    /// Sessions seen Ready (all of them unless the wait timed out).
    ready_count: usize,
    rate: f64,
    ready: Duration,
    ready_p50: Duration,
    ready_p99: Duration,
    wall: Duration,
    api_per_object: f64,
    by_verb: Vec<VerbRow>,
    cpu: f64,
    reconciles: f64,
    errors: f64,
    reconcile_p50: Option<f64>,
    reconcile_p99: Option<f64>,
}

/// All sessions Ready, nothing happening.
struct Steady {
    api_per_sec: f64,
    by_verb: Vec<VerbRow>,
    reconciles_per_sec: f64,
    cpu_share: f64,
}

struct SessionPhase {
    create: CreatePhase,
    steady: Steady,
    gone: Duration,
    /// What was left when the wait for everything gone ran out (a timeout is a result too).
    gone_left: Option<String>,
    /// How long sending the deletes took (one request per session).
    issued: Duration,
    peak_rss: u64,
    vm_hwm: u64,
    total_reconciles: f64,
    total_errors: f64,
    error_causes: String,
    restarts: i32,
    last_state: String,
}

async fn session_phase(
    client: &Client,
    ns: &str,
    run: &str,
    cfg: &Config,
    op: &Operator,
    sampler: &Sampler,
) -> Result<SessionPhase> {
    let name = |i: usize| format!("s{i}");
    let tier = format!("{run}-tier");
    let class = format!("{run}-sc");
    println!(
        "-- sessions: StorageClass {class}, {} PVs bound in advance, SandboxTier {tier}",
        cfg.n
    );
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &scale::storage_class(&class, run))
        .await?;
    Api::<SandboxTier>::all(client.clone())
        .create(&PostParams::default(), &scale::fake_node_tier(&tier, run))
        .await?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    scale::bounded(cfg.n, cfg.concurrency, |i| {
        let pvs = pvs.clone();
        let (class, run) = (class.clone(), run.to_string());
        let pv = scale::prebound_pv(
            &format!("{run}-{i}"),
            &run,
            &class,
            ns,
            &format!("{}-workspace", name(i)),
        );
        async move { scale::create_retrying(&pvs, &pv).await }
    })
    .await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    scale::bounded(cfg.n, cfg.concurrency, |i| {
        let claims = claims.clone();
        let claim = scale::bound_claim(&name(i), &class, &format!("{run}-{i}"));
        let (client, ns, pv) = (client.clone(), ns.to_string(), format!("{run}-{i}"));
        async move {
            scale::create_retrying(&claims, &claim).await?;
            scale::mark_bound(&client, &ns, &pv, &claim.name_any()).await
        }
    })
    .await?;
    let binding = scale::wait_claims_bound(client, ns, cfg.n, cfg.timeout).await?;
    println!(
        "   {} workspace claims made and bound in advance ({} until the last was Bound)",
        cfg.n,
        secs(binding)
    );

    let sessions: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
    let seen = FirstSeen::start(
        sessions.clone(),
        watcher::Config::default(),
        scale::session_ready,
    );
    let restarts0 = op.restarts(client).await?;
    let m0 = op.metrics().await?;
    let api0 = api_requests(client).await?;
    let cpu0 = sampler.now();
    sampler.reset_peak();
    let start = Instant::now();
    scale::bounded(cfg.n, cfg.concurrency, |i| {
        let sessions = sessions.clone();
        let s = scale::session(&name(i), &tier, &class);
        async move { scale::create_retrying(&sessions, &s?).await }
    })
    .await?;
    let created = start.elapsed();
    let last = Instant::now();
    println!(
        "   {} sessions created in {} ({:.0}/s); waiting for Ready",
        cfg.n,
        secs(created),
        cfg.n as f64 / created.as_secs_f64()
    );
    // A timeout is a result too: the figures say how far it got.
    let waited = seen.wait_for(cfg.n, "sessions Ready", cfg.timeout).await;
    let times = seen.times();
    if let Err(e) = &waited {
        println!(
            "   NOT ALL READY: {e}; a list shows {} Ready",
            scale::sessions_ready(client, ns).await?
        );
    }
    let ready = times
        .last()
        .map_or(Duration::ZERO, |t| t.saturating_duration_since(last));
    let wall = start.elapsed();
    let cpu1 = sampler.now();
    let m1 = op.metrics().await?;
    let api1 = api_requests(client).await?;
    let (api_per_object, by_verb) = per_object(&api0, &api1, cfg.n as f64);
    let (reconciles, errors) = (
        reconciles_in(&m1) - reconciles_in(&m0),
        errors_in(&m1) - errors_in(&m0),
    );
    let hist = promtext::bucket_delta(&latency(&m0), &latency(&m1));
    let create = CreatePhase {
        ready_count: times.len(),
        rate: cfg.n as f64 / created.as_secs_f64(),
        ready,
        ready_p50: quantile_after(&times, start, 0.5),
        ready_p99: quantile_after(&times, start, 0.99),
        wall,
        api_per_object,
        by_verb,
        cpu: cpu1.cpu_seconds - cpu0.cpu_seconds,
        reconciles,
        errors,
        reconcile_p50: promtext::quantile(&hist, 0.5),
        reconcile_p99: promtext::quantile(&hist, 0.99),
    };
    println!(
        "   {} of {} Ready {} after the last create; quiet for {} s",
        times.len(),
        cfg.n,
        secs(ready),
        cfg.steady.as_secs()
    );
    drop(seen);

    let (m2, api2, cpu2, t2) = (
        op.metrics().await?,
        api_requests(client).await?,
        sampler.now(),
        Instant::now(),
    );
    tokio::time::sleep(cfg.steady).await;
    let (m3, api3, cpu3) = (
        op.metrics().await?,
        api_requests(client).await?,
        sampler.now(),
    );
    let quiet = t2.elapsed().as_secs_f64();
    let (api_per_sec, by_verb) = per_object(&api2, &api3, quiet);
    let steady = Steady {
        api_per_sec,
        by_verb,
        reconciles_per_sec: (reconciles_in(&m3) - reconciles_in(&m2)) / quiet,
        cpu_share: (cpu3.cpu_seconds - cpu2.cpu_seconds) / quiet,
    };

    println!("   deleting the sessions");
    let t = Instant::now();
    scale::delete_all(&sessions, &ListParams::default(), cfg.concurrency).await?;
    let issued = t.elapsed();
    let gone_left = match wait_gone(client, ns, cfg.timeout).await {
        Ok(()) => None,
        Err(e) => {
            println!("   NOT ALL GONE: {e}");
            Some(e.to_string())
        }
    };
    let gone = t.elapsed();
    let m4 = op.metrics().await?;
    let restarts1 = op.restarts(client).await?;
    let causes = promtext::delta(
        &promtext::sum_by(
            &m0,
            "kube_harness_reconcile_errors_total",
            &["controller", "error"],
        ),
        &promtext::sum_by(
            &m4,
            "kube_harness_reconcile_errors_total",
            &["controller", "error"],
        ),
    );
    Ok(SessionPhase {
        create,
        steady,
        gone,
        gone_left,
        issued,
        peak_rss: sampler.peak(),
        vm_hwm: sampler.now().peak_rss_bytes,
        total_reconciles: reconciles_in(&m4) - reconciles_in(&m0),
        total_errors: errors_in(&m4) - errors_in(&m0),
        error_causes: causes
            .iter()
            .map(|(k, v)| format!("{}={v:.0}", k.join("/")))
            .collect::<Vec<_>>()
            .join(" "),
        restarts: restarts1.0 - restarts0.0,
        last_state: restarts1.1,
    })
}

/// Waits until the namespace holds no session and none of the operator's child objects.
async fn wait_gone(client: &Client, ns: &str, timeout: Duration) -> Result<()> {
    wait::until("every session and child object gone", timeout, || async {
        let left = scale::children_left(client, ns).await?;
        Ok(if left.iter().all(|(_, n)| *n == 0) {
            Check::Done(())
        } else {
            Check::Pending(format!("{left:?}"))
        })
    })
    .await
}

fn reconciles_in(m: &[Sample]) -> f64 {
    promtext::sum(
        m,
        "kube_harness_reconciles_total",
        &[("controller", "harnesssession")],
    )
}

fn errors_in(m: &[Sample]) -> f64 {
    promtext::sum(
        m,
        "kube_harness_reconcile_errors_total",
        &[("controller", "harnesssession")],
    )
}

fn latency(m: &[Sample]) -> Vec<(f64, f64)> {
    promtext::buckets(
        m,
        "kube_harness_reconcile_duration_seconds",
        &[("controller", "harnesssession")],
    )
}

/// The API server's request counters by (verb, resource[/subresource]).
async fn api_requests(client: &Client) -> Result<BTreeMap<Vec<String>, f64>> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| E2eError::Failed(e.to_string()))?;
    let text = client.request_text(req).await?;
    let samples = promtext::parse(&text);
    Ok(promtext::sum_by(
        &samples,
        "apiserver_request_total",
        &["verb", "resource", "subresource"],
    ))
}

/// ((verb, resource), requests per object or per second).
type VerbRow = ((String, String), f64);

/// Total requests between two reads divided by `per`, and the 16 largest (verb, resource) rows.
fn per_object(
    before: &BTreeMap<Vec<String>, f64>,
    after: &BTreeMap<Vec<String>, f64>,
    per: f64,
) -> (f64, Vec<VerbRow>) {
    let d = promtext::delta(before, after);
    let total: f64 = d.values().sum();
    let mut rows: Vec<VerbRow> = d
        .into_iter()
        .map(|(k, v)| {
            let resource = match k[2].as_str() {
                "" => k[1].clone(),
                sub => format!("{}/{sub}", k[1]),
            };
            ((k[0].clone(), resource), v / per)
        })
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    rows.truncate(16);
    (total / per, rows)
}

/// The operator under test: its process on this host and its /metrics.
struct Operator {
    pid: u32,
    metrics: String,
    pod: Option<(String, String)>,
    http: reqwest::Client,
}

impl Operator {
    async fn find(client: &Client) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| E2eError::Failed(e.to_string()))?;
        if let (Ok(pid), Ok(metrics)) = (
            std::env::var("KH_SCALE_OPERATOR_PID"),
            std::env::var("KH_SCALE_OPERATOR_METRICS"),
        ) {
            let pid = pid
                .parse()
                .map_err(|_| E2eError::Failed(format!("KH_SCALE_OPERATOR_PID={pid}")))?;
            return Ok(Operator {
                pid,
                metrics,
                pod: None,
                http,
            });
        }
        let ns = harness::release_namespace();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=kube-harness-operator"))
            .await?
            .items
            .into_iter()
            .find(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .ok_or_else(|| {
                E2eError::Failed(format!(
                    "no running operator pod in {ns}; for a host process set KH_SCALE_OPERATOR_PID and KH_SCALE_OPERATOR_METRICS"
                ))
            })?;
        let uid = pod.uid().unwrap_or_default();
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        let pid = procstat::find_pod_process(&uid, "kube-harness").ok_or_else(|| {
            E2eError::Failed(format!(
                "no kube-harness process of pod {} on this host: run the bench on the cluster's host",
                pod.name_any()
            ))
        })?;
        Ok(Operator {
            pid,
            metrics: format!("http://{ip}:8000/metrics"),
            pod: Some((ns, pod.name_any())),
            http,
        })
    }

    async fn metrics(&self) -> Result<Vec<Sample>> {
        let text = self
            .http
            .get(&self.metrics)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| E2eError::Failed(format!("operator metrics {}: {e}", self.metrics)))?
            .text()
            .await
            .map_err(|e| E2eError::Failed(format!("operator metrics {}: {e}", self.metrics)))?;
        Ok(promtext::parse(&text))
    }

    /// The operator container's restart count and its last termination (pod mode only).
    async fn restarts(&self, client: &Client) -> Result<(i32, String)> {
        let Some((ns, name)) = &self.pod else {
            return Ok((0, String::new()));
        };
        let pod = Api::<Pod>::namespaced(client.clone(), ns).get(name).await?;
        let cs = pod
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().next());
        Ok(cs.map_or((0, String::new()), |c| {
            let last = c
                .last_state
                .and_then(|s| s.terminated)
                .map(|t| format!("{} (exit {})", t.reason.unwrap_or_default(), t.exit_code))
                .unwrap_or_default();
            (c.restart_count, last)
        }))
    }
}

/// Samples the operator process every 250 ms, keeping the highest resident set seen.
struct Sampler {
    pid: u32,
    peak: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let peak = Arc::new(Mutex::new(0));
        let task = tokio::spawn({
            let peak = peak.clone();
            async move {
                loop {
                    if let Some(s) = procstat::sample(pid) {
                        let mut p = peak.lock().unwrap();
                        *p = (*p).max(s.rss_bytes);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        });
        Sampler { pid, peak, task }
    }

    fn now(&self) -> ProcSample {
        procstat::sample(self.pid).unwrap_or_default()
    }

    fn peak(&self) -> u64 {
        *self.peak.lock().unwrap()
    }

    fn reset_peak(&self) {
        *self.peak.lock().unwrap() = 0;
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}
