//! NetworkPolicy on the wire (issue 17): the test cluster enforces NetworkPolicy with
//! kube-network-policies (tests/cluster/network-policies.sh), so the policies the operator and the
//! chart create are exercised here by real connections. Every denial is preceded by its positive
//! control: the same connection, from a pod the policy admits (or to a target it admits),
//! succeeds. A denied connection is a connect timeout (curl exit 28, the SYN dropped), never a
//! refusal, so "the server was not there" cannot pass for "the policy held". Timeouts are short
//! (2 s connect) so a denial costs seconds.

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use kube_harness_crds::tier::SandboxTierSpec;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_e2e::harness::{self, cli_exec, kubectl, release_namespace, stderr, stdout};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::pods::{create_restricted, wait_ready};
use kube_harness_e2e::tiers::{with_tier, TOOLCHAIN};
use serde_json::json;
use std::time::Duration;

const READY: Duration = Duration::from_secs(180);
const WEB_PORT: u16 = 8000;

/// What one connection attempt saw.
#[derive(Debug, PartialEq)]
enum Reach {
    /// TCP connected (any HTTP answer, even an error status, counts).
    Connected,
    /// The connect timed out: the SYN was dropped (what a NetworkPolicy denial looks like).
    Dropped,
    /// Anything else (refused, DNS, exec failure): never what a test expects.
    Other(String),
}

/// A pod of the worker image running `command` (it has bash, curl and python3), labelled `labels`.
async fn pod(client: &Client, ns: &str, name: &str, labels: serde_json::Value, command: &[&str]) {
    let readiness = if command[0] == "python3" {
        json!({"tcpSocket": {"port": WEB_PORT}, "periodSeconds": 1})
    } else {
        json!({"exec": {"command": ["true"]}, "periodSeconds": 1})
    };
    create_restricted(client, ns, name, labels, command, Some(readiness)).await;
}

/// A client pod that only waits (commands run in it with `kubectl exec`).
async fn probe(client: &Client, ns: &str, name: &str, labels: serde_json::Value) {
    pod(client, ns, name, labels, &["sleep", "3600"]).await;
}

/// An HTTP server pod (`python3 -m http.server`) and a ClusterIP Service `name` in front of it.
async fn web(client: &Client, ns: &str, name: &str) {
    pod(
        client,
        ns,
        name,
        json!({"app": name}),
        &[
            "python3",
            "-m",
            "http.server",
            &WEB_PORT.to_string(),
            "--directory",
            "/tmp",
        ],
    )
    .await;
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": WEB_PORT, "targetPort": WEB_PORT}]},
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
}

/// Waits for the pods to be Ready; returns their IPs in the same order.
async fn ready(client: &Client, ns: &str, names: &[&str]) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut ips = Vec::new();
    for name in names {
        let p = wait_ready(&pods, name, READY)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        ips.push(p.status.and_then(|s| s.pod_ip).expect("a pod IP"));
    }
    ips
}

async fn cluster_ip(client: &Client, ns: &str, name: &str) -> String {
    Api::<Service>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("a ClusterIP")
}

/// IP of the chart's pod `app.kubernetes.io/name=<name>` in the release namespace, and its name.
async fn chart_pod(client: &Client, name: &str) -> (String, String) {
    let pod = Api::<Pod>::namespaced(client.clone(), &release_namespace())
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .unwrap_or_else(|| panic!("no {name} pod"));
    (
        pod.metadata.name.unwrap(),
        pod.status.and_then(|s| s.pod_ip).expect("a pod IP"),
    )
}

/// A TCP connection from pod `ns/pod`'s own network namespace (`kubectl exec`, curl of the
/// image, outside any sandbox) to `ip:port`.
fn from_pod(ns: &str, pod: &str, ip: &str, port: u16) -> Reach {
    let url = format!("http://{ip}:{port}/");
    let out = kubectl(&[
        "exec",
        "-n",
        ns,
        pod,
        "--",
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--connect-timeout",
        "2",
        "--max-time",
        "4",
        &url,
    ])
    .unwrap();
    match out.status.code() {
        Some(0) => Reach::Connected,
        Some(28) => Reach::Dropped,
        code => Reach::Other(format!("exit {code:?}: {} {}", stdout(&out), stderr(&out))),
    }
}

