//! GitOps with Flux on a real cluster: the fleet of `examples/gitops-fleet` (a namespace, a level-0
//! SandboxTier with a warm pool, three HarnessSessions and their kustomization.yaml) is pushed to a
//! git server running in the cluster, and Flux's source-controller and kustomize-controller
//! (started beside the cluster by `tests/cluster/flux.sh`, `KH_FLUX=1 tests/cluster/up.sh`) apply
//! it. Run with `--ignored` against a cluster with the chart installed and Flux up.
//!
//! One test walks the whole life of a fleet, because every phase starts from the converged fleet
//! and a converge costs minutes of pod starts on two cores: it converges (Flux's health checks,
//! `wait: true`, report it Ready), follows a commit that changes a session's toggles with no drift
//! (a second sync changes nothing; the operator owns no field of `spec`), prunes a session removed
//! from git with all its children, and goes through a commit applied while the operator's pod is
//! deleted without any change to what the next sync sees.

use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, Pod, Secret, Service, ServiceSpec,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt};
use kube_harness_crds::condition::Condition;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_e2e::harness;
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::wait::{self, Check};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Flux's field manager on the objects it applies.
const FLUX_MANAGER: &str = "kustomize-controller";
/// The operator's field manager (operator/src/labels.rs).
const OPERATOR_MANAGER: &str = "kube-harness-operator";
const GIT_IMAGE: &str = "localhost/kube-harness/git-server:dev";
/// A fleet converges: warm pods, three workers, Flux's apply and health checks.
const CONVERGE: Duration = Duration::from_secs(420);
const SYNC: Duration = Duration::from_secs(300);
const SESSIONS: [&str; 3] = ["agent-a", "agent-b", "agent-c"];

fn git_repo() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository"),
        "gitrepositories",
    )
}

fn kustomization() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

/// The example's names, made unique for this run: the fleet's namespace and its tier.
struct Names {
    fleet_ns: String,
    tier: String,
}

/// Copies examples/gitops-fleet (all but flux-sync.yaml) into `work`, renamed for this run.
fn write_fleet(work: &Path, names: &Names) {
    let src = harness::repo_root().join("examples/gitops-fleet");
    for rel in [
        "kustomization.yaml",
        "namespace.yaml",
        "tier.yaml",
        "sessions/agent-a.yaml",
        "sessions/agent-b.yaml",
        "sessions/agent-c.yaml",
    ] {
        let text = std::fs::read_to_string(src.join(rel)).unwrap();
        let text = text
            .replace("agent-fleet-tier0", &names.tier)
            .replace("agent-fleet", &names.fleet_ns);
        let to = work.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text).unwrap();
    }
}

/// Runs host `git` in `work`; panics with its stderr on failure.
fn git(work: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(work)
        .args([
            "-c",
            "user.name=kube-harness e2e",
            "-c",
            "user.email=e2e@kube-harness.invalid",
        ])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running git {args:?}: {e} (is git installed?)"));
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Commits everything in `work` and pushes it to `remote`; returns the commit's sha.
fn commit_and_push(work: &Path, remote: &str, message: &str) -> String {
    git(work, &["add", "-A"]);
    git(work, &["commit", "-q", "-m", message]);
    git(work, &["push", "-q", remote, "main"]);
    git(work, &["rev-parse", "HEAD"])
}

/// The git server: a pod of images/git-server behind a Service in `ns`; returns its base URL by
/// pod IP. Flux's controllers run on the node, which does not resolve cluster DNS names, and the
/// node's own connection to the Service's ClusterIP was refused in the first run.
async fn git_server(client: &Client, ns: &str) -> String {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "git-server", "labels": {"app": "git-server"}},
        "spec": {
            "containers": [{
                "name": "git",
                "image": GIT_IMAGE,
                "imagePullPolicy": "Never",
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
                "volumeMounts": [{"name": "repos", "mountPath": "/srv/git"}],
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]},
                    "runAsNonRoot": true,
                    "runAsUser": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"}
                }
            }],
            "volumes": [{"name": "repos", "emptyDir": {}}]
        }
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let svc = Service {
        metadata: kube::core::ObjectMeta {
            name: Some("git-server".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([("app".into(), "git-server".into())])),
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    wait::until(
        "the git server pod Ready",
        Duration::from_secs(90),
        || async {
            let p = pods.get("git-server").await?;
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
            Ok(match (ready, ip) {
                (true, Some(ip)) => Check::Done(format!("http://{ip}:8080")),
                _ => Check::Pending(format!("{:?}", p.status.map(|s| s.container_statuses))),
            })
        },
    )
    .await
    .unwrap()
}

/// The GitRepository and Kustomization of examples/gitops-fleet/flux-sync.yaml, in `ns`, cloning
/// `url`.
async fn apply_sync(client: &Client, ns: &str, url: &str) {
    let path = harness::repo_root().join("examples/gitops-fleet/flux-sync.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    for doc in text.split("\n---\n") {
        let mut v: Value = serde_yaml::from_str(doc).unwrap();
        v["metadata"]["namespace"] = json!(ns);
        let kind = v["kind"].as_str().unwrap().to_string();
        let ar = if kind == "GitRepository" {
            v["spec"]["url"] = json!(url);
            git_repo()
        } else {
            kustomization()
        };
        let obj: DynamicObject = serde_json::from_value(v).unwrap();
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("creating the {kind}: {e}"));
    }
}

