//! The in-cluster data path (issue 14): a pod reaches its session at `status.address` (the
//! session's Service) with `kube-harness exec`, and the route's round trip is measured against
//! the pod IP, the API server's port-forward and `kubectl exec`, from the same pod in the same
//! run, interleaved. Then the Python and TypeScript SDKs run their suites with no kubectl on PATH:
//! attaching to a session, and creating and deleting sessions of their own.

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DynamicObject, LogParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use kube_harness_e2e::harness::{self, repo_root};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::pods::wait_succeeded;
use kube_harness_e2e::stats::{env_usize, summary};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

const READY: Duration = Duration::from_secs(180);
const WORKER_IMAGE: &str = "localhost/kube-harness/worker:dev";

/// A ServiceAccount in `ns` allowed what `kube-harness exec` and `kubectl exec` need there.
async fn client_account(client: &Client, ns: &str, name: &str) {
    let apply = |api_version: &str, kind: &str, plural: &str, body: Value| {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let object: DynamicObject = serde_json::from_value(body).unwrap();
        async move { api.create(&PostParams::default(), &object).await.unwrap() }
    };
    apply(
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
    )
    .await;
    apply("rbac.authorization.k8s.io/v1", "Role", "roles", json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["kubeharness.dev"], "resources": ["harnesssessions"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["secrets", "pods"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods/portforward", "pods/exec"], "verbs": ["create", "get"]},
        ]})).await;
    apply("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})).await;
}

/// Milliseconds of the samples, as durations.
fn durations(ms: &[f64]) -> Vec<Duration> {
    ms.iter()
        .map(|m| Duration::from_secs_f64(m / 1e3))
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_pod_reaches_its_session_at_the_address_faster_than_through_the_api_server() {
    with_namespace("access", |client, ns| async move {
        harness::apply_example(&client, &ns, "demo.yaml", "acc").await.unwrap();
        let session = harness::wait_ready(&client, &ns, "acc", READY).await.unwrap();
        let status = session.status.unwrap();
        assert_eq!(
            status.address.as_deref(),
            Some(format!("http://acc-worker.{ns}.svc:8080").as_str()),
            "status.address names the session's Service"
        );
        let service = Api::<Service>::namespaced(client.clone(), &ns)
            .get("acc-worker")
            .await
            .unwrap();
        let owner = &service.metadata.owner_references.unwrap()[0];
        assert_eq!(owner.kind, "HarnessSession");

        // The client pod: the default access rule admits the labelled pods of the namespace.
        client_account(&client, &ns, "agent").await;
        let rounds = env_usize("KH_ACCESS_ROUNDS", 5);
        let per_round = env_usize("KH_ACCESS_PER_ROUND", 40);
        let kubectl_per_round = env_usize("KH_ACCESS_KUBECTL_PER_ROUND", 6);
        let script = format!(
            r#"set -eu
out=$(kube-harness exec acc -- 'echo in-cluster; hostname')
echo "EXEC $out" | tr '\n' ' '; echo
echo "AUTO $(kube-harness ping acc --route auto --count 3 --json)"
for r in $(seq {rounds}); do
  echo "PING $(kube-harness ping acc --route address,pod-ip,port-forward --count {per_round} --json)"
  for i in $(seq {kubectl_per_round}); do
    s=$(date +%s%N); /kh/kubectl exec acc-worker -- true; e=$(date +%s%N)
    echo "KUBECTL $(( (e - s) / 1000 ))"
  done
done"#
        );
        let kubectl = std::env::var("KH_KUBECTL").expect("KH_KUBECTL names the cluster's kubectl");
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "agent", "labels": {"kubeharness.dev/client": "true"}},
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": "agent",
                "terminationGracePeriodSeconds": 2,
                "containers": [{
                    "name": "main", "image": WORKER_IMAGE, "imagePullPolicy": "IfNotPresent",
                    "command": ["bash", "-c", script],
                    "volumeMounts": [{"name": "kubectl", "mountPath": "/kh/kubectl", "readOnly": true}],
                }],
                "volumes": [{"name": "kubectl", "hostPath": {"path": kubectl, "type": "File"}}],
            }
        }))
        .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let done = wait_succeeded(&pods, "agent", Duration::from_secs(600)).await;
        let logs = pods.logs("agent", &LogParams::default()).await.unwrap_or_default();
        done.unwrap_or_else(|e| panic!("{e}\nlogs:\n{logs}"));

        let line = |tag: &'static str| -> Vec<&str> {
            logs.lines()
                .filter_map(|l| l.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')))
                .collect()
        };
        let exec = line("EXEC").first().copied().unwrap_or_else(|| panic!("no EXEC line:\n{logs}"));
        assert!(exec.starts_with("in-cluster acc-worker"), "exec from the pod: {exec}");
        let auto: Value = serde_json::from_str(line("AUTO")[0]).unwrap();
        assert_eq!(auto["routes"][0]["route"], "auto (address)", "in a pod, exec takes the address: {auto}");

        let mut by_route: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
        for l in line("PING") {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            for r in v["routes"].as_array().unwrap() {
                let samples = r["samplesMs"].as_array().unwrap().iter().map(|s| s.as_f64().unwrap());
                by_route.entry(r["route"].as_str().unwrap().into()).or_default().extend(samples);
            }
        }
        let kubectl_ms: Vec<f64> = line("KUBECTL").into_iter().map(|us| us.parse::<f64>().unwrap() / 1e3).collect();
        assert_eq!(kubectl_ms.len(), rounds * kubectl_per_round, "{logs}");
        println!("exec of `true` from a pod, {rounds} interleaved rounds:");
        let mut p50 = std::collections::BTreeMap::new();
        for (route, ms) in &by_route {
            assert_eq!(ms.len(), rounds * per_round, "{route}");
            p50.insert(route.clone(), summary(&format!("  {route} (kept connection)"), durations(ms)).0);
        }
        summary("  kubectl exec (new process each)", durations(&kubectl_ms));
        assert!(
            p50["address"] < p50["port-forward"],
            "the in-cluster address is faster than the API server's port-forward: {p50:?}"
        );
    })
    .await;
}

