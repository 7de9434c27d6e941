//! Level-0 warm pools on a real cluster (chart installed): a new session adopts a pre-started
//! worker pod with its PVC, is bound to exactly its own settings, and the pod is never handed to
//! another session; misses start cold with their reason; a template change rolls the pool. Run
//! with `--ignored` against a cluster.

use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_e2e::harness::{self, cli_exec};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::tiers::with_tier;
use kube_harness_e2e::wait::{self, Check};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const READY: Duration = Duration::from_secs(180);
const IDLE: &str = "kubeharness.dev/pool,kubeharness.dev/claimed=false";

/// A level-0 tier like the chart's `tier0`, with a warm pool of `size` in `ns`.
async fn warm_tier(client: &Client, name: &str, ns: &str, size: u32) -> SandboxTier {
    let stock = Api::<SandboxTier>::all(client.clone())
        .get("tier0")
        .await
        .expect("the chart's tier0");
    let mut spec = stock.spec.clone();
    spec.warm_pool.size = size;
    spec.warm_pool.namespaces = vec![ns.to_string()];
    SandboxTier::new(name, spec)
}

/// Idle warm pods of any tier in `ns`: (name, ready).
async fn idle(client: &Client, ns: &str) -> Vec<(String, bool)> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(IDLE))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            (p.name_any(), ready)
        })
        .collect()
}

async fn pool_ready(client: &Client, ns: &str, n: usize) -> Vec<String> {
    wait::until("the warm pool to be ready", READY, || async {
        let pods = idle(client, ns).await;
        Ok(if pods.len() == n && pods.iter().all(|(_, r)| *r) {
            Check::Done(pods.into_iter().map(|(n, _)| n).collect())
        } else {
            Check::Pending(format!("{pods:?}"))
        })
    })
    .await
    .unwrap()
}

/// The demo session on `tier`, with a skill and a denied command.
fn demo_on(name: &str, tier: &str, size: &str) -> HarnessSession {
    let mut s = harness::example_session("demo.yaml", name).unwrap();
    s.spec.worker_tier = tier.into();
    s.spec.workspace.size = size.into();
    s.spec.workspace.skills =
        vec![serde_json::from_value(json!({"configMap": "skills", "path": "review"})).unwrap()];
    s.spec.policy.deny_commands = vec!["wget".into()];
    s
}

/// [`demo_on`], created, not waited for.
async fn create_session(client: &Client, ns: &str, name: &str, tier: &str, size: &str) {
    Api::<HarnessSession>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &demo_on(name, tier, size))
        .await
        .unwrap();
}