/// A TCP connection from a command in the session's sandbox (`kube-harness exec`): bash's
/// `/dev/tcp`, bounded by `timeout 3`.
fn from_sandbox(ns: &str, session: &str, ip: &str, port: u16) -> (bool, String) {
    let script = format!(
        "timeout 3 bash -c 'exec 3>/dev/tcp/{ip}/{port}' && echo connected || echo blocked"
    );
    let (code, out, err) = cli_exec(ns, session, &script, &[]);
    assert_eq!(code, 0, "the probe command itself ran: {out} {err}");
    (out.trim() == "connected", format!("{out}{err}"))
}

/// Creates the demo session under `name`, changed by `edit`, and waits for it to be Ready.
async fn session(client: &Client, ns: &str, name: &str, edit: impl FnOnce(&mut HarnessSession)) {
    harness::restrict(client, ns).await.unwrap();
    let mut s = harness::example_session("demo.yaml", name).unwrap();
    edit(&mut s);
    Api::<HarnessSession>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    harness::wait_ready(client, ns, name, READY)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

fn worker(session: &str) -> String {
    format!("{session}-worker")
}

/// Waits until `from_pod` sees `want` (a new policy or pod reaches the agent within a moment;
/// the first connection can race it), then returns; fails naming the last result.
async fn expect(ns: &str, pod: &str, ip: &str, port: u16, want: Reach, what: &str) {
    let mut last = Reach::Other("not tried".into());
    for _ in 0..5 {
        last = from_pod(ns, pod, ip, port);
        if last == want {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("{what}: {pod} -> {ip}:{port}: expected {want:?}, got {last:?}");
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_worker_with_network_off_reaches_only_the_session_log() {
    with_namespace("netoff", |client, ns| async move {
        web(&client, &ns, "web").await;
        probe(&client, &ns, "probe", json!({})).await;
        session(&client, &ns, "off", |_| {}).await;
        let ips = ready(&client, &ns, &["web", "probe"]).await;
        let (web_ip, web_svc) = (ips[0].clone(), cluster_ip(&client, &ns, "web").await);
        let log_svc = cluster_ip(&client, &release_namespace(), "kube-harness-session-log").await;
        let ledger_svc = cluster_ip(&client, &release_namespace(), "kube-harness-ledger").await;

        // Positive controls: a pod no policy selects reaches the server, by Service and by pod IP.
        for ip in [&web_svc, &web_ip] {
            expect(&ns, "probe", ip, WEB_PORT, Reach::Connected, "control").await;
        }
        // The worker pod's own network namespace: the session log is admitted...
        expect(
            &ns,
            &worker("off"),
            &log_svc,
            8080,
            Reach::Connected,
            "session log",
        )
        .await;
        // ...and nothing else: the same server, the ledger.
        for (ip, port) in [
            (&web_svc, WEB_PORT),
            (&web_ip, WEB_PORT),
            (&ledger_svc, 8080),
        ] {
            expect(&ns, &worker("off"), ip, port, Reach::Dropped, "network off").await;
        }
        // The sandbox: no inet socket at all with network off (seccomp and landlock), so not even
        // the session log; the worker itself wrote this command's events there (the exec
        // answered, and a session with a log refuses a command it cannot record).
        for (ip, port) in [(&web_svc, WEB_PORT), (&web_ip, WEB_PORT), (&log_svc, 8080)] {
            let (connected, out) = from_sandbox(&ns, "off", ip, port);
            assert!(!connected, "the sandbox reached {ip}:{port}: {out}");
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_worker_with_network_on_reaches_a_service() {
    with_namespace("neton", |client, ns| async move {
        web(&client, &ns, "web").await;
        session(&client, &ns, "on", |s| s.spec.runtime.network = true).await;
        let web_ip = ready(&client, &ns, &["web"]).await.remove(0);
        let web_svc = cluster_ip(&client, &ns, "web").await;
        // The pod's network namespace, by Service IP and pod IP.
        for ip in [&web_svc, &web_ip] {
            expect(&ns, &worker("on"), ip, WEB_PORT, Reach::Connected, "network on").await;
        }
        // The sandbox: the same connection that network off refuses, and curl by the Service's
        // DNS name (curl is linked into the tool directory only with network on).
        let (connected, out) = from_sandbox(&ns, "on", &web_svc, WEB_PORT);
        assert!(connected, "the sandbox with network on: {out}");
        let (code, out, err) = cli_exec(
            &ns,
            "on",
            &format!("curl -sS -o /dev/null -w '%{{http_code}}' --connect-timeout 2 http://web.{ns}.svc:{WEB_PORT}/"),
            &[],
        );
        assert_eq!((code, out.as_str()), (0, "200"), "curl from the sandbox: {err}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn only_the_pods_the_access_rules_admit_reach_the_worker() {
    with_namespace("netacc", |client, ns| async move {
        // `acc` admits pods labelled role=agent; `dflt` keeps the default rule (the namespace's
        // pods labelled kubeharness.dev/client=true).
        session(&client, &ns, "acc", |s| {
            s.spec.access = Some(
                serde_json::from_value(json!({
                    "clients": [{"podSelector": {"matchLabels": {"role": "agent"}}}]
                }))
                .unwrap(),
            );
        })
        .await;
        session(&client, &ns, "dflt", |_| {}).await;
        probe(&client, &ns, "agent", json!({"role": "agent"})).await;
        probe(
            &client,
            &ns,
            "client",
            json!({"kubeharness.dev/client": "true"}),
        )
        .await;
        probe(&client, &ns, "stranger", json!({})).await;
        ready(&client, &ns, &["agent", "client", "stranger"]).await;
        let acc_ip = ready(&client, &ns, &[&worker("acc")]).await.remove(0);
        let dflt_ip = ready(&client, &ns, &[&worker("dflt")]).await.remove(0);

        expect(
            &ns,
            "agent",
            &acc_ip,
            8080,
            Reach::Connected,
            "admitted by acc's rule",
        )
        .await;
        for who in ["client", "stranger"] {
            expect(
                &ns,
                who,
                &acc_ip,
                8080,
                Reach::Dropped,
                "not admitted by acc's rule",
            )
            .await;
        }
        expect(
            &ns,
            "client",
            &dflt_ip,
            8080,
            Reach::Connected,
            "admitted by the default rule",
        )
        .await;
        for who in ["agent", "stranger"] {
            expect(
                &ns,
                who,
                &dflt_ip,
                8080,
                Reach::Dropped,
                "not admitted by the default rule",
            )
            .await;
        }
        // A pod with the admitted label in another namespace: the rule's peers are pod selectors
        // of the session's namespace only.
        let acc_ip2 = acc_ip.clone();
        with_namespace("netacc2", |client, other| async move {
            probe(&client, &other, "agent", json!({"role": "agent"})).await;
            ready(&client, &other, &["agent"]).await;
            expect(
                &other,
                "agent",
                &acc_ip2,
                8080,
                Reach::Dropped,
                "another namespace",
            )
            .await;
        })
        .await;
    })
    .await;
}

/// A level-1 toolchain tier with `egress`, no pool, pods deleted at the end of their turn.
fn tier(name: &str, egress: serde_json::Value) -> SandboxTier {
    let spec: SandboxTierSpec = serde_json::from_value(json!({
        "level": 1,
        "template": {"image": TOOLCHAIN, "imagePullPolicy": "Never"},
        "capabilities": ["version-control", "build-toolchain", "package-manager"],
        "egress": egress,
        "idleTimeoutSeconds": 0,
        "warmPool": {"size": 0},
        "namespaceSelector": {},
    }))
    .expect("a valid SandboxTier spec");
    SandboxTier::new(name, spec)
}

/// Connections from a Tier-1 pod: one escalating command (git makes the whole script run on the
/// session's Tier-1 pod) trying each target; "connected" or "blocked" per target, in order.
fn from_tier1(ns: &str, session: &str, targets: &[(&str, u16)]) -> Vec<String> {
    let mut script = String::from("git --version >/dev/null");
    for (ip, port) in targets {
        script.push_str(&format!(
            "; timeout 3 bash -c 'exec 3>/dev/tcp/{ip}/{port}' 2>/dev/null && echo connected || echo blocked"
        ));
    }
    let out = harness::kube_harness(&[
        "exec",
        "-n",
        ns,
        session,
        "--json",
        "--end-turn",
        "--",
        &script,
    ])
    .unwrap();
    let r: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", stdout(&out), stderr(&out)));
    assert_eq!(
        (r["exitCode"].as_i64(), r["tier"].as_i64()),
        (Some(0), Some(1)),
        "{r:#}"
    );
    r["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn tier1_egress_deny_and_allow_list_hold() {
    with_namespace("nett1", |client, ns| async move {
        web(&client, &ns, "web").await;
        web(&client, &ns, "other").await;
        let ips = ready(&client, &ns, &["web", "other"]).await;
        let (web_ip, other_ip) = (ips[0].clone(), ips[1].clone());
        let (_, log_ip) = chart_pod(&client, "kube-harness-session-log").await;
        let (_, ledger_ip) = chart_pod(&client, "kube-harness-ledger").await;
        // AllowList names the server, and the session log and ledger, whose own policies admit
        // worker pods and the operator, not Tier-1 pods: listed or not, they stay closed.
        let allow = tier(
            "e2e-net-allow",
            json!({"mode": "AllowList", "cidrs": [
                format!("{web_ip}/32"), format!("{log_ip}/32"), format!("{ledger_ip}/32"),
            ]}),
        );
        let deny = tier("e2e-net-deny", json!({"mode": "Deny"}));
        let targets = [
            (web_ip.as_str(), WEB_PORT),
            (other_ip.as_str(), WEB_PORT),
            (log_ip.as_str(), 8080),
            (ledger_ip.as_str(), 8080),
        ];
        let c = client.clone();
        with_tier(&c, allow, || async {
            with_tier(&client, deny, || async {
                let esc = |tier: &'static str| {
                    move |s: &mut HarnessSession| {
                        s.spec.escalation = Some(kube_harness_crds::session::Escalation {
                            tier: Some(tier.into()),
                        })
                    }
                };
                session(&client, &ns, "allow", esc("e2e-net-allow")).await;
                session(&client, &ns, "deny", esc("e2e-net-deny")).await;
                // Positive control: the listed server answers a Tier-1 pod of the AllowList tier;
                // what is not listed does not, nor do the chart's services.
                let got = from_tier1(&ns, "allow", &targets);
                assert_eq!(
                    got,
                    ["connected", "blocked", "blocked", "blocked"],
                    "AllowList tier"
                );
                // Deny: the same server is closed too.
                let got = from_tier1(&ns, "deny", &targets);
                assert_eq!(
                    got,
                    ["blocked", "blocked", "blocked", "blocked"],
                    "Deny tier"
                );
            })
            .await;
        })
        .await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn the_session_log_and_ledger_admit_only_their_clients() {
    with_namespace("netsvc", |client, ns| async move {
        // A worker with network on: its own egress is open, so only the services' ingress
        // policies decide.
        session(&client, &ns, "on", |s| s.spec.runtime.network = true).await;
        probe(&client, &ns, "stranger", json!({})).await;
        // A pod that claims the chart's client label without being a worker: the policies admit
        // by label, so it is admitted (docs/security-model.md: the services' tokens separate it).
        probe(
            &client,
            &ns,
            "labelled",
            json!({"app.kubernetes.io/managed-by": "kube-harness-operator"}),
        )
        .await;
        ready(&client, &ns, &["stranger", "labelled"]).await;
        let release = release_namespace();
        let (operator, _) = chart_pod(&client, "kube-harness-operator").await;
        let (_, log_ip) = chart_pod(&client, "kube-harness-session-log").await;
        let (_, ledger_ip) = chart_pod(&client, "kube-harness-ledger").await;
        for ip in [&log_ip, &ledger_ip] {
            expect(
                &ns,
                &worker("on"),
                ip,
                8080,
                Reach::Connected,
                "a worker pod",
            )
            .await;
            expect(
                &release,
                &operator,
                ip,
                8080,
                Reach::Connected,
                "the operator",
            )
            .await;
            expect(
                &ns,
                "stranger",
                ip,
                8080,
                Reach::Dropped,
                "an unlabelled pod",
            )
            .await;
        }
        // A pod of the release namespace that is not the operator: dropped too.
        let (session_log, _) = chart_pod(&client, "kube-harness-session-log").await;
        expect(
            &release,
            &session_log,
            &ledger_ip,
            8080,
            Reach::Dropped,
            "the session log pod",
        )
        .await;
        expect(
            &ns,
            "labelled",
            &log_ip,
            8080,
            Reach::Connected,
            "the client label",
        )
        .await;
    })
    .await;
}
