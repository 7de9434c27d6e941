//! The scale bench's objects and waits (tests/e2e/src/bin/scale-bench.rs): kwok's fake nodes
//! (tests/cluster/kwok.sh), a level-0 tier whose pods land there, a StorageClass with PVs bound in
//! advance to the sessions' workspace claims (no provisioner and no kubelet needed), sessions,
//! bare pods on the same nodes as the baseline, and watches that note when each object is Ready.

use crate::wait::{self, Check};
use crate::{harness, E2eError, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeSpec, Pod, PodSecurityContext, PodSpec,
    SeccompProfile, SecurityContext, Toleration, VolumeResourceRequirements,
};
use k8s_openapi::api::core::v1::{HostPathVolumeSource, Node};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use kube_harness_crds::condition::{is_true, types};
use kube_harness_crds::tier::SandboxTierSpec;
use kube_harness_crds::{HarnessSession, SandboxTier};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Label and taint of kwok's fake nodes (tests/cluster/kwok.sh).
pub const FAKE_NODE: (&str, &str) = ("kwok.x-k8s.io/node", "fake");
/// Label on every cluster-scoped object one bench run creates (value: the run's id).
pub const RUN_LABEL: &str = "kubeharness.dev/scale-bench";
/// Label of every object the operator creates for a session.
pub const MANAGED: &str = "app.kubernetes.io/managed-by=kube-harness-operator";

/// Names of kwok's fake nodes that are Ready; an error naming the fix when there are none.
pub async fn fake_nodes(client: &Client) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let ready: Vec<String> = nodes
        .list(&ListParams::default().labels(&format!("{}={}", FAKE_NODE.0, FAKE_NODE.1)))
        .await?
        .items
        .into_iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|n| n.name_any())
        .collect();
    if ready.is_empty() {
        return Err(E2eError::Failed(
            "no Ready kwok node (label kwok.x-k8s.io/node=fake): run tests/cluster/kwok.sh build && tests/cluster/kwok.sh start".into(),
        ));
    }
    Ok(ready)
}

fn fake_toleration() -> Toleration {
    Toleration {
        key: Some(FAKE_NODE.0.into()),
        operator: Some("Equal".into()),
        value: Some(FAKE_NODE.1.into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    }
}

fn run_meta(name: &str, run: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(BTreeMap::from([(RUN_LABEL.into(), run.into())])),
        ..ObjectMeta::default()
    }
}

/// A level-0 tier whose worker pods select and tolerate the fake nodes.
pub fn fake_node_tier(name: &str, run: &str) -> SandboxTier {
    let spec: SandboxTierSpec = serde_json::from_value(serde_json::json!({
        "level": 0,
        "template": {
            "image": "localhost/kube-harness/worker:dev",
            "imagePullPolicy": "Never",
            "nodeSelector": {FAKE_NODE.0: FAKE_NODE.1},
            "tolerations": [fake_toleration()],
        },
        "capabilities": ["python", "javascript"],
        "namespaceSelector": {},
    }))
    .expect("a valid SandboxTier spec");
    let mut tier = SandboxTier::new(name, spec);
    tier.metadata.labels = run_meta(name, run).labels;
    tier
}

/// A StorageClass without a provisioner: its claims bind only to PVs made for them.
pub fn storage_class(name: &str, run: &str) -> StorageClass {
    StorageClass {
        metadata: run_meta(name, run),
        provisioner: "kubernetes.io/no-provisioner".into(),
        volume_binding_mode: Some("Immediate".into()),
        reclaim_policy: Some("Retain".into()),
        ..StorageClass::default()
    }
}

/// A PV of `class` bound in advance (spec.claimRef) to claim `ns/claim`. Its hostPath is never
/// mounted (no kubelet runs the pods).
pub fn prebound_pv(name: &str, run: &str, class: &str, ns: &str, claim: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: run_meta(name, run),
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            persistent_volume_reclaim_policy: Some("Retain".into()),
            storage_class_name: Some(class.into()),
            claim_ref: Some(ObjectReference {
                namespace: Some(ns.into()),
                name: Some(claim.into()),
                ..ObjectReference::default()
            }),
            host_path: Some(HostPathVolumeSource {
                path: format!("/nonexistent/kube-harness-scale/{name}"),
                type_: None,
            }),
            ..PersistentVolumeSpec::default()
        }),
        ..PersistentVolume::default()
    }
}

