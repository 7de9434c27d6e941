//! Issue 30: one tenant floods every service the tenants share with slow bodies
//! (`tests/attacks/slow_bodies.py`: 1,000 connections, each sending a request head and then a body
//! byte every 4 s, for 60 s), with a token of its own where the service takes one; meanwhile
//! another tenant's session runs its commands and escalates to Tier-1, and its latencies are
//! printed against the same work with no flood, in the same run. Before the fixes, such a flood
//! held the session log for every tenant (503 `session-log-unavailable` on every exec) and made
//! other sessions' escalations time out through the tier API.

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::LogParams;
use kube::{Api, Client};
use kube_harness_crds::HarnessSession;
use kube_harness_e2e::harness::{self, cli_exec, release_namespace};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::pods::{create_restricted, wait_succeeded};
use kube_harness_e2e::stats::{env_usize, summary};
use kube_harness_e2e::tiers::{self, toolchain_tier, with_tier};
use serde_json::json;
use std::time::{Duration, Instant};

const READY: Duration = Duration::from_secs(180);
const SLOW_BODIES: &str = include_str!("../../attacks/slow_bodies.py");

/// The victim's work in one phase: `EXECS` plain commands and `ESCALATIONS` escalated ones, each
/// timed; every one must succeed.
const EXECS: usize = 10;
const ESCALATIONS: usize = 3;

struct Phase {
    execs: Vec<Duration>,
    escalations: Vec<Duration>,
}

/// The other tenant's work: plain commands, then commands that escalate to the tier (and end
/// their turn, so each escalation provisions a Tier-1 pod of its own).
fn victim_work(ns: &str) -> Phase {
    let mut phase = Phase {
        execs: Vec::new(),
        escalations: Vec::new(),
    };
    for i in 0..EXECS {
        let started = Instant::now();
        let (code, out, err) = cli_exec(ns, "victim", &format!("echo ok{i}"), &[]);
        assert_eq!((code, out.trim()), (0, format!("ok{i}").as_str()), "{err}");
        phase.execs.push(started.elapsed());
    }
    for _ in 0..ESCALATIONS {
        let started = Instant::now();
        let (code, out, err) = cli_exec(ns, "victim", "git --version", &["--end-turn"]);
        assert_eq!(code, 0, "escalation: {out}{err}");
        assert!(out.starts_with("git version"), "{out}{err}");
        phase.escalations.push(started.elapsed());
    }
    phase
}

/// A service the tenants share, as the flood addresses it.
struct Target {
    name: &'static str,
    host: String,
    port: &'static str,
    path: String,
    token: String,
    /// A Content-Length the service accepts, so it waits for the body (a longer one is 413 at
    /// once).
    length: &'static str,
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn one_tenants_slow_body_floods_leave_another_tenants_exec_and_escalation_working() {
    let connections = env_usize("KH_FLOOD_CONNECTIONS", 1000).to_string();
    let seconds = env_usize("KH_FLOOD_SECONDS", 60).to_string();
    with_namespace("flood-b", |client, ns_b| async move {
        with_tier(&client, toolchain_tier("e2e-flood"), || async {
            tiers::session(&client, &ns_b, "victim", "e2e-flood").await;
            with_namespace("flood-a", |client, ns_a| async move {
                harness::demo(&client, &ns_a, "attacker", READY).await;
                let targets = targets(&client, &ns_a, "attacker").await;
                let ns = ns_b.clone();
                let baseline = tokio::task::spawn_blocking(move || victim_work(&ns))
                    .await
                    .unwrap();
                let mut report = vec![("no flood".to_string(), baseline)];
                for target in &targets {
                    let pod = format!("flood-{}", target.name.replace(' ', "-").to_lowercase());
                    create_restricted(
                        &client,
                        &ns_a,
                        &pod,
                        // The labels the shared services admit their clients by (a worker
                        // pod's): any tenant can put them on its own pods (docs/network.md),
                        // and the attack did.
                        json!({
                            "app.kubernetes.io/managed-by": "kube-harness-operator",
                            "kubeharness.dev/role": "worker",
                        }),
                        &[
                            "python3", "-c", SLOW_BODIES, &target.host, target.port,
                            &target.path, &target.token, &connections, &seconds, target.length,
                        ],
                        None,
                    )
                    .await;
                    // Let the flood reach its connections first.
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    let ns = ns_b.clone();
                    let phase = tokio::task::spawn_blocking(move || victim_work(&ns))
                        .await
                        .unwrap();
                    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns_a);
                    wait_succeeded(&pods, &pod, Duration::from_secs(180))
                        .await
                        .unwrap_or_else(|e| panic!("the flood pod {pod}: {e}"));
                    let log = pods.logs(&pod, &LogParams::default()).await.unwrap();
                    println!("flood of the {}: {}", target.name, log.trim());
                    report.push((format!("{} flood", target.name), phase));
                }
                println!(
                    "\nthe other tenant's latencies ({EXECS} commands, {ESCALATIONS} escalations each)"
                );
                for (label, phase) in report {
                    summary(&format!("exec, {label}"), phase.execs);
                    let (_, p95) = summary(&format!("escalation, {label}"), phase.escalations);
                    assert!(p95 < Duration::from_secs(60), "{label}: escalation p95 {p95:?}");
                }
            })
            .await;
        })
        .await;
    })
    .await;
}

/// The session log (with the attacker session's own scoped token, on its own run, as the attack
/// did), the ledger and the tier API (with the attacker's worker token), by Service name.
async fn targets(client: &Client, ns: &str, session: &str) -> Vec<Target> {
    let release = release_namespace();
    let secret: Secret = Api::namespaced(client.clone(), ns)
        .get(&format!("{session}-token"))
        .await
        .unwrap();
    let data = secret.data.unwrap_or_default();
    let key = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .unwrap_or_else(|| "-".into())
    };
    let uid = Api::<HarnessSession>::namespaced(client.clone(), ns)
        .get(session)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap_or_default();
    let run = format!("{ns}:{uid}");
    vec![
        Target {
            name: "session log",
            host: format!("kube-harness-session-log.{release}.svc"),
            port: "8080",
            path: format!("/v1/runs/{}/events", run.replace(':', "%3A")),
            token: key("session-log-token"),
            length: "100000",
        },
        Target {
            name: "ledger",
            host: format!("kube-harness-ledger.{release}.svc"),
            port: "8080",
            path: "/v1/tasks".into(),
            token: "-".into(),
            length: "1000",
        },
        Target {
            name: "tier API",
            host: format!("kube-harness-operator.{release}.svc"),
            port: "8081",
            path: format!("/v1/namespaces/{ns}/sessions/{session}/sandboxes"),
            token: key("token"),
            length: "1000",
        },
    ]
}
