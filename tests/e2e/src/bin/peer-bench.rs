//! Side by side with kubernetes-sigs/agent-sandbox (issue 16), on the test cluster with the chart
//! installed. Starts the peer's controller (tests/cluster/peers/agent-sandbox.sh) unless it runs,
//! and measures both in the same run, interleaved (the side that goes first alternates), one at a
//! time, KH_BENCH_SESSIONS (default 20) samples each:
//!
//! - cold: `HarnessSession` created → Ready against `Sandbox` created → Ready;
//! - warm: a `HarnessSession` whose level-0 `workerTier` has a warm pool of 3 (in this namespace)
//!   against a `SandboxClaim` on a 3-pod `SandboxWarmPool`; each pool is full before each sample;
//! - the round trip of `true` (KH_BENCH_EXECS, default 30, each): ours over the worker API (a
//!   port-forward kept open), `kubectl exec` into our worker pod, `kube-harness exec` (a new
//!   process each time) against `kubectl exec` into their pod.
//!
//! Each start is timed (a) from the create call's return until a watch (started before) sees the
//! object Ready, and (b) server side, `creationTimestamp` to the Ready condition's
//! `lastTransitionTime` (whole seconds). Both sides' pods run the worker image with the same
//! resources, in a namespace enforcing the restricted Pod Security Standard. A row that cannot be
//! measured (a CRD that rejects our warm pool, a peer that never gets Ready) says why instead of
//! failing the run; everything created is deleted at the end.
//!
//!   KH_KUBECTL=/var/cache/kube-harness/k8s-v1.34.4/bin/kubectl \
//!   KH_KUBE_HARNESS_BIN=target/release/kube-harness \
//!   cargo run --release -p kube-harness-e2e --bin peer-bench
//!
//! KH_PEER_KEEP=1 leaves a peer this run started running afterwards; KH_PEER_TIER0 names our
//! level-0 tier (default `tier0`, the chart's); KH_BENCH_READY_SECS bounds each start (default
//! 120; a pool gets 60 s more to fill).

use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective,
};
use kube::{Api, Client};
use kube_harness_client::SessionHandle;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_e2e::harness::{self, release_namespace, repo_root};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::peer::{self, ReadyWatch};
use kube_harness_e2e::stats::{env_usize, percentile};
use kube_harness_e2e::wait::{self, Check};
use kube_harness_protocol::worker_api::ExecRequest;
use serde_json::{json, Value};
use std::panic::AssertUnwindSafe;
use std::process::Command;
use std::time::{Duration, Instant};

/// Longest wait for one start (KH_BENCH_READY_SECS, default 120); a side that is not Ready by
/// then is reported as failed.
fn ready_timeout() -> Duration {
    Duration::from_secs(env_usize("KH_BENCH_READY_SECS", 120) as u64)
}
/// Longest wait for a warm pool to fill (first time) or refill (between samples).
fn pool_fill_timeout() -> Duration {
    ready_timeout() + Duration::from_secs(60)
}
/// Longest wait for one sample's pods to go before the next sample starts.
const TEARDOWN: Duration = Duration::from_secs(90);
const POOL: u32 = 3;
/// A side whose first this many starts all fail is not tried again in that phase.
const GIVE_UP: usize = 2;

/// One measurement's samples for one side, or why there are none.
#[derive(Default)]
struct Side {
    samples: Vec<Duration>,
    failures: Vec<String>,
    unavailable: Option<String>,
}

/// Records one start: its watch time in `seen`, and (when it started) its server-side time and
/// its pod's in the other two; a failure is counted once, in `seen`.
fn record_start(
    seen: &mut Side,
    server: &mut Side,
    pod: Option<&mut Side>,
    r: Result<Start, String>,
) {
    if let Ok(s) = &r {
        server.samples.extend(s.server);
        if let Some(pod) = pod {
            pod.samples.extend(s.pod_ready);
        }
    }
    seen.record(r, |s| Some(s.seen));
}