fn condition<'a>(obj: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn describe(obj: &DynamicObject) -> String {
    format!(
        "generation {:?}, status {}",
        obj.metadata.generation, obj.data["status"]
    )
}

/// Asks Flux to reconcile now, as `flux reconcile` does: the `requestedAt` annotation.
async fn request_reconcile(client: &Client, ns: &str, ar: &ApiResource, token: &str) {
    let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar)
        .patch("agent-fleet", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Fetches `sha` into the GitRepository and waits until the Kustomization applied it and its
/// health checks passed (Ready True, "Applied revision: main@sha1:<sha>").
async fn sync(client: &Client, ns: &str, sha: &str, timeout: Duration) -> DynamicObject {
    request_reconcile(client, ns, &git_repo(), &format!("fetch-{sha}")).await;
    let repos = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &git_repo());
    wait::until(
        &format!("GitRepository at {sha}"),
        Duration::from_secs(120),
        || async {
            let r = repos.get("agent-fleet").await?;
            let rev = r.data["status"]["artifact"]["revision"]
                .as_str()
                .unwrap_or("");
            Ok(if rev.ends_with(sha) {
                Check::Done(())
            } else {
                Check::Pending(describe(&r))
            })
        },
    )
    .await
    .unwrap();
    applied(client, ns, sha, timeout).await
}

/// Waits until the Kustomization reports Ready True for revision `sha`.
async fn applied(client: &Client, ns: &str, sha: &str, timeout: Duration) -> DynamicObject {
    let ks = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &kustomization());
    wait::until(
        &format!("Kustomization Ready at {sha}"),
        timeout,
        || async {
            let k = ks.get("agent-fleet").await?;
            let ready = condition(&k, "Ready");
            let done = ready.is_some_and(|c| {
                c["status"] == "True" && c["message"].as_str().unwrap_or("").contains(sha)
            }) && k.data["status"]["lastAppliedRevision"]
                .as_str()
                .is_some_and(|r| r.ends_with(sha))
                && k.data["status"]["observedGeneration"].as_i64() == k.metadata.generation;
            Ok(if done {
                Check::Done(k)
            } else {
                Check::Pending(describe(&k))
            })
        },
    )
    .await
    .unwrap()
}

/// A second sync of the same revision: asks the Kustomization to reconcile again and waits until
/// it handled that request, Ready.
async fn resync(client: &Client, ns: &str, sha: &str) {
    let token = format!("again-{}", std::process::id() as u128 * 1000 + now_millis());
    request_reconcile(client, ns, &kustomization(), &token).await;
    let ks = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &kustomization());
    wait::until("the Kustomization's second sync", SYNC, || async {
        let k = ks.get("agent-fleet").await?;
        let handled = k.data["status"]["lastHandledReconcileAt"] == token.as_str();
        let ready = condition(&k, "Ready").is_some_and(|c| {
            c["status"] == "True" && c["message"].as_str().unwrap_or("").contains(sha)
        });
        Ok(if handled && ready {
            Check::Done(())
        } else {
            Check::Pending(describe(&k))
        })
    })
    .await
    .unwrap();
}

