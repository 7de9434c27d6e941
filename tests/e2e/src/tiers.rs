//! SandboxTiers for the Tier-1 e2e tests and the Tier-1 bench: a toolchain tier, sessions that
//! escalate to it, and what its pods look like from outside.

use crate::harness;
use crate::wait::{self, Check};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_harness_crds::tier::SandboxTierSpec;
use kube_harness_crds::{HarnessSession, SandboxTier};
use std::time::Duration;

const READY: Duration = Duration::from_secs(180);
/// The stock toolchain image (images/toolchain): git, make, gcc, nothing of kube-harness.
pub const TOOLCHAIN: &str = "localhost/kube-harness/toolchain:dev";

/// A level-1 tier on the toolchain image with no warm pool (see [`pool_in`]).
pub fn toolchain_tier(name: &str) -> SandboxTier {
    // As YAML would say it: the defaults of the CRD fill in the rest.
    let spec: SandboxTierSpec = serde_json::from_value(serde_json::json!({
        "level": 1,
        "template": {"image": TOOLCHAIN, "imagePullPolicy": "Never"},
        "capabilities": ["version-control", "build-toolchain", "package-manager"],
        "egress": {"mode": "Deny"},
        "idleTimeoutSeconds": 0,
        "warmPool": {"size": 0},
        // Granted to every namespace: each test's session is in a namespace of its own.
        "namespaceSelector": {},
    }))
    .expect("a valid SandboxTier spec");
    SandboxTier::new(name, spec)
}

/// Gives `tier` a warm pool of `size` pods in namespace `ns` (a pool keeps its pods in the
/// namespaces of the sessions it serves, so a test's pool follows its namespace).
pub async fn pool_in(client: &Client, tier: &str, size: u32, ns: &str) {
    Api::<SandboxTier>::all(client.clone())
        .patch(
            tier,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "spec": {"warmPool": {"size": size, "namespaces": [ns]}}
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("giving {tier} a pool in {ns}: {e}"));
}

/// Creates the cluster-scoped tier, runs `body`, deletes the tier whatever happened.
pub async fn with_tier<F, Fut>(client: &Client, tier: SandboxTier, body: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let tiers: Api<SandboxTier> = Api::all(client.clone());
    let name = tier.name_any();
    let _ = tiers.delete(&name, &DeleteParams::default()).await;
    tiers.create(&PostParams::default(), &tier).await.unwrap();
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body())).await;
    if let Err(e) = tiers.delete(&name, &DeleteParams::default()).await {
        eprintln!("warning: deleting SandboxTier {name}: {e}");
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The demo session, escalating to `tier`.
pub async fn session(client: &Client, ns: &str, name: &str, tier: &str) -> HarnessSession {
    session_with(client, ns, name, tier, |_| {}).await
}

/// [`session`], changed by `edit` before it is created.
pub async fn session_with(
    client: &Client,
    ns: &str,
    name: &str,
    tier: &str,
    edit: impl FnOnce(&mut HarnessSession),
) -> HarnessSession {
    harness::restrict(client, ns).await.unwrap();
    let mut s = harness::example_session("demo.yaml", name).unwrap();
    s.spec.escalation = Some(kube_harness_crds::session::Escalation {
        tier: Some(tier.into()),
    });
    edit(&mut s);
    Api::<HarnessSession>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    harness::wait_ready(client, ns, name, READY).await.unwrap()
}

/// Tier-1 pods serving this session (in its own namespace).
pub async fn tier1_pods(client: &Client, ns: &str, session: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!(
            "kubeharness.dev/role=tier1,kubeharness.dev/session-namespace={ns},kubeharness.dev/session={session}"
        )))
        .await
        .unwrap()
        .items
}

pub async fn no_tier1_pod_left(client: &Client, ns: &str, session: &str) {
    wait::until(
        "no Tier-1 pod left for the session",
        Duration::from_secs(90),
        || async {
            let left: Vec<String> = tier1_pods(client, ns, session)
                .await
                .iter()
                .map(|p| p.name_any())
                .collect();
            Ok(if left.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!("{left:?}"))
            })
        },
    )
    .await
    .unwrap();
}

/// Pool pods of a tier, in every namespace it serves: (name, claimed, ready, image).
pub async fn pool_pods(client: &Client, tier: &str) -> Vec<(String, bool, bool, String)> {
    Api::<Pod>::all(client.clone())
        .list(&ListParams::default().labels(&format!("kubeharness.dev/pool={tier}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let claimed = p
                .labels()
                .get("kubeharness.dev/claimed")
                .map(String::as_str)
                == Some("true");
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let image = p
                .spec
                .as_ref()
                .map(|s| s.containers[0].image.clone().unwrap_or_default())
                .unwrap_or_default();
            (p.name_any(), claimed, ready, image)
        })
        .collect()
}

/// Waits until the tier has `n` ready, unclaimed pool pods running `image`, and no other idle ones.
pub async fn pool_settles(client: &Client, tier: &str, n: usize, image: &str) {
    wait::until(
        &format!("{n} ready pool pods of {tier} on {image}"),
        READY,
        || async {
            let idle: Vec<_> = pool_pods(client, tier)
                .await
                .into_iter()
                .filter(|p| !p.1)
                .collect();
            let good = idle.iter().filter(|p| p.2 && p.3 == image).count();
            Ok(if good == n && idle.len() == n {
                Check::Done(())
            } else {
                Check::Pending(format!("{idle:?}"))
            })
        },
    )
    .await
    .unwrap();
}