impl Side {
    /// Whether to take another sample: not once the side is unavailable, or after its first
    /// `GIVE_UP` starts all failed (it is then marked unavailable, quoting the last failure).
    fn keep_going(&mut self) -> bool {
        if self.unavailable.is_none() && self.samples.is_empty() && self.failures.len() >= GIVE_UP {
            let last = self.failures.last().cloned().unwrap_or_default();
            self.unavailable = Some(format!(
                "its first {GIVE_UP} starts failed; the last: {last}"
            ));
        }
        self.unavailable.is_none()
    }

    fn record<T>(&mut self, r: Result<T, String>, take: impl FnOnce(&T) -> Option<Duration>) {
        match r {
            Ok(v) => {
                if let Some(d) = take(&v) {
                    self.samples.push(d);
                }
            }
            Err(e) => self.failures.push(e),
        }
    }

    /// The table cell; why a side is not available goes to `notes`, once, and the cell points there.
    fn cell(&self, notes: &mut Vec<String>) -> String {
        if let Some(why) = &self.unavailable {
            let i = notes.iter().position(|n| n == why).unwrap_or_else(|| {
                notes.push(why.clone());
                notes.len() - 1
            });
            return format!("not available [{}]", i + 1);
        }
        if self.samples.is_empty() {
            return match self.failures.len() {
                0 => "no samples".into(),
                f => format!("no samples ({f} failed)"),
            };
        }
        let (p50, p95) = p50_p95(&self.samples);
        let failed = if self.failures.is_empty() {
            String::new()
        } else {
            format!(", {} failed", self.failures.len())
        };
        format!(
            "{} / {} (n={}{failed})",
            ms(p50),
            ms(p95),
            self.samples.len()
        )
    }
}

struct Row {
    what: &'static str,
    ours_label: String,
    ours: Side,
    theirs_label: String,
    theirs: Side,
}

fn p50_p95(samples: &[Duration]) -> (Duration, Duration) {
    let mut s = samples.to_vec();
    s.sort();
    (percentile(&s, 0.5), percentile(&s, 0.95))
}

fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1e3;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn ratio(ours: &Side, theirs: &Side) -> String {
    if ours.samples.is_empty() || theirs.samples.is_empty() {
        return "-".into();
    }
    let (o50, o95) = p50_p95(&ours.samples);
    let (t50, t95) = p50_p95(&theirs.samples);
    let r = |a: Duration, b: Duration| {
        if b.is_zero() {
            "-".to_string()
        } else {
            format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64())
        }
    };
    format!("{} / {}", r(o50, t50), r(o95, t95))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("? ({e})"))
}

fn kubectl_bin() -> String {
    std::env::var("KH_KUBECTL").unwrap_or_else(|_| {
        let cluster = "/var/cache/kube-harness/k8s-v1.34.4/bin/kubectl";
        if std::path::Path::new(cluster).exists() {
            cluster.into()
        } else {
            "kubectl".into()
        }
    })
}

/// Runs a program, returning its output or a one-line error.
fn run(program: &str, args: &[&str]) -> Result<std::process::Output, String> {
    Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))
}

fn timed(program: &str, args: &[&str]) -> Result<Duration, String> {
    let t = Instant::now();
    let out = run(program, args)?;
    let took = t.elapsed();
    if !out.status.success() {
        return Err(format!(
            "{program} {}: {}: {}",
            args.join(" "),
            out.status,
            harness::stderr(&out).trim()
        ));
    }
    Ok(took)
}

fn peer_script() -> String {
    let root = repo_root();
    std::fs::canonicalize(&root)
        .unwrap_or(root)
        .join("tests/cluster/peers/agent-sandbox.sh")
        .to_string_lossy()
        .into_owned()
}

/// Starts the peer unless it runs; true when this run started it.
fn ensure_peer() -> bool {
    let script = peer_script();
    if run(&script, &["status"]).is_ok_and(|o| o.status.success()) {
        return false;
    }
    eprintln!("agent-sandbox is not running: {script} start");
    let status = Command::new(&script).arg("start").status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("peer-bench: could not start agent-sandbox ({script} start failed, see above)");
        std::process::exit(2);
    }
    true
}

