//! The leader's sweep, at its start-up and then periodically: Tier-1 pods whose turn is over
//! without a DELETE (the session is gone or was created again, its worker pod was replaced since
//! the pod was opened, the pod itself ended, the turn's record is a tombstone, a newer turn of
//! the session opened), whose lifetime ran out (a turn past the tier's maxTurnSeconds, a kept pod
//! past its idleTimeoutSeconds or no longer Ready), or whose turn is someone else's or was never
//! recorded (an operator stopped half-way through an open); turn records whose pod is gone, with
//! the ordinary pod's token Secret they may have left; and old tombstones. Idle pool pods are the
//! pool's business, not the sweep's (it only counts them for the `tier1_pods` gauge).
//!
//! Every delete is of the object as listed (uid and resourceVersion preconditions): a pod claimed
//! or released since the list, or a record written again, is left for the next sweep to judge.
//! A failed request is logged and counted (`kube_harness_tier1_sweep_errors_total`), and the
//! sweep goes on with the rest.

use super::open::{self, Exactly};
use super::{record, report};
use crate::context::Context;
use crate::{events, labels};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::reasons;
use kube_harness_crds::HarnessSession;
use std::collections::HashMap;
use std::collections::HashSet;
use std::time::Duration;

/// How often the leader sweeps.
pub const PERIOD: Duration = Duration::from_secs(30);

mod rules;
use rules::{due, newest_turns, superseded, turn_ended};
pub use rules::{
    lifetime, verdict, worker_identity, Verdict, FAILED_GRACE, ORPHAN_RECORD_GRACE, PENDING_LIMIT,
    RECORD_GRACE,
};

/// One thing a sweep deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    /// `pod`, `secret` or `record` (a turn's HarnessTurn).
    pub kind: &'static str,
    pub name: String,
    pub reason: &'static str,
    pub message: String,
}

/// What one sweep did, and when the next lifetime rule falls due (the loop sleeps until then
/// when that is sooner than [`PERIOD`]).
#[derive(Debug, Default)]
pub struct Report {
    pub swept: Vec<Swept>,
    pub next: Option<Duration>,
    /// API requests that failed (each logged and counted); the sweep went on with the rest.
    pub errors: u32,
}

impl Report {
    /// Logs and counts a failed request; the sweep goes on.
    fn failed(&mut self, ctx: &Context, what: &str, error: &kube::Error) {
        tracing::warn!(%error, "Tier-1 sweep: {what}; going on with the rest");
        ctx.metrics.tier1_sweep_error();
        self.errors = self.errors.saturating_add(1);
    }
}

/// The session of a pod as one sweep saw it: its uid, and the identity of its worker pod.
struct SessionSeen {
    session: Option<HarnessSession>,
    worker: Option<String>,
}

