//! Cluster bench (issue 7): HarnessSession created → Ready (p50/p95 over KH_BENCH_SESSIONS, default
//! 20), and the exec round trip of `true` through the API server (port-forward to the worker API)
//! against `kubectl exec` of the same in the same run. Needs KUBECONFIG and the chart installed
//! (tests/cluster/install-chart.sh); KH_KUBECTL and KH_KUBE_HARNESS_BIN as for the e2e tests.
//!
//!   cargo run -p kube-harness-e2e --bin cluster-bench

use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use kube_harness_client::SessionHandle;
use kube_harness_crds::HarnessSession;
use kube_harness_e2e::harness::{self, kube_harness, kubectl};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_worker::api::model::ExecRequest;
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(label: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p95) = (percentile(&samples, 0.5), percentile(&samples, 0.95));
    println!(
        "{label:<44} n={:<3} p50 {:>9.1} ms   p95 {:>9.1} ms",
        samples.len(),
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );
    (p50, p95)
}

async fn demo_session(client: &Client, ns: &str, name: &str) -> HarnessSession {
    let mut s: HarnessSession = serde_yaml::from_str(
        &std::fs::read_to_string(harness::repo_root().join("examples/demo.yaml"))
            .expect("examples/demo.yaml"),
    )
    .expect("demo.yaml");
    s.metadata.name = Some(name.into());
    Api::<HarnessSession>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .expect("create session")
}

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
            demo_session(&client, &ns, &name).await;
            harness::wait_ready(&client, &ns, &name, Duration::from_secs(180)).await.unwrap();
            ready.push(start.elapsed());
            api.delete(&name, &DeleteParams::default()).await.unwrap();
        }
        summary("created -> Ready", ready);

        println!("\n== exec round trip of `true` ({execs} each, same worker pod, same run)");
        demo_session(&client, &ns, "rt").await;
        harness::wait_ready(&client, &ns, "rt", Duration::from_secs(180)).await.unwrap();
        let handle = SessionHandle::new(client.clone(), &ns, "rt");
        let connected = handle.connect(Duration::from_secs(60)).await.unwrap();
        let request = ExecRequest::new("true");
        connected.worker.exec(&request).await.unwrap();
        let mut api_rt = Vec::new();
        for _ in 0..execs {
            let t = Instant::now();
            let r = connected.worker.exec(&request).await.unwrap();
            assert_eq!(r.exit_code, 0);
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
            let out = kube_harness(&["exec", "-n", &ns, "rt", "--", "true"]).unwrap();
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