fn peer_info() -> String {
    let state =
        std::env::var("KH_STATE").unwrap_or_else(|_| "/var/lib/kube-harness-cluster".into());
    let path = format!("{state}/peers/agent-sandbox.info");
    std::fs::read_to_string(&path)
        .map(|s| {
            s.lines()
                .filter(|l| !l.starts_with("pid=") && !l.starts_with("binary="))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|e| format!("unknown ({path}: {e})"))
}

fn our_commit() -> String {
    let root = repo_root();
    let root = root.to_string_lossy();
    let head = run("git", &["-C", &root, "rev-parse", "--short=12", "HEAD"])
        .map(|o| harness::stdout(&o).trim().to_string())
        .unwrap_or_else(|e| e);
    let dirty = run(
        "git",
        &["-C", &root, "status", "--porcelain", "--untracked-files=no"],
    )
    .is_ok_and(|o| !o.stdout.is_empty());
    format!(
        "{head}{}",
        if dirty { " (uncommitted changes)" } else { "" }
    )
}

/// Which operator serves the sessions: the holder of its leader Lease, and that pod's image when
/// it is a pod of the release (an operator run outside the cluster is named as such).
async fn operator_image(client: &Client) -> String {
    use k8s_openapi::api::coordination::v1::Lease;
    let ns = release_namespace();
    let holder = Api::<Lease>::namespaced(client.clone(), &ns)
        .get_opt("kube-harness-operator")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity);
    let Some(holder) = holder else {
        return "unknown (no leader Lease kube-harness-operator)".into();
    };
    let pod = Api::<Pod>::namespaced(client.clone(), &ns)
        .get_opt(&holder)
        .await
        .ok()
        .flatten();
    match pod
        .and_then(|p| p.status?.container_statuses?.into_iter().next())
        .map(|c| format!("{} ({})", c.image, c.image_id))
    {
        Some(image) => format!("pod {holder}, image {image}"),
        None => format!("{holder} (leader, not a pod of the release: run outside the cluster)"),
    }
}

/// A started object: when the watch saw it Ready, from the create call's return; server side;
/// and when its pod was first seen Ready (cold starts).
struct Start {
    seen: Duration,
    server: Option<Duration>,
    pod_ready: Option<Duration>,
    from_pool: bool,
}

fn since(t0: Instant, at: Instant) -> Duration {
    at.saturating_duration_since(t0)
}

fn hs_resource() -> ApiResource {
    ApiResource::erase::<HarnessSession>(&())
}

fn pod_resource() -> ApiResource {
    ApiResource::erase::<Pod>(&())
}

/// Creates a session from examples/demo.yaml on `tier` and times it to Ready.
async fn ours_start(
    client: &Client,
    ns: &str,
    watch: &ReadyWatch,
    name: &str,
    tier: &str,
) -> Result<Start, String> {
    let mut s = harness::example_session("demo.yaml", name).map_err(|e| e.to_string())?;
    s.spec.worker_tier = tier.to_string();
    let api: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &s)
        .await
        .map_err(|e| format!("creating HarnessSession {name}: {e}"))?;
    let t0 = Instant::now();
    let seen = watch
        .wait(&hs_resource(), name, ready_timeout())
        .await
        .map_err(|e| e.to_string())?;
    let worker = seen.object.data["status"]["workerPod"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // Give the pod watch a moment: a session may be Ready before its pod's probe passes.
    let pod = watch
        .wait(&pod_resource(), &worker, Duration::from_secs(5))
        .await
        .ok();
    let from_pool = !worker.is_empty() && worker != format!("{name}-worker");
    Ok(Start {
        seen: since(t0, seen.at),
        server: peer::server_side(&seen.object),
        // An adopted pool pod was Ready long before: nothing to time.
        pod_ready: pod.filter(|_| !from_pool).map(|p| since(t0, p.at)),
        from_pool,
    })
}

async fn ours_delete(client: &Client, ns: &str, name: &str) {
    let api: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
    if let Err(e) = api.delete(name, &DeleteParams::background()).await {
        eprintln!("warning: deleting HarnessSession {name}: {e}");
    }
}

