//! Cluster bench (issue 7): HarnessSession created → Ready (p50/p95 over KH_BENCH_SESSIONS, default
//! 20), and the exec round trip of `true` through the API server (port-forward to the worker API)
//! against `kubectl exec` of the same in the same run. Needs KUBECONFIG and the chart installed
//! (tests/cluster/install-chart.sh); KH_KUBECTL and KH_KUBE_HARNESS_BIN as for the e2e tests.
//!
//!   cargo run -p kube-harness-e2e --bin cluster-bench

use kube::api::DeleteParams;
use kube::Api;
use kube_harness_client::SessionHandle;
use kube_harness_crds::HarnessSession;
use kube_harness_e2e::harness::{self, kube_harness, kubectl};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::startup;
use kube_harness_e2e::stats::{env_usize, summary};
use kube_harness_protocol::worker_api::ExecRequest;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let sessions = env_usize("KH_BENCH_SESSIONS", 20);
    let execs = env_usize("KH_BENCH_EXECS", 50);
    with_namespace("bench", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        println!("== HarnessSession created -> Ready ({sessions} sessions, one at a time)");
        let api: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
        let mut ready = Vec::new();
        for i in 0..sessions {
            let name = format!("b{i}");
            let start = Instant::now();
            harness::apply_example(&client, &ns, "demo.yaml", &name).await.unwrap();
            harness::wait_ready(&client, &ns, &name, Duration::from_secs(180)).await.unwrap();
            ready.push(start.elapsed());
            api.delete(&name, &DeleteParams::default()).await.unwrap();
        }
        if !ready.is_empty() {
            summary("created -> Ready", ready);
        }

        let traced = env_usize("KH_BENCH_TRACED", 10);
        println!("\n== where created -> Ready goes ({traced} sessions, watch times from the create)");
        let mut by_milestone: std::collections::BTreeMap<&str, Vec<Duration>> = Default::default();
        for i in 0..traced {
            let name = format!("t{i}");
            let seen = startup::trace(&client, &ns, &name, Duration::from_secs(180)).await;
            let line: Vec<String> = startup::MILESTONES
                .iter()
                .map(|m| format!("{m} {:>5} ms", seen.get(m).map_or(-1, |d| d.as_millis() as i64)))
                .collect();
            println!("  {name}: {}", line.join(" | "));
            for (m, d) in seen {
                by_milestone.entry(m).or_default().push(d);
            }
            api.delete(&name, &DeleteParams::default()).await.unwrap();
        }
        for m in startup::MILESTONES {
            if let Some(samples) = by_milestone.remove(m) {
                summary(&format!("  {m}"), samples);
            }
        }

        let warm = env_usize("KH_BENCH_WARM", 10);
        if warm > 0 {
            warm_against_cold(&client, &ns, warm).await;
        }

        println!("\n== exec round trip of `true` ({execs} each, same worker pod, same run)");
        harness::apply_example(&client, &ns, "demo.yaml", "rt").await.unwrap();
        harness::wait_ready(&client, &ns, "rt", Duration::from_secs(180)).await.unwrap();
        let handle = SessionHandle::new(client.clone(), &ns, "rt");
        let connected = handle.connect(Duration::from_secs(60)).await.unwrap();
        let request = ExecRequest::new("true");
        connected.worker.exec(&request).await.unwrap();
        let mut api_rt = Vec::new();
        for _ in 0..execs {
            let t = Instant::now();
            let r = connected.worker.exec(&request).await.unwrap();
            assert_eq!(r.outcome.exit_code, 0);
            api_rt.push(t.elapsed());
        }
        let mut kubectl_rt = Vec::new();
        for _ in 0..execs {
            let t = Instant::now();
            let out = kubectl(&["exec", "-n", &ns, "rt-worker", "--", "true"]).unwrap();
            assert!(out.status.success(), "{}", harness::stderr(&out));
            kubectl_rt.push(t.elapsed());
        }
        let cli_n = (execs / 5).max(3);
        let mut cli_rt = Vec::new();
        for _ in 0..cli_n {
            let t = Instant::now();
            let out = kube_harness(&["exec", "-n", &ns, "rt", "--", "true"]).unwrap_or_else(|e| {
                panic!("{e}: set KH_KUBE_HARNESS_BIN to a kube-harness binary (or put one on PATH)")
            });
            assert!(out.status.success(), "{}", harness::stderr(&out));
            cli_rt.push(t.elapsed());
        }
        let (api50, api95) = summary("worker API via port-forward (kept open)", api_rt);
        let (k50, k95) = summary("kubectl exec -- true (baseline)", kubectl_rt);
        let (c50, _) = summary("kube-harness exec CLI (lookup+tunnel+exec)", cli_rt);
        println!(
            "\nratios vs kubectl exec: worker API p50 {:.2}x, p95 {:.2}x; kube-harness exec CLI p50 {:.2}x",
            api50.as_secs_f64() / k50.as_secs_f64(),
            api95.as_secs_f64() / k95.as_secs_f64(),
            c50.as_secs_f64() / k50.as_secs_f64()
        );
    })
    .await;
}

/// A session adopting a warm pod against a cold one, interleaved: created -> Ready as a watch
/// sees it. The warm tier is the chart's `tier0` with a pool of 3 in `ns`; each warm sample waits
/// until the pool is full again, so every adoption finds a ready pod.
async fn warm_against_cold(client: &kube::Client, ns: &str, n: usize) {
    use kube_harness_crds::SandboxTier;
    println!(
        "\n== created -> Ready, warm (level-0 warm pool of 3) against cold, interleaved, {n} each"
    );
    let tiers: Api<SandboxTier> = Api::all(client.clone());
    let mut spec = tiers.get("tier0").await.unwrap().spec;
    spec.warm_pool.size = 3;
    spec.warm_pool.namespaces = vec![ns.to_string()];
    let tier = SandboxTier::new("bench-warm", spec);
    kube_harness_e2e::tiers::with_tier(client, tier, || async {
        let sessions: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
        let (mut warm, mut cold) = (Vec::new(), Vec::new());
        for i in 0..n {
            pool_full(client, "bench-warm", 3).await;
            let mut s = harness::example_session("demo.yaml", &format!("w{i}")).unwrap();
            s.spec.worker_tier = "bench-warm".into();
            warm.push(startup::time_to_ready(client, ns, &s, Duration::from_secs(180)).await);
            let s = harness::example_session("demo.yaml", &format!("c{i}")).unwrap();
            cold.push(startup::time_to_ready(client, ns, &s, Duration::from_secs(180)).await);
            for name in [format!("w{i}"), format!("c{i}")] {
                sessions
                    .delete(&name, &DeleteParams::default())
                    .await
                    .unwrap();
            }
            println!("  {i}: warm {:?}, cold {:?}", warm[i], cold[i]);
        }
        let (w50, w95) = summary("warm (adopted)", warm);
        let (c50, c95) = summary("cold", cold);
        println!(
            "ratios warm/cold: p50 {:.3}, p95 {:.3}",
            w50.as_secs_f64() / c50.as_secs_f64(),
            w95.as_secs_f64() / c95.as_secs_f64()
        );
    })
    .await;
}

/// Waits until the tier reports its pool full and ready.
async fn pool_full(client: &kube::Client, tier: &str, size: u32) {
    let tiers: Api<kube_harness_crds::SandboxTier> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let t = tiers.get(tier).await.unwrap();
        if t.status.and_then(|s| s.warm_ready) == Some(size) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the warm pool of {tier} never filled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