fn now_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// What a sync could change on the fleet's objects: per object, its generation and the field
/// set Flux owns (with the time of Flux's last write).
async fn fleet_state(
    client: &Client,
    names: &Names,
    sessions: &[&str],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let hs: Api<HarnessSession> = Api::namespaced(client.clone(), &names.fleet_ns);
    for name in sessions {
        let s = hs.get(name).await.unwrap();
        out.insert(
            format!("HarnessSession/{name}"),
            footprint(s.metadata.generation, s.managed_fields()),
        );
    }
    let tier = Api::<SandboxTier>::all(client.clone())
        .get(&names.tier)
        .await
        .unwrap();
    out.insert(
        format!("SandboxTier/{}", names.tier),
        footprint(tier.metadata.generation, tier.managed_fields()),
    );
    let ns = Api::<Namespace>::all(client.clone())
        .get(&names.fleet_ns)
        .await
        .unwrap();
    out.insert(
        format!("Namespace/{}", names.fleet_ns),
        format!(
            "{} {}",
            ns.resource_version().unwrap_or_default(),
            footprint(None, ns.managed_fields())
        ),
    );
    out
}

fn footprint(generation: Option<i64>, fields: &[ManagedFieldsEntry]) -> String {
    let flux: Vec<String> = fields
        .iter()
        .filter(|m| m.manager.as_deref() == Some(FLUX_MANAGER))
        .map(|m| {
            format!(
                "{:?} {:?} {:?}",
                m.operation,
                m.time.as_ref().map(|t| t.0),
                m.fields_v1
            )
        })
        .collect();
    format!("generation {generation:?}; {FLUX_MANAGER}: {flux:?}")
}

/// No field manager but Flux's owns a field of the session's `spec`; the operator's entries are
/// status and metadata only.
async fn spec_owned_by_flux_alone(client: &Client, ns: &str, name: &str) {
    let s: HarnessSession = Api::namespaced(client.clone(), ns).get(name).await.unwrap();
    let mut operator_seen = false;
    for m in s.managed_fields() {
        let manager = m.manager.as_deref().unwrap_or("");
        let fields = m
            .fields_v1
            .as_ref()
            .map(|f| f.0.clone())
            .unwrap_or(Value::Null);
        let top: Vec<&str> = fields
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        if manager == FLUX_MANAGER {
            assert!(
                top.contains(&"f:spec"),
                "Flux owns no spec field of {name}: {fields}"
            );
            continue;
        }
        assert!(
            !top.contains(&"f:spec"),
            "{manager} ({:?}, subresource {:?}) owns spec fields of {name}: {fields}",
            m.operation,
            m.subresource
        );
        if manager == OPERATOR_MANAGER {
            operator_seen = true;
            assert!(
                top.iter().all(|k| *k == "f:status" || *k == "f:metadata"),
                "the operator owns more than status and metadata of {name}: {fields}"
            );
        }
    }
    assert!(
        operator_seen,
        "no managedFields entry of {OPERATOR_MANAGER} on {name}: {:?}",
        s.managed_fields()
    );
}

/// Everything in the fleet namespace owned by the session `uid`: "Kind/name".
async fn children(client: &Client, ns: &str, uid: &str) -> Vec<String> {
    let mut out = owned::<Pod>(client, ns, uid).await;
    out.extend(owned::<PersistentVolumeClaim>(client, ns, uid).await);
    out.extend(owned::<Secret>(client, ns, uid).await);
    out.extend(owned::<Service>(client, ns, uid).await);
    out.extend(owned::<NetworkPolicy>(client, ns, uid).await);
    out.sort();
    out
}

/// The objects of kind `K` in `ns` with an owner reference to `uid`: "Kind/name".
async fn owned<K>(client: &Client, ns: &str, uid: &str) -> Vec<String>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned,
{
    Api::<K>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| o.owner_references().iter().any(|r| r.uid == uid))
        .map(|o| format!("{}/{}", K::kind(&()), o.name_any()))
        .collect()
}

async fn sessions_ready(client: &Client, names: &Names, sessions: &[&str]) {
    for name in sessions {
        let s = harness::wait_ready(client, &names.fleet_ns, name, CONVERGE)
            .await
            .unwrap();
        let status = s.status.unwrap_or_default();
        assert_eq!(
            status.observed_generation, s.metadata.generation,
            "{name} is Ready for an older spec"
        );
    }
}