/// The workspace claim the operator would make for session `session` of [`session`] (same spec:
/// a claim's spec cannot change), made in advance and naming its PV. On this cluster the PV
/// controller took minutes to bind some of 2,000 claims the operator made, even to PVs bound to
/// them in advance ("Error finding provisioning plugin"): binding them before the timed part keeps
/// the controller-manager's PV binder out of what the bench measures.
///
/// The claim carries `pv.kubernetes.io/bind-completed` from the start: the scheduler counts a
/// claim as bound only with it (`isPVCFullyBound`), and without it the PV controller "binds" the
/// claim again at its 20 requests/s, one PUT each. In a run where the binder was still behind,
/// sessions sat `Unschedulable` waiting for it.
pub fn bound_claim(session: &str, class: &str, pv: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(format!("{session}-workspace")),
            annotations: Some(BTreeMap::from([(
                "pv.kubernetes.io/bind-completed".into(),
                "yes".into(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(class.into()),
            volume_name: Some(pv.into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// Marks a PV made by [`prebound_pv`] and its claim made by [`bound_claim`] Bound through their
/// status subresources, as the PV controller would once it gets to them. That controller runs at
/// the controller-manager's client rate (20 requests/s by default): it bound about 2.4 pairs a
/// second here, 14 minutes for 2,000. The binding is consistent (the PV names the claim, the claim
/// the PV), so the controller has nothing to undo when it syncs them.
///
/// The PV's claimRef gets the claim's uid first: a claimRef without one reads as "pre-bound,
/// waiting for the claim" to the controller, which then set the PV Available again and the
/// scheduler found the claim unbound.
pub async fn mark_bound(client: &Client, ns: &str, pv: &str, claim: &str) -> Result<()> {
    let params = PatchParams::default();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let uid = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(claim)
        .await?
        .uid()
        .unwrap_or_default();
    pvs.patch(
        pv,
        &params,
        &Patch::Merge(json!({"spec": {"claimRef": {"uid": uid}}})),
    )
    .await?;
    pvs.patch_status(
        pv,
        &params,
        &Patch::Merge(json!({"status": {"phase": "Bound"}})),
    )
    .await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    claims
        .patch_status(
            claim,
            &params,
            &Patch::Merge(json!({"status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"}
            }})),
        )
        .await?;
    Ok(())
}

/// The demo session (examples/demo.yaml) as `name`, on `tier`, its workspace of `class`.
pub fn session(name: &str, tier: &str, class: &str) -> Result<HarnessSession> {
    let mut s = harness::example_session("demo.yaml", name)?;
    s.spec.worker_tier = tier.into();
    s.spec.workspace.storage_class_name = Some(class.into());
    Ok(s)
}

/// The baseline: a bare pod on a fake node, labelled `kubeharness.dev/scale-bare=true`.
pub fn bare_pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "kubeharness.dev/scale-bare".into(),
                "true".into(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            // What the restricted Pod Security Standard (enforced in the bench's namespace) asks.
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            node_selector: Some(BTreeMap::from([(FAKE_NODE.0.into(), FAKE_NODE.1.into())])),
            tolerations: Some(vec![fake_toleration()]),
            automount_service_account_token: Some(false),
            containers: vec![Container {
                name: "main".into(),
                image: Some("localhost/kube-harness/worker:dev".into()),
                image_pull_policy: Some("Never".into()),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        add: None,
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Creates `obj`, retrying what a loaded API server answers (429, 5xx, a dropped connection) up
/// to 8 times with a growing pause; an AlreadyExists after a retry means the earlier try landed.
pub async fn create_retrying<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: Resource + Clone + k8s_openapi::serde::Serialize + DeserializeOwned + Debug,
{
    let mut attempt = 0u32;
    loop {
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt > 0 => return Ok(()),
            Err(e) if attempt < 8 && retryable(&e) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Runs `make(i)` for `0..n` with at most `concurrency` at once; the first error ends the run.
pub async fn bounded<F, Fut>(n: usize, concurrency: usize, make: F) -> Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut results = futures::stream::iter(0..n)
        .map(make)
        .buffer_unordered(concurrency.max(1));
    while let Some(r) = results.next().await {
        r?;
    }
    Ok(())
}

/// When each object of a watched kind was first seen meeting a predicate.
pub struct FirstSeen {
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FirstSeen {
    /// Watches `api` (with `config`) and notes the first time each object satisfies `ready`.
    pub fn start<K>(api: Api<K>, config: watcher::Config, ready: fn(&K) -> bool) -> Self
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                let mut events = watcher::watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    if let Ok(Event::Apply(obj) | Event::InitApply(obj)) = event {
                        if ready(&obj) {
                            let mut seen = seen.lock().unwrap();
                            seen.entry(obj.name_any()).or_insert_with(Instant::now);
                        }
                    }
                }
            }
        });
        FirstSeen { seen, task }
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The first-seen times, sorted.
    pub fn times(&self) -> Vec<Instant> {
        let mut t: Vec<Instant> = self.seen.lock().unwrap().values().copied().collect();
        t.sort();
        t
    }

    /// Waits until `n` objects were seen ready, at most `timeout`.
    pub async fn wait_for(&self, n: usize, what: &str, timeout: Duration) -> Result<()> {
        wait::until(what, timeout, || async {
            let c = self.count();
            Ok(if c >= n {
                Check::Done(())
            } else {
                Check::Pending(format!("{c} of {n}"))
            })
        })
        .await
    }
}

impl Drop for FirstSeen {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn session_ready(s: &HarnessSession) -> bool {
    s.status
        .as_ref()
        .is_some_and(|st| is_true(&st.conditions, types::READY))
}

pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Objects left in `ns`: HarnessSessions, and the operator's pods, PVCs, Secrets, Services and
/// NetworkPolicies (by its managed-by label), as `(kind, count)`.
pub async fn children_left(client: &Client, ns: &str) -> Result<Vec<(&'static str, usize)>> {
    use k8s_openapi::api::core::v1::{Secret, Service};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let managed = ListParams::default().labels(MANAGED);
    let all = ListParams::default();
    Ok(vec![
        ("sessions", count::<HarnessSession>(client, ns, &all).await?),
        ("pods", count::<Pod>(client, ns, &managed).await?),
        (
            "pvcs",
            count::<PersistentVolumeClaim>(client, ns, &managed).await?,
        ),
        ("secrets", count::<Secret>(client, ns, &managed).await?),
        ("services", count::<Service>(client, ns, &managed).await?),
        (
            "networkpolicies",
            count::<NetworkPolicy>(client, ns, &managed).await?,
        ),
    ])
}

/// How many objects of `K` in `ns` match `lp` (a metadata-only list).
pub async fn count<K>(client: &Client, ns: &str, lp: &ListParams) -> Result<usize>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    Ok(api.list_metadata(lp).await?.items.len())
}

/// Deletes every cluster-scoped object of run `run` (tier, StorageClass, PVs), reporting what it
/// could not delete instead of failing.
pub async fn delete_run_objects(client: &Client, run: &str) {
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    if let Err(e) = delete_all(&Api::<SandboxTier>::all(client.clone()), &lp, 4).await {
        eprintln!("warning: deleting the run's SandboxTier: {e}");
    }
    if let Err(e) = delete_all(&Api::<PersistentVolume>::all(client.clone()), &lp, 16).await {
        eprintln!("warning: deleting the run's PersistentVolumes: {e}");
    }
    if let Err(e) = delete_all(&Api::<StorageClass>::all(client.clone()), &lp, 4).await {
        eprintln!("warning: deleting the run's StorageClass: {e}");
    }
}

/// The names of the objects of `api` that match `lp`, listed in pages of 500.
pub async fn names<K>(api: &Api<K>, lp: &ListParams) -> Result<Vec<String>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut out = Vec::new();
    let mut page = lp.clone().limit(500);
    loop {
        let list = api.list_metadata(&page).await?;
        out.extend(list.items.iter().map(|o| o.name_any()));
        match list.metadata.continue_ {
            Some(token) if !token.is_empty() => page = page.continue_token(&token),
            _ => return Ok(out),
        }
    }
}

/// Deletes every object of `api` that matches `lp`, one request each, at most `concurrency` at
/// once: a delete-collection of thousands outlives the API server's request timeout on a small
/// cluster. Retries what a loaded API server answers; already gone is fine. Returns how many it
/// deleted.
pub async fn delete_all<K>(api: &Api<K>, lp: &ListParams, concurrency: usize) -> Result<usize>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let names = names(api, lp).await?;
    let n = names.len();
    bounded(n, concurrency, |i| {
        let name = names[i].clone();
        async move {
            let mut attempt = 0u32;
            loop {
                match api.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => return Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
                    Err(e) if attempt < 8 && retryable(&e) => {
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    })
    .await?;
    Ok(n)
}

/// Waits until `n` claims in `ns` are Bound; returns how long that took.
pub async fn wait_claims_bound(
    client: &Client,
    ns: &str,
    n: usize,
    timeout: Duration,
) -> Result<Duration> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let mut bound = 0;
        let mut page = ListParams::default().limit(500);
        loop {
            let list = api.list(&page).await?;
            bound += list
                .items
                .iter()
                .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
                .count();
            match list.metadata.continue_ {
                Some(token) if !token.is_empty() => page = page.continue_token(&token),
                _ => break,
            }
        }
        if bound >= n {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return Err(E2eError::Timeout {
                what: format!("{n} claims in {ns} Bound"),
                secs: timeout.as_secs(),
                last: format!("{bound} Bound"),
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Sessions in `ns` whose Ready condition is True, by a paginated list (a cross-check of the
/// watch).
pub async fn sessions_ready(client: &Client, ns: &str) -> Result<usize> {
    let api: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
    let mut ready = 0;
    let mut page = ListParams::default().limit(500);
    loop {
        let list = api.list(&page).await?;
        ready += list.items.iter().filter(|s| session_ready(s)).count();
        match list.metadata.continue_ {
            Some(token) if !token.is_empty() => page = page.continue_token(&token),
            _ => return Ok(ready),
        }
    }
}