async fn skills(client: &Client, ns: &str) {
    let cm = ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some("skills".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("SKILL.md".into(), "# Review\n".into())])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_new_session_adopts_a_warm_pod_bound_to_it_alone() {
    with_namespace("warm", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        skills(&client, &ns).await;
        let tier = warm_tier(&client, "warm-e2e", &ns, 2).await;
        with_tier(&client, tier, || async {
            let before = pool_ready(&client, &ns, 2).await;
            let started = Instant::now();
            create_session(&client, &ns, "w1", "warm-e2e", "1Gi").await;
            let s = harness::wait_ready(&client, &ns, "w1", READY)
                .await
                .unwrap();
            let took = started.elapsed();
            let status = s.status.unwrap();
            let pod = status.worker_pod.clone().unwrap();
            assert!(
                before.contains(&pod),
                "{pod} was not one of the warm pods {before:?}"
            );
            assert_eq!(
                status.workspace_claim.as_deref(),
                Some(format!("{pod}-workspace").as_str())
            );
            eprintln!("warm session Ready {took:?} after its create (client side, with polling)");

            // The pod and its PVC are the session's now, and serve its settings.
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let p = pods.get(&pod).await.unwrap();
            let owner = &p.owner_references()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str()),
                ("HarnessSession", "w1")
            );
            assert_eq!(
                p.labels()
                    .get("kubeharness.dev/session")
                    .map(String::as_str),
                Some("w1")
            );
            let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .get(&format!("{pod}-workspace"))
                .await
                .unwrap();
            assert_eq!(pvc.owner_references()[0].name, "w1");
            let no_own_pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .get_opt("w1-workspace")
                .await
                .unwrap();
            assert!(
                no_own_pvc.is_none(),
                "an adopted session makes no PVC of its own"
            );
            let (code, out, err) = cli_exec(
                &ns,
                "w1",
                "cat /.agents/review/SKILL.md && echo hi > /session/a && cat /session/a",
                &[],
            );
            assert_eq!((code, out.as_str()), (0, "# Review\nhi\n"), "{err}");
            let (code, _, err) = cli_exec(&ns, "w1", "wget http://x", &[]);
            assert_eq!(
                code, 126,
                "the session's deny list came with the adoption: {err}"
            );

            // The pool refills with new pods; the adopted one never comes back to it.
            let again = pool_ready(&client, &ns, 2).await;
            assert!(!again.contains(&pod), "{again:?}");

            // One use: deleting the session deletes its adopted pod and PVC.
            let uid = p.uid().unwrap();
            Api::<HarnessSession>::namespaced(client.clone(), &ns)
                .delete("w1", &DeleteParams::default())
                .await
                .unwrap();
            kube_harness_e2e::pods::wait_deleted(&pods, &pod, &uid, READY)
                .await
                .unwrap();
            assert!(!idle(&client, &ns).await.iter().any(|(n, _)| n == &pod));
        })
        .await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_miss_starts_cold_with_its_reason_and_a_template_change_rolls_the_pool() {
    with_namespace("warm-miss", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        skills(&client, &ns).await;
        let tier = warm_tier(&client, "warm-e2e-miss", &ns, 1).await;
        with_tier(&client, tier, || async {
            let first = pool_ready(&client, &ns, 1).await;
            // Another workspace size than the pool's: a cold start, and an Event saying why.
            create_session(&client, &ns, "big", "warm-e2e-miss", "2Gi").await;
            let s = harness::wait_ready(&client, &ns, "big", READY)
                .await
                .unwrap();
            assert_eq!(s.status.unwrap().worker_pod.as_deref(), Some("big-worker"));
            let events = Api::<Event>::namespaced(client.clone(), &ns)
                .list(&ListParams::default())
                .await
                .unwrap();
            assert!(
                events
                    .items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("WarmPoolMiss")
                        && e.message
                            .as_deref()
                            .unwrap_or("")
                            .contains("workspace-differs")),
                "no WarmPoolMiss event"
            );
            assert_eq!(
                pool_ready(&client, &ns, 1).await,
                first,
                "the pool was not touched"
            );

            // A template change: the idle pod is replaced by one built from the new template.
            let tiers: Api<SandboxTier> = Api::all(client.clone());
            let patch = json!({"spec": {"template": {"resources": {"requests": {"cpu": "20m"}}}}});
            tiers
                .patch(
                    "warm-e2e-miss",
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .unwrap();
            let rolled = wait::until("the pool to roll", READY, || async {
                let pods = idle(&client, &ns).await;
                Ok(match pods.as_slice() {
                    [(name, true)] if !first.contains(name) => Check::Done(name.clone()),
                    _ => Check::Pending(format!("{pods:?}")),
                })
            })
            .await
            .unwrap();
            let cpu = Api::<Pod>::namespaced(client.clone(), &ns)
                .get(&rolled)
                .await
                .unwrap()
                .spec
                .unwrap()
                .containers[0]
                .resources
                .clone()
                .unwrap()
                .requests
                .unwrap()["cpu"]
                .0
                .clone();
            assert_eq!(cpu, "20m");
            // Scaled to 0, the pool goes away.
            tiers
                .patch(
                    "warm-e2e-miss",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"warmPool": {"size": 0}}})),
                )
                .await
                .unwrap();
            wait::until("the pool to empty", READY, || async {
                let pods = idle(&client, &ns).await;
                Ok(if pods.is_empty() {
                    Check::Done(())
                } else {
                    Check::Pending(format!("{pods:?}"))
                })
            })
            .await
            .unwrap();
        })
        .await;
    })
    .await;
}

/// A session created with `spec.suspend: true` has had no worker yet: waking it is its first start,
/// so it adopts a warm pod like any new session.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_session_created_suspended_adopts_a_warm_pod_when_it_wakes() {
    with_namespace("warm-susp", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        skills(&client, &ns).await;
        let tier = warm_tier(&client, "warm-e2e-susp", &ns, 1).await;
        with_tier(&client, tier, || async {
            let before = pool_ready(&client, &ns, 1).await;
            let mut s = demo_on("later", "warm-e2e-susp", "1Gi");
            s.spec.suspend = true;
            let api: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
            api.create(&PostParams::default(), &s).await.unwrap();
            let asleep = harness::wait_session(&api, "later", "Hibernated", READY, |s| {
                s.status.as_ref().is_some_and(|st| {
                    st.phase == Some(kube_harness_crds::Phase::Hibernated)
                        && st.observed_generation == s.metadata.generation
                })
            })
            .await
            .unwrap()
            .status
            .unwrap();
            assert_eq!(
                asleep.workspace_claim, None,
                "no claim before a first worker"
            );
            assert!(
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                    .get_opt("later-workspace")
                    .await
                    .unwrap()
                    .is_none(),
                "a claim made for a session that has not started"
            );

            api.patch(
                "later",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"suspend": false}})),
            )
            .await
            .unwrap();
            let status = harness::wait_ready(&client, &ns, "later", READY)
                .await
                .unwrap()
                .status
                .unwrap();
            let pod = status.worker_pod.unwrap();
            assert!(
                before.contains(&pod),
                "{pod} was not the warm pod {before:?}"
            );
            let (code, out, err) = cli_exec(&ns, "later", "echo awake", &[]);
            assert_eq!((code, out.as_str()), (0, "awake\n"), "{err}");
        })
        .await;
    })
    .await;
}