/// Every session and the tier are Current for kstatus, now (no waiting): `Ready` True,
/// `Reconciling` and `Stalled` False, all for the current generation.
async fn ready_now(client: &Client, names: &Names, sessions: &[&str]) {
    fn ready(conditions: &[Condition], generation: Option<i64>) -> bool {
        let is = |type_: &str, status: &str| {
            conditions.iter().any(|c| {
                c.type_ == type_ && c.status == status && c.observed_generation == generation
            })
        };
        is("Ready", "True") && is("Reconciling", "False") && is("Stalled", "False")
    }
    let hs: Api<HarnessSession> = Api::namespaced(client.clone(), &names.fleet_ns);
    for name in sessions {
        let s = hs.get(name).await.unwrap();
        let status = s.status.clone().unwrap_or_default();
        assert!(
            ready(&status.conditions, s.metadata.generation),
            "Flux reported the fleet Ready while {name} was not: {status:?}"
        );
    }
    let tier = Api::<SandboxTier>::all(client.clone())
        .get(&names.tier)
        .await
        .unwrap();
    let status = tier.status.clone().unwrap_or_default();
    assert!(
        ready(&status.conditions, tier.metadata.generation),
        "Flux reported the fleet Ready while the tier was not: {status:?}"
    );
}

/// Deletes what the fleet left if the test did not prune it: the Kustomization (whose finalizer
/// prunes the fleet), then the fleet's namespace and tier directly.
async fn cleanup(client: &Client, ns: &str, names: &Names) {
    let ks = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &kustomization());
    let _ = ks.delete("agent-fleet", &DeleteParams::default()).await;
    let _ = wait::until(
        "the Kustomization to be gone",
        Duration::from_secs(120),
        || async {
            Ok(match ks.get_opt("agent-fleet").await? {
                None => Check::Done(()),
                Some(k) => Check::Pending(describe(&k)),
            })
        },
    )
    .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&names.fleet_ns, &DeleteParams::background())
        .await;
    let _ = Api::<SandboxTier>::all(client.clone())
        .delete(&names.tier, &DeleteParams::default())
        .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed and Flux (KH_FLUX=1 tests/cluster/up.sh)"]
async fn a_fleet_in_git_converges_follows_commits_and_prunes() {
    with_namespace("gitops", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        let names = Names {
            fleet_ns: format!("{ns}-fleet"),
            tier: format!("{ns}-tier0"),
        };
        let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(fleet_life(
            &client, &ns, &names,
        )))
        .await;
        cleanup(&client, &ns, &names).await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    })
    .await;
}

