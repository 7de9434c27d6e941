//! The leader's sweep of Tier-1 pods whose turn is over without a DELETE: the session is gone,
//! its worker pod was replaced since the pod was opened (the worker that held the turn died), or
//! the pod itself ended. Idle pool pods are the pool's business, not the sweep's (it only counts
//! them for the `tier1_pods` gauge).

use super::open;
use super::state::{self, Phase};
use crate::context::Context;
use crate::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kube_harness_crds::HarnessSession;
use std::collections::HashMap;
use std::time::Duration;

/// How often the leader sweeps.
pub const PERIOD: Duration = Duration::from_secs(30);

/// A pod that failed to start is normally ended by its worker's DELETE within seconds; after this
/// long the sweep ends it (the worker lost its DELETE).
pub const FAILED_GRACE: Duration = Duration::from_secs(300);
/// A pod still not ready after this long serves no one (workers give up provisioning far sooner).
pub const PENDING_LIMIT: Duration = Duration::from_secs(1800);

/// Why a serving Tier-1 pod must go, if it must. `age`: since the pod was created.
pub fn verdict(
    pod: &Pod,
    session_exists: bool,
    worker_uid: Option<&str>,
    age: Duration,
) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    if !session_exists {
        return Some("its HarnessSession is gone".into());
    }
    match state::phase(pod) {
        Phase::Failed { reason, .. }
            if matches!(reason.as_str(), "PodFailed" | "AgentDied" | "InitFailed") =>
        {
            return Some(format!("it ended ({reason})"));
        }
        Phase::Failed { reason, .. } if age > FAILED_GRACE => {
            return Some(format!("it failed to start ({reason}) and no one ended it"));
        }
        Phase::Pending if age > PENDING_LIMIT => {
            return Some("it never became ready".into());
        }
        _ => {}
    }
    let recorded = pod
        .annotations()
        .get(labels::WORKER_UID)
        .map(String::as_str);
    match (recorded, worker_uid) {
        (Some(r), Some(now)) if r != now => {
            Some("the session's worker pod was replaced or restarted".into())
        }
        (Some(_), None) => Some("the session's worker pod is gone".into()),
        _ => None,
    }
}

/// What identifies the worker process that opened a sandbox: the worker pod's uid and its
/// container restarts. A restarted worker has lost its turn, so its Tier-1 pod has no one to serve.
pub fn worker_identity(worker: &Pod) -> Option<String> {
    let uid = worker.metadata.uid.as_deref()?;
    let restarts: i32 = worker
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| c.restart_count)
        .sum();
    Some(format!("{uid}/{restarts}"))
}

/// One sweep; returns the names of the pods deleted. Its list of every Tier-1 pod (idle pool pods
/// are only counted) also sets the `tier1_pods` gauge.
pub async fn sweep(ctx: &Context) -> crate::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let selector = format!("{}={}", labels::ROLE, labels::ROLE_TIER1);
    let all = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    let mut sessions: HashMap<(String, String), (bool, Option<String>)> = HashMap::new();
    let mut deleted = Vec::new();
    let mut alive: HashMap<(String, &'static str), u32> = HashMap::new();
    for pod in all {
        let tier = pod.labels().get(labels::TIER).cloned().unwrap_or_default();
        let (Some(ns), Some(name)) = (
            pod.labels().get(labels::SESSION_NAMESPACE).cloned(),
            pod.labels().get(labels::SESSION).cloned(),
        ) else {
            let pooled = !pod.labels().contains_key(labels::SESSION);
            if pooled && pod.metadata.deletion_timestamp.is_none() {
                *alive.entry((tier, "idle")).or_default() += 1;
            }
            continue;
        };
        let key = (ns.clone(), name.clone());
        if !sessions.contains_key(&key) {
            let found = Api::<HarnessSession>::namespaced(ctx.client.clone(), &ns)
                .get_opt(&name)
                .await?
                .filter(|s| s.metadata.deletion_timestamp.is_none());
            let exists = found.is_some();
            let worker = if let Some(session) = &found {
                Api::<Pod>::namespaced(ctx.client.clone(), &ns)
                    .get_opt(&crate::session::owned::worker_pod_name(session))
                    .await?
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .as_ref()
                    .and_then(worker_identity)
            } else {
                None
            };
            sessions.insert(key.clone(), (exists, worker));
        }
        let (exists, worker) = &sessions[&key];
        if let Some(why) = verdict(&pod, *exists, worker.as_deref(), age(&pod)) {
            tracing::info!(pod = %pod.name_any(), session = %format!("{ns}/{name}"), %why, "deleting a Tier-1 pod");
            open::delete(ctx, &pod.name_any()).await?;
            deleted.push(pod.name_any());
        } else if pod.metadata.deletion_timestamp.is_none() {
            *alive.entry((tier, "serving")).or_default() += 1;
        }
    }
    ctx.metrics.tier1_pods(&alive);
    Ok(deleted)
}

/// Time since the pod was created (zero when unknown).
pub(crate) fn age(pod: &Pod) -> Duration {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| {
            let secs = k8s_openapi::jiff::Timestamp::now()
                .duration_since(t.0)
                .as_secs();
            Duration::from_secs(secs.max(0) as u64)
        })
        .unwrap_or_default()
}

/// Sweeps every [`PERIOD`] until `stop` resolves.
pub async fn run(ctx: std::sync::Arc<Context>, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(PERIOD);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {
                if let Err(e) = sweep(&ctx).await {
                    tracing::warn!(error = %e, "Tier-1 sweep");
                }
            }
        }
    }
}

/// Deletes every Tier-1 pod serving a session (its finalizer runs this).
pub async fn delete_for_session(ctx: &Context, ns: &str, session: &str) -> crate::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let selector = super::pod::serving_selector(ns, session, None);
    let found = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    for pod in &found {
        open::delete(ctx, &pod.name_any()).await?;
    }
    Ok(found.len())
}