/// Creates a Sandbox running `spec` and times it to Ready.
async fn theirs_cold(
    client: &Client,
    ns: &str,
    watch: &ReadyWatch,
    name: &str,
    spec: &Value,
) -> Result<Start, String> {
    let ar = peer::sandbox();
    peer::create(client, ns, &ar, &peer::sandbox_object(name, spec))
        .await
        .map_err(|e| format!("creating Sandbox {name}: {e}"))?;
    let t0 = Instant::now();
    let seen = watch
        .wait(&ar, name, ready_timeout())
        .await
        .map_err(|e| e.to_string())?;
    let pod = watch
        .wait(&pod_resource(), name, Duration::from_secs(5))
        .await
        .ok();
    Ok(Start {
        seen: since(t0, seen.at),
        server: peer::server_side(&seen.object),
        pod_ready: pod.map(|p| since(t0, p.at)),
        from_pool: false,
    })
}

/// Creates a SandboxClaim on `pool` and times it to Ready.
async fn theirs_warm(
    client: &Client,
    ns: &str,
    watch: &ReadyWatch,
    name: &str,
    pool: &str,
) -> Result<Start, String> {
    let ar = peer::claim();
    peer::create(client, ns, &ar, &peer::claim_object(name, pool))
        .await
        .map_err(|e| format!("creating SandboxClaim {name}: {e}"))?;
    let t0 = Instant::now();
    let seen = watch
        .wait(&ar, name, ready_timeout())
        .await
        .map_err(|e| e.to_string())?;
    let sandbox = seen.object.data["status"]["sandbox"]["name"]
        .as_str()
        .unwrap_or_default();
    Ok(Start {
        seen: since(t0, seen.at),
        server: peer::server_side(&seen.object),
        pod_ready: None,
        // A claim the pool cannot serve gets a Sandbox of its own name; adopted ones are the pool's.
        from_pool: sandbox.starts_with(&format!("{pool}-")),
    })
}

/// `label`, and how many of the side's samples a pool served.
fn from_pool(label: &str, served: usize, side: &Side) -> String {
    if side.samples.is_empty() {
        return label.into();
    }
    format!("{label} ({served} of {} from the pool)", side.samples.len())
}

fn line(side: &str, name: &str, r: &Result<Start, String>) {
    match r {
        Ok(s) => println!(
            "  {side:<6} {name:<5} Ready seen {:>9}  server {:>7}  pod Ready seen {:>9}{}",
            ms(s.seen),
            s.server.map(ms).unwrap_or_else(|| "?".into()),
            s.pod_ready.map(ms).unwrap_or_else(|| "-".into()),
            if s.from_pool { "  (from the pool)" } else { "" }
        ),
        Err(e) => println!("  {side:<6} {name:<5} FAILED: {e}"),
    }
}

/// Waits for this sample's pods to go (and the pools' new pods to be Ready), so that neither
/// overlaps the next start.
async fn settle(client: &Client, ns: &str) {
    if let Err(e) = peer::pods_settled(client, ns, TEARDOWN).await {
        eprintln!("warning: {e}");
    }
}

/// Our level-0 tier with a warm pool in `ns`: the chart's tier0 spec with `warmPool: {size: 3,
/// namespaces: [ns]}`, applied with strict field validation so that a CRD without
/// `warmPool.namespaces` rejects it instead of dropping the field.
async fn our_pool(client: &Client, name: &str, tier0: &Value, ns: &str) -> Result<(), String> {
    let ar = ApiResource::erase::<SandboxTier>(&());
    let mut spec = tier0.clone();
    spec["warmPool"] = json!({"size": POOL, "namespaces": [ns]});
    let obj = DynamicObject::new(name, &ar).data(json!({ "spec": spec }));
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    let params = PatchParams::apply("kh-peer-bench").validation(ValidationDirective::Strict);
    api.patch(name, &params, &Patch::Apply(&obj))
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) => format!(
                "the SandboxTier CRD rejects warmPool.namespaces: {}",
                s.message
            ),
            e => format!("applying SandboxTier {name}: {e}"),
        })?;
    Ok(())
}