/// One sweep: Tier-1 pods (serving, kept, or claimed from a pool) whose session, worker or turn is
/// gone or whose lifetime ran out, and turn records (with the ordinary pod's token Secret they
/// may have left) whose pod is gone. Each thing deleted is an Event (on it, and for a turn bound
/// or an idle time on its session) and counts in `kube_harness_tier1_swept_total`. Its list of
/// every Tier-1 pod also sets the `tier1_pods` gauge (idle pool pods are only counted: they are
/// the pool's business).
pub async fn sweep(ctx: &Context) -> crate::Result<Report> {
    // Without the records (an API error, or RBAC from an older chart without `list` on harnessturns),
    // nothing is judged by them: no pod goes for a record it lacks.
    let (records, records_known) = match record::list(ctx).await {
        Ok(records) => (records, true),
        Err(e) => {
            tracing::warn!(error = %e, "listing the Tier-1 turn records; sweeping without them");
            (Vec::new(), false)
        }
    };
    // Tier-1 pods live in their sessions' namespaces (pool pods in the pools'): all of them.
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let selector = record::selector();
    // A pod whose session label names another namespace than its own was not made by the
    // operator (it makes a session's pods in that session's namespace): a tenant's pod, planted
    // to act on another namespace's session. Not judged, not counted, never a reason to write.
    let all: Vec<Pod> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(rules::in_its_sessions_namespace)
        .collect();
    let now = k8s_openapi::jiff::Timestamp::now();
    let key = |l: &std::collections::BTreeMap<String, String>| {
        (
            l.get(labels::SESSION_NAMESPACE)
                .cloned()
                .unwrap_or_default(),
            l.get(labels::SESSION).cloned().unwrap_or_default(),
            l.get(labels::TURN).cloned().unwrap_or_default(),
        )
    };
    // A record's turn is read from its namespace and spec (what its proof and name bind), never
    // from its labels.
    let holders: HashMap<(String, String, String), String> = records
        .iter()
        .filter(|r| !record::ended(r))
        .filter_map(|r| Some((record::key(r), record::holder(r)?.to_string())))
        .collect();
    let ended: HashSet<(String, String, String)> = records
        .iter()
        .filter(|r| record::ended(r))
        .map(record::key)
        .collect();
    let newest = newest_turns(&all);
    // None: the session could not be read (its pods are judged at the next sweep).
    let mut sessions: HashMap<(String, String), Option<SessionSeen>> = HashMap::new();
    let mut out = Report::default();
    let mut alive: HashMap<(String, &'static str), u32> = HashMap::new();
    // Pods still serving their turn after this sweep: (name, turn label).
    let mut serving: HashMap<String, String> = HashMap::new();
    let mut names: std::collections::HashSet<String> = std::collections::HashSet::new();
    for pod in all {
        if pod.metadata.deletion_timestamp.is_none() {
            names.insert(pod.name_any());
        }
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
        let session_key = (ns.clone(), name.clone());
        if !sessions.contains_key(&session_key) {
            let seen = match seen(ctx, &ns, &name).await {
                Ok(seen) => Some(seen),
                Err(e) => {
                    out.failed(ctx, &format!("reading session {ns}/{name}"), &e);
                    None
                }
            };
            sessions.insert(session_key.clone(), seen);
        }
        let turn = key(pod.labels());
        let Some(seen) = &sessions[&session_key] else {
            // Judged at the next sweep; its turn's record stays with it meanwhile.
            if !turn.2.is_empty() {
                serving.insert(pod.name_any(), turn.2.clone());
            }
            continue;
        };
        // A session created again under the same name is another session.
        let exists = seen.session.as_ref().is_some_and(|s| {
            match (pod.labels().get(labels::SESSION_UID), &s.metadata.uid) {
                (Some(opened_for), Some(uid)) => opened_for == uid,
                _ => true,
            }
        });
        let pod_name = pod.name_any();
        let recorded = match records_known {
            true => holders.get(&turn).map(String::as_str),
            false => Some(pod_name.as_str()),
        };
        let v = verdict(&pod, exists, seen.worker.as_deref(), age(&pod))
            .or_else(|| turn_ended(&pod, ended.contains(&turn)))
            .or_else(|| lifetime(&pod, recorded, now))
            .or_else(|| superseded(&pod, &newest));
        let Some(v) = v else {
            if pod.metadata.deletion_timestamp.is_none() {
                let state = if turn.2.is_empty() { "kept" } else { "serving" };
                *alive.entry((tier, state)).or_default() += 1;
                if !turn.2.is_empty() {
                    serving.insert(pod.name_any(), turn.2.clone());
                }
                if let Some(d) = due(&pod, now) {
                    out.next = Some(out.next.map_or(d, |n| n.min(d)));
                }
            }
            continue;
        };
        tracing::info!(pod = %pod.name_any(), session = %format!("{ns}/{name}"), why = %v.message, "deleting a Tier-1 pod");
        let gone = match open::delete(ctx, &pod, Exactly::Version).await {
            Ok(gone) => gone,
            Err(e) => {
                out.failed(ctx, &format!("deleting Tier-1 pod {}", pod.name_any()), &e);
                false
            }
        };
        if !gone {
            // Changed since the list (claimed, released) or not deleted: judged again next
            // time; its turn's record stays with it meanwhile.
            if !turn.2.is_empty() {
                serving.insert(pod.name_any(), turn.2.clone());
            }
            continue;
        }
        names.remove(&pod.name_any());
        let session = seen.session.as_ref().filter(|_| exists);
        swept(ctx, &mut out, "pod", &pod, &v).await;
        match (session, v.reason) {
            (Some(s), "turn_timeout") => {
                let update = report::Update {
                    escalated: false,
                    reason: reasons::TURN_TIMED_OUT,
                    message: format!("Tier-1 pod {} was deleted: {}", pod.name_any(), v.message),
                    current_tier: 0,
                    failure: None,
                };
                // The Event is this one, not the condition's.
                let _ = report::write(
                    ctx,
                    &ns,
                    &name,
                    &update,
                    // TurnEnded too: a reconcile that saw the pod gone first says so.
                    Some(&[
                        reasons::TIER1_READY,
                        reasons::TIER1_PROVISIONING,
                        reasons::TURN_ENDED,
                    ]),
                    None,
                )
                .await;
                events::publish(
                    ctx,
                    s,
                    true,
                    "Tier1TurnTimedOut",
                    &format!("Tier-1 pod {} was deleted: {}", pod.name_any(), v.message),
                    "Sweep",
                )
                .await;
            }
            (Some(s), "idle_timeout") => {
                events::publish(
                    ctx,
                    s,
                    false,
                    "Tier1IdleExpired",
                    &format!("Tier-1 pod {} was deleted: {}", pod.name_any(), v.message),
                    "Sweep",
                )
                .await;
            }
            _ => {}
        }
    }
    // Turn records whose pod is gone (or serves no longer that turn), with the ordinary pod's
    // token Secret an open may have left before it stopped.
    for r in &records {
        if record::ended(r) {
            // A tombstone, kept for opens of its turn still under way; then deleted quietly.
            let at: Option<k8s_openapi::jiff::Timestamp> = r
                .annotations()
                .get(labels::TURN_ENDED)
                .and_then(|t| t.parse().ok());
            let old = at.is_none_or(|t| {
                now.duration_since(t).as_secs() > record::ENDED_KEPT.as_secs() as i64
            });
            if old {
                if let Err(e) = record::delete_as_read(ctx, r).await {
                    out.failed(ctx, &format!("deleting turn record {}", r.name_any()), &e);
                }
            }
            continue;
        }
        let Some(holder) = record::holder(r) else {
            continue;
        };
        let turn = record::key(r).2;
        if serving.get(holder) == Some(&turn) {
            continue;
        }
        let written = r.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let waited = written
            .map(|t| now.duration_since(t).as_secs())
            .unwrap_or(0);
        if waited <= ORPHAN_RECORD_GRACE.as_secs() as i64 {
            continue;
        }
        let v = Verdict {
            reason: "no_pod",
            message: format!("the turn's pod {holder} is gone or serves it no longer"),
        };
        match record::delete_as_read(ctx, r).await {
            Ok(true) => swept(ctx, &mut out, "record", r, &v).await,
            Ok(false) => {}
            Err(e) => {
                out.failed(ctx, &format!("deleting turn record {}", r.name_any()), &e);
                continue;
            }
        }
        let Some(ordinary) = record::ordinary(r) else {
            continue;
        };
        if names.contains(&ordinary) {
            continue;
        }
        // The ordinary pod's Secret is in the turn's session namespace (the record's), as the
        // pod would be.
        let secret_ns = record::key(r).0;
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &secret_ns);
        let gone = match deleted(secrets.delete(&ordinary, &DeleteParams::default()).await) {
            Ok(gone) => gone,
            Err(e) => {
                out.failed(ctx, &format!("deleting token Secret {ordinary}"), &e);
                false
            }
        };
        if gone {
            let gone = Secret {
                metadata: ObjectMeta {
                    name: Some(ordinary.clone()),
                    namespace: Some(secret_ns.clone()),
                    ..ObjectMeta::default()
                },
                ..Secret::default()
            };
            let v = Verdict {
                reason: "no_pod",
                message: format!("the token Secret of {ordinary}, whose pod was never created"),
            };
            swept(ctx, &mut out, "secret", &gone, &v).await;
        }
    }
    ctx.metrics.tier1_pods(&alive);
    Ok(out)
}