/// The Python and TypeScript SDKs run their cluster suites with no `kubectl` on PATH, through the
/// Kubernetes API only: each attaches to a session made here (an in-process port-forward) and
/// creates sessions of its own, deleting them, and everything they own, on exit, also when the
/// block raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster with the chart installed"]
async fn the_python_and_typescript_sdks_make_and_drive_sessions_on_the_cluster() {
    with_namespace("sdk", |client, ns| async move {
        harness::demo(&client, &ns, "sdk", READY).await;
        let bin = std::env::var("KH_KUBE_HARNESS_BIN").expect("KH_KUBE_HARNESS_BIN");
        let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
        let programs = tempfile::tempdir().unwrap();
        let path = harness::path_without("kubectl", programs.path());
        let run = |mut cmd: Command, what: &'static str, ran_all: fn(&str) -> bool| async move {
            let out = tokio::task::spawn_blocking(move || cmd.output())
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let text = format!("{}{}", harness::stdout(&out), harness::stderr(&out));
            println!("{what}:\n{text}");
            assert!(out.status.success(), "{what} failed:\n{text}");
            assert!(ran_all(&text), "{what} skipped tests or ran none:\n{text}");
        };
        let sdk = |dir: &str, file: &str| {
            let mut cmd = Command::new("bash");
            cmd.arg(repo_root().join("clients").join(dir).join("test.sh"))
                .arg(file)
                .env("KH_BIN", &bin)
                .env("PATH", &path)
                .env("KUBECONFIG", &kubeconfig)
                .env("KH_E2E_NO_KUBECTL", "1")
                .env("KH_E2E_SESSION", "sdk")
                .env("KH_E2E_NAMESPACE", &ns)
                .env_remove("KH_KUBECTL");
            cmd
        };
        run(
            sdk("python", "tests/test_cluster.py"),
            "Python SDK cluster suite",
            |t| t.contains(" passed") && !t.contains("skipped"),
        )
        .await;
        run(
            sdk("typescript", "test/cluster.test.js"),
            "TypeScript SDK cluster suite",
            |t| t.contains("# skipped 0") && t.contains("# fail 0") && !t.contains("# pass 0"),
        )
        .await;

        // `kube-harness trace` and `doctor` read the session's log through its worker: the
        // commands the SDKs ran are there, in order, and no dispose failed.
        let (code, _, err) =
            harness::cli_exec(&ns, "sdk", "echo traced-by-the-cli", &["--end-turn"]);
        assert_eq!(code, 0, "{err}");
        let trace =
            harness::kube_harness(&["trace", "-n", &ns, "sdk", "--format", "json"]).unwrap();
        assert!(trace.status.success(), "{}", harness::stderr(&trace));
        let lines: Vec<Value> = harness::stdout(&trace)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let started: Vec<&str> = lines
            .iter()
            .filter(|e| e["type"] == "harness.runtime.command.started")
            .filter_map(|e| e["data"]["command"].as_str())
            .collect();
        assert!(started.len() >= 3, "{started:?}");
        assert_eq!(
            started.last(),
            Some(&"echo traced-by-the-cli"),
            "{started:?}"
        );
        let seqs: Vec<u64> = lines.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "in the log's order: {seqs:?}"
        );
        assert!(
            lines.iter().any(|e| e["type"] == "harness.turn.usage"),
            "turn ends are logged"
        );
        let doctor = harness::kube_harness(&["doctor", "-n", &ns, "sdk"]).unwrap();
        let said = harness::stdout(&doctor);
        assert!(
            doctor.status.success(),
            "{said}{}",
            harness::stderr(&doctor)
        );
        assert!(said.contains("0 failure(s)"), "{said}");
    })
    .await;
}