/// Waits until `status[field]` of the cluster-scoped or namespaced object reaches `n`.
async fn pool_full(
    api: &Api<DynamicObject>,
    name: &str,
    field: &str,
    n: u32,
) -> Result<(), String> {
    wait::until(
        &format!("{name}: status.{field} >= {n}"),
        pool_fill_timeout(),
        || async {
            let o = api.get(name).await?;
            let have = o.data["status"][field].as_u64().unwrap_or(0);
            Ok(if have >= u64::from(n) {
                Check::Done(())
            } else {
                Check::Pending(format!("status {}", o.data["status"]))
            })
        },
    )
    .await
    .map_err(|e| e.to_string())
}

async fn bench(client: Client, ns: String, rows: &mut Vec<Row>, n: usize, execs: usize) {
    harness::restrict(&client, &ns).await.unwrap();
    let tier0_name = std::env::var("KH_PEER_TIER0").unwrap_or_else(|_| "tier0".into());
    let tier0 = Api::<SandboxTier>::all(client.clone())
        .get(&tier0_name)
        .await
        .unwrap_or_else(|e| panic!("our level-0 tier {tier0_name}: {e} (is the chart installed?)"));
    let tier0_spec = serde_json::to_value(&tier0.spec).unwrap();
    let image = tier0_spec["template"]["image"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("localhost/kube-harness/worker:dev")
        .to_string();
    let resources = tier0_spec["template"]["resources"].clone();
    let pod_spec = peer::sleeping_pod_spec(&image, &resources);
    println!("their pods: {image} running `sleep infinity`, resources {resources}");

    let watch = ReadyWatch::start(
        &client,
        &ns,
        &[
            hs_resource(),
            peer::sandbox(),
            peer::claim(),
            pod_resource(),
        ],
    )
    .await
    .unwrap();

    // --- cold ------------------------------------------------------------------------------
    println!("\n== cold: created -> Ready ({n} each, interleaved)");
    let (mut oc, mut tc) = (Side::default(), Side::default());
    let (mut oc_server, mut tc_server) = (Side::default(), Side::default());
    let (mut oc_pod, mut tc_pod) = (Side::default(), Side::default());
    for i in 0..n {
        for ours_turn in order(i) {
            if ours_turn && oc.keep_going() {
                let name = format!("c{i}");
                let r = ours_start(&client, &ns, &watch, &name, &tier0_name).await;
                line("ours", &name, &r);
                record_start(&mut oc, &mut oc_server, Some(&mut oc_pod), r);
                ours_delete(&client, &ns, &name).await;
            } else if !ours_turn && tc.keep_going() {
                let name = format!("s{i}");
                let r = theirs_cold(&client, &ns, &watch, &name, &pod_spec).await;
                line("theirs", &name, &r);
                record_start(&mut tc, &mut tc_server, Some(&mut tc_pod), r);
                let _ = peer::delete(&client, &ns, &peer::sandbox(), &name).await;
            }
            settle(&client, &ns).await;
        }
    }
    for (from, to) in [(&oc, &mut oc_server), (&tc, &mut tc_server)] {
        to.unavailable = from.unavailable.clone();
    }
    oc_pod.unavailable = oc.unavailable.clone();
    tc_pod.unavailable = tc.unavailable.clone();
    rows.push(Row {
        what: "cold start, create returned -> Ready seen (watch)",
        ours_label: "HarnessSession".into(),
        ours: oc,
        theirs_label: "Sandbox".into(),
        theirs: tc,
    });
    rows.push(Row {
        what: "cold start, server side (creationTimestamp -> Ready transition, 1 s steps)",
        ours_label: "HarnessSession".into(),
        ours: oc_server,
        theirs_label: "Sandbox".into(),
        theirs: tc_server,
    });
    rows.push(Row {
        what: "cold start, create returned -> its pod Ready seen",
        ours_label: "worker pod".into(),
        ours: oc_pod,
        theirs_label: "Sandbox pod".into(),
        theirs: tc_pod,
    });

    // --- warm ------------------------------------------------------------------------------
    println!("\n== warm: created -> Ready from a pool of {POOL} ({n} each, interleaved; each pool full before each sample)");
    let suffix = ns.rsplit('-').next().unwrap_or("x");
    let tier_name = format!("peer-bench-{suffix}");
    let tier_ar = ApiResource::erase::<SandboxTier>(&());
    let tiers = Api::<DynamicObject>::all_with(client.clone(), &tier_ar);
    let pools = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &peer::warm_pool());
    let (mut ow, mut tw) = (Side::default(), Side::default());
    let (mut ow_server, mut tw_server) = (Side::default(), Side::default());
    let (mut ow_pool, mut tw_pool) = (0usize, 0usize);
    let created_tier = our_pool(&client, &tier_name, &tier0_spec, &ns).await;
    let warm = AssertUnwindSafe(async {
        if let Err(e) = &created_tier {
            ow.unavailable = Some(e.clone());
        } else if let Err(e) = pool_full(&tiers, &tier_name, "warmReady", POOL).await {
            ow.unavailable = Some(format!("our pool never filled: {e}"));
        }
        let theirs_pool = async {
            peer::create(
                &client,
                &ns,
                &peer::template(),
                &peer::template_object("bench", &pod_spec),
            )
            .await
            .map_err(|e| e.to_string())?;
            peer::create(
                &client,
                &ns,
                &peer::warm_pool(),
                &peer::warm_pool_object("bench", "bench", POOL),
            )
            .await
            .map_err(|e| e.to_string())?;
            pool_full(&pools, "bench", "readyReplicas", POOL).await
        };
        if let Err(e) = theirs_pool.await {
            tw.unavailable = Some(format!("their pool never filled: {e}"));
        }
        for i in 0..n {
            for ours_turn in order(i) {
                if ours_turn && ow.keep_going() {
                    let name = format!("w{i}");
                    let r = match pool_full(&tiers, &tier_name, "warmReady", POOL).await {
                        Ok(()) => ours_start(&client, &ns, &watch, &name, &tier_name).await,
                        Err(e) => Err(e),
                    };
                    line("ours", &name, &r);
                    ow_pool += usize::from(r.as_ref().is_ok_and(|s| s.from_pool));
                    record_start(&mut ow, &mut ow_server, None, r);
                    ours_delete(&client, &ns, &name).await;
                } else if !ours_turn && tw.keep_going() {
                    let name = format!("k{i}");
                    let r = match pool_full(&pools, "bench", "readyReplicas", POOL).await {
                        Ok(()) => theirs_warm(&client, &ns, &watch, &name, "bench").await,
                        Err(e) => Err(e),
                    };
                    line("theirs", &name, &r);
                    tw_pool += usize::from(r.as_ref().is_ok_and(|s| s.from_pool));
                    record_start(&mut tw, &mut tw_server, None, r);
                    let _ = peer::delete(&client, &ns, &peer::claim(), &name).await;
                } else {
                    continue;
                }
                settle(&client, &ns).await;
            }
        }
    })
    .catch_unwind()
    .await;
    if created_tier.is_ok() {
        if let Err(e) = tiers.delete(&tier_name, &DeleteParams::background()).await {
            eprintln!("warning: deleting SandboxTier {tier_name}: {e}");
        }
    }
    if let Err(panic) = warm {
        std::panic::resume_unwind(panic);
    }
    ow_server.unavailable = ow.unavailable.clone();
    tw_server.unavailable = tw.unavailable.clone();
    println!(
        "served from the pool: ours {ow_pool} of {}, theirs {tw_pool} of {}",
        ow.samples.len(),
        tw.samples.len()
    );
    rows.push(Row {
        what: "warm start, create returned -> Ready seen (watch)",
        ours_label: from_pool("HarnessSession, level-0 warm pool", ow_pool, &ow),
        ours: ow,
        theirs_label: from_pool("SandboxClaim, SandboxWarmPool", tw_pool, &tw),
        theirs: tw,
    });
    rows.push(Row {
        what: "warm start, server side (1 s steps)",
        ours_label: "HarnessSession".into(),
        ours: ow_server,
        theirs_label: "SandboxClaim".into(),
        theirs: tw_server,
    });

    // Both pools go before the round trips, so their pods are not running beside them.
    let _ = peer::delete(&client, &ns, &peer::warm_pool(), "bench").await;
    settle(&client, &ns).await;

    // --- round trip ------------------------------------------------------------------------
    println!("\n== round trip of `true` ({execs} each, interleaved)");
    let ours_rt = ours_start(&client, &ns, &watch, "rt", &tier0_name).await;
    let theirs_rt = theirs_cold(&client, &ns, &watch, "rt-sandbox", &pod_spec).await;
    let (mut api_rt, mut kubectl_ours, mut cli_rt) =
        (Side::default(), Side::default(), Side::default());
    let mut kubectl_theirs = Side::default();
    let kubectl = kubectl_bin();
    let cli = std::env::var("KH_KUBE_HARNESS_BIN").unwrap_or_else(|_| "kube-harness".into());
    if run(&cli, &["--version"]).map_or(true, |o| !o.status.success()) {
        cli_rt.unavailable = Some(format!("{cli} does not run; set KH_KUBE_HARNESS_BIN"));
    }
    if let Err(e) = &theirs_rt {
        kubectl_theirs.unavailable = Some(format!("their Sandbox did not start: {e}"));
    }
    // Ours: the session's worker pod and a connection to its worker API, kept open.
    let ours = match ours_rt {
        Err(e) => Err(format!("our session did not start: {e}")),
        Ok(_) => {
            let session = Api::<HarnessSession>::namespaced(client.clone(), &ns)
                .get("rt")
                .await;
            let worker_pod = session
                .ok()
                .and_then(|s| s.status?.worker_pod)
                .unwrap_or_else(|| "rt-worker".into());
            SessionHandle::new(client.clone(), &ns, "rt")
                .connect(Duration::from_secs(60))
                .await
                .map(|c| (worker_pod, c))
                .map_err(|e| format!("connecting to our session's worker: {e}"))
        }
    };
    if let Err(e) = &ours {
        for s in [&mut api_rt, &mut kubectl_ours, &mut cli_rt] {
            s.unavailable.get_or_insert(e.clone());
        }
    }
    let request = ExecRequest::new("true");
    let one_api = || async {
        let Ok((_, connected)) = &ours else {
            return Err("no session".to_string());
        };
        let t = Instant::now();
        let r = connected
            .worker
            .exec(&request)
            .await
            .map_err(|e| e.to_string())?;
        let took = t.elapsed();
        if r.outcome.exit_code != 0 {
            return Err(format!("exit {}", r.outcome.exit_code));
        }
        Ok(took)
    };
    let worker_pod = ours.as_ref().map(|(p, _)| p.clone()).unwrap_or_default();
    let theirs_args = ["exec", "-n", &ns, "rt-sandbox", "--", "true"];
    let ours_args = ["exec", "-n", &ns, &worker_pod, "--", "true"];
    let cli_args = ["exec", "-n", &ns, "rt", "--", "true"];
    // One of each first, unmeasured: connections and caches are warm on both sides.
    if api_rt.unavailable.is_none() {
        let _ = one_api().await;
        let _ = timed(&kubectl, &ours_args);
    }
    if kubectl_theirs.unavailable.is_none() {
        let _ = timed(&kubectl, &theirs_args);
    }
    for j in 0..execs {
        for k in 0..4 {
            match (j + k) % 4 {
                0 if api_rt.unavailable.is_none() => api_rt.record(one_api().await, |d| Some(*d)),
                1 if kubectl_ours.unavailable.is_none() => {
                    kubectl_ours.record(timed(&kubectl, &ours_args), |d| Some(*d))
                }
                2 if kubectl_theirs.unavailable.is_none() => {
                    kubectl_theirs.record(timed(&kubectl, &theirs_args), |d| Some(*d))
                }
                3 if cli_rt.unavailable.is_none() => {
                    cli_rt.record(timed(&cli, &cli_args), |d| Some(*d))
                }
                _ => {}
            }
        }
    }
    // The same baseline in each round-trip row (its failures are listed once, with the first).
    let baseline = || Side {
        samples: kubectl_theirs.samples.clone(),
        failures: Vec::new(),
        unavailable: kubectl_theirs.unavailable.clone(),
    };
    let (theirs_twice, theirs_thrice) = (baseline(), baseline());
    rows.push(Row {
        what: "round trip of `true`",
        ours_label: "worker API (port-forward kept open)".into(),
        ours: api_rt,
        theirs_label: "kubectl exec into their pod".into(),
        theirs: kubectl_theirs,
    });
    rows.push(Row {
        what: "round trip of `true`",
        ours_label: "kubectl exec into our worker pod".into(),
        ours: kubectl_ours,
        theirs_label: "kubectl exec into their pod".into(),
        theirs: theirs_twice,
    });
    rows.push(Row {
        what: "round trip of `true`",
        ours_label: "kube-harness exec (new process: lookup, tunnel, exec)".into(),
        ours: cli_rt,
        theirs_label: "kubectl exec into their pod".into(),
        theirs: theirs_thrice,
    });
    drop(watch);
}