/// The session `ns`/`name` (not being deleted) and the identity of its worker pod.
async fn seen(ctx: &Context, ns: &str, name: &str) -> Result<SessionSeen, kube::Error> {
    let found = Api::<HarnessSession>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?
        .filter(|s| s.metadata.deletion_timestamp.is_none());
    let worker = match &found {
        Some(session) => Api::<Pod>::namespaced(ctx.client.clone(), ns)
            .get_opt(&crate::session::owned::worker_pod_name(session))
            .await?
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .as_ref()
            .and_then(worker_identity),
        None => None,
    };
    Ok(SessionSeen {
        session: found,
        worker,
    })
}

/// Whether a delete deleted something (404: it was gone already).
fn deleted<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Counts, logs and announces (an Event on the object itself) one thing swept.
async fn swept<K>(ctx: &Context, report: &mut Report, kind: &'static str, obj: &K, v: &Verdict)
where
    K: kube::Resource<DynamicType = ()> + ResourceExt,
{
    ctx.metrics.tier1_swept(kind, v.reason);
    events::publish(ctx, obj, false, "Tier1Swept", &v.message, "Sweep").await;
    report.swept.push(Swept {
        kind,
        name: obj.name_any(),
        reason: v.reason,
        message: v.message.clone(),
    });
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

/// Sweeps at once (the leader's start-up), then every [`PERIOD`], sooner when a lifetime rule
/// falls due before that, until `stop` resolves.
pub async fn run(ctx: std::sync::Arc<Context>, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        let wait = match sweep(&ctx).await {
            Ok(report) => report.next.map_or(PERIOD, |d| {
                d.saturating_add(Duration::from_secs(1)).min(PERIOD)
            }),
            Err(e) => {
                tracing::warn!(error = %e, "Tier-1 sweep: listing the Tier-1 pods");
                ctx.metrics.tier1_sweep_error();
                PERIOD
            }
        };
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Deletes every Tier-1 pod of a session, serving or kept (its finalizer runs this).
pub async fn delete_for_session(ctx: &Context, ns: &str, session: &str) -> crate::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let selector = super::pod::session_selector(ns, session);
    let found = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    for pod in &found {
        open::delete(ctx, pod, Exactly::Object).await?;
    }
    Ok(found.len())
}