async fn fleet_life(client: &Client, ns: &str, names: &Names) {
    let base = git_server(client, ns).await;
    let remote = format!("{base}/fleet.git");
    let work_dir = tempdir();
    let work = work_dir.as_path();
    git(work, &["init", "-q", "-b", "main"]);
    write_fleet(work, names);
    let first = commit_and_push(work, &remote, "the fleet");

    // 1. Converge: Flux applies the fleet; its health checks wait for the tier and the sessions.
    let started = Instant::now();
    apply_sync(client, ns, &remote).await;
    applied(client, ns, &first, CONVERGE).await;
    eprintln!(
        "fleet converged (Flux Ready) {:?} after the sync objects were created",
        started.elapsed()
    );
    // Flux's Ready came from kstatus alone (flux-sync.yaml has no health expressions): when it
    // says Ready, every session already serves and the tier's pool is full.
    ready_now(client, names, &SESSIONS).await;
    let tier = Api::<SandboxTier>::all(client.clone())
        .get(&names.tier)
        .await
        .unwrap();
    assert!(
        tier.status.as_ref().and_then(|s| s.warm_ready).is_some(),
        "the fleet's level-0 tier reports no warm pool: {:?}",
        tier.status
    );
    for s in SESSIONS {
        spec_owned_by_flux_alone(client, &names.fleet_ns, s).await;
    }

    // 2. A commit changes agent-a's toggles: applied, served, and a second sync changes nothing.
    let a = work.join("sessions/agent-a.yaml");
    let text = std::fs::read_to_string(&a).unwrap();
    std::fs::write(
        &a,
        text.replace("python: true", "python: false")
            .replace("network: false", "network: true"),
    )
    .unwrap();
    let before: HarnessSession = Api::namespaced(client.clone(), &names.fleet_ns)
        .get("agent-a")
        .await
        .unwrap();
    let toggles = commit_and_push(work, &remote, "agent-a: no python, network on");
    sync(client, ns, &toggles, SYNC).await;
    let after: HarnessSession = Api::namespaced(client.clone(), &names.fleet_ns)
        .get("agent-a")
        .await
        .unwrap();
    assert!(
        !after.spec.runtime.python && after.spec.runtime.network,
        "{:?}",
        after.spec.runtime
    );
    assert!(after.metadata.generation > before.metadata.generation);
    sessions_ready(client, names, &SESSIONS).await;
    let once = fleet_state(client, names, &SESSIONS).await;
    resync(client, ns, &toggles).await;
    let twice = fleet_state(client, names, &SESSIONS).await;
    assert_eq!(
        once, twice,
        "the second sync of the same revision changed the fleet"
    );
    for s in SESSIONS {
        spec_owned_by_flux_alone(client, &names.fleet_ns, s).await;
    }

    // 3. agent-c leaves git: Flux prunes it, and with it everything the operator made for it.
    let c: HarnessSession = Api::namespaced(client.clone(), &names.fleet_ns)
        .get("agent-c")
        .await
        .unwrap();
    let uid = c.uid().unwrap();
    let kids = children(client, &names.fleet_ns, &uid).await;
    for kind in [
        "Pod/",
        "PersistentVolumeClaim/",
        "Secret/",
        "Service/",
        "NetworkPolicy/",
    ] {
        assert!(
            kids.iter().any(|k| k.starts_with(kind)),
            "agent-c has no {kind}: {kids:?}"
        );
    }
    std::fs::remove_file(work.join("sessions/agent-c.yaml")).unwrap();
    let k = work.join("kustomization.yaml");
    let text = std::fs::read_to_string(&k).unwrap();
    std::fs::write(&k, text.replace("  - sessions/agent-c.yaml\n", "")).unwrap();
    let pruned = commit_and_push(work, &remote, "agent-c leaves the fleet");
    sync(client, ns, &pruned, SYNC).await;
    let hs: Api<HarnessSession> = Api::namespaced(client.clone(), &names.fleet_ns);
    wait::until(
        "agent-c and its children to be gone",
        Duration::from_secs(120),
        || async {
            let left = children(client, &names.fleet_ns, &uid).await;
            let session = hs.get_opt("agent-c").await?;
            Ok(if session.is_none() && left.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!(
                    "session present: {}, children {left:?}",
                    session.is_some()
                ))
            })
        },
    )
    .await
    .unwrap();
    eprintln!("pruned agent-c and {kids:?}");

    // 4. A commit applied while the operator's pod is deleted: it converges once the operator is
    //    back, and the next sync still changes nothing.
    let b = work.join("sessions/agent-b.yaml");
    let text = std::fs::read_to_string(&b).unwrap();
    std::fs::write(&b, text.replace("javascript: true", "javascript: false")).unwrap();
    let restart = commit_and_push(work, &remote, "agent-b: no javascript");
    request_reconcile(client, ns, &git_repo(), &format!("fetch-{restart}")).await;
    let operators: Api<Pod> = Api::namespaced(client.clone(), &harness::release_namespace());
    let ops = operators
        .list(&ListParams::default().labels("app.kubernetes.io/name=kube-harness-operator"))
        .await
        .unwrap();
    assert!(!ops.items.is_empty(), "no operator pod to restart");
    for p in &ops.items {
        operators
            .delete(&p.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    eprintln!(
        "deleted operator pods {:?} mid-sync",
        ops.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    sync(client, ns, &restart, SYNC).await;
    let remaining = ["agent-a", "agent-b"];
    sessions_ready(client, names, &remaining).await;
    let b: HarnessSession = hs.get("agent-b").await.unwrap();
    assert!(!b.spec.runtime.javascript, "{:?}", b.spec.runtime);
    let once = fleet_state(client, names, &remaining).await;
    resync(client, ns, &restart).await;
    let twice = fleet_state(client, names, &remaining).await;
    assert_eq!(
        once, twice,
        "the sync after the operator's restart changed the fleet"
    );
    for s in remaining {
        spec_owned_by_flux_alone(client, &names.fleet_ns, s).await;
    }
}

/// A temporary directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn as_path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> TempDir {
    let dir =
        std::env::temp_dir().join(format!("kh-gitops-{}-{}", std::process::id(), now_millis()));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}