/// Which side goes first in sample `i`: ours in even samples, theirs in odd ones.
fn order(i: usize) -> [bool; 2] {
    if i.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    }
}

#[tokio::main]
async fn main() {
    let n = env_usize("KH_BENCH_SESSIONS", 20);
    let execs = env_usize("KH_BENCH_EXECS", 30);
    let client = Client::try_default()
        .await
        .expect("no usable KUBECONFIG: the test cluster must be up (docs/testing.md)");
    let load_before = loadavg();
    let started = ensure_peer();
    if !peer::installed(&client).await.unwrap_or(false) {
        eprintln!(
            "peer-bench: the agent-sandbox CRDs are not installed after `agent-sandbox.sh start`"
        );
        std::process::exit(2);
    }
    let mut rows = Vec::new();
    let mut load_after = String::new();
    let versions = format!(
        "Kubernetes {}; Kube Harness checkout {}, operator {}; agent-sandbox {}",
        client
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .unwrap_or_else(|e| format!("? ({e})")),
        our_commit(),
        operator_image(&client).await,
        peer_info()
    );
    let outcome = AssertUnwindSafe(with_namespace("peer", |client, ns| {
        let rows = &mut rows;
        let load_after = &mut load_after;
        async move {
            bench(client, ns, rows, n, execs).await;
            *load_after = loadavg();
        }
    }))
    .catch_unwind()
    .await;
    if started && std::env::var_os("KH_PEER_KEEP").is_none() {
        let _ = Command::new(peer_script()).arg("stop").status();
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }

    println!("\n== Kube Harness against agent-sandbox, same cluster, same run");
    println!("{versions}");
    println!("load average before {load_before}, after {load_after}");
    println!("\n| measurement | Kube Harness | p50 / p95 | agent-sandbox | p50 / p95 | ours / theirs, p50 / p95 |");
    println!("|---|---|---|---|---|---|");
    let mut notes = Vec::new();
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.what,
            r.ours_label,
            r.ours.cell(&mut notes),
            r.theirs_label,
            r.theirs.cell(&mut notes),
            ratio(&r.ours, &r.theirs)
        );
    }
    for (i, n) in notes.iter().enumerate() {
        println!("\n[{}] {n}", i + 1);
    }
    let failures: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            let ours = r
                .ours
                .failures
                .iter()
                .map(move |f| format!("ours, {}: {f}", r.what));
            let theirs = r
                .theirs
                .failures
                .iter()
                .map(move |f| format!("theirs, {}: {f}", r.what));
            ours.chain(theirs)
        })
        .collect();
    if !failures.is_empty() {
        println!("\nfailed samples:");
        for f in failures {
            println!("  {f}");
        }
    }
}
