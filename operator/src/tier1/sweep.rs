//! The leader's sweep, at its start-up and then periodically: Tier-1 pods whose turn is over
//! without a DELETE (the session is gone or was created again, its worker pod was replaced since
//! the pod was opened, the pod itself ended), whose lifetime ran out (a turn past the tier's
//! maxTurnSeconds, a kept pod past its idleTimeoutSeconds), or whose turn is someone else's or
//! was never recorded (an operator stopped half-way through an open); and turn records whose pod
//! is gone, with the ordinary pod's token Secret they may have left. Idle pool pods are the
//! pool's business, not the sweep's (it only counts them for the `tier1_pods` gauge).

use super::state::{self, Phase};
use super::{open, record, report};
use crate::context::Context;
use crate::{events, labels};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::reasons;
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

/// A pod claimed for a turn that nothing recorded (its open stopped between the claim and the
/// record, and the worker neither opened again nor ended the turn within its provisioning time,
/// 180 s by default) is swept this long after its turn began.
pub const RECORD_GRACE: Duration = Duration::from_secs(300);
/// A turn record whose pod is gone is swept this long after it was written (an open creates the
/// ordinary pod right after recording it).
pub const ORPHAN_RECORD_GRACE: Duration = Duration::from_secs(60);

/// Why the sweep deletes something: `reason` is the metric's label value, `message` the Event's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub reason: &'static str,
    pub message: String,
}

impl Verdict {
    fn new(reason: &'static str, message: impl Into<String>) -> Option<Self> {
        Some(Verdict {
            reason,
            message: message.into(),
        })
    }
}

/// Why a serving (or kept) Tier-1 pod must go, if it must. `age`: since the pod was created.
/// `session_exists`: its session is there, not being deleted, and has the uid the pod was
/// opened for.
pub fn verdict(
    pod: &Pod,
    session_exists: bool,
    worker_uid: Option<&str>,
    age: Duration,
) -> Option<Verdict> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    if !session_exists {
        return Verdict::new("session_gone", "its HarnessSession is gone");
    }
    match state::phase(pod) {
        Phase::Failed { reason, .. }
            if matches!(reason.as_str(), "PodFailed" | "AgentDied" | "InitFailed") =>
        {
            return Verdict::new("ended", format!("it ended ({reason})"));
        }
        Phase::Failed { reason, .. } if age > FAILED_GRACE => {
            return Verdict::new(
                "failed_to_start",
                format!("it failed to start ({reason}) and no one ended it"),
            );
        }
        Phase::Pending if age > PENDING_LIMIT => {
            return Verdict::new("never_ready", "it never became ready");
        }
        _ => {}
    }
    let recorded = pod
        .annotations()
        .get(labels::WORKER_UID)
        .map(String::as_str);
    match (recorded, worker_uid) {
        (Some(r), Some(now)) if r != now => Verdict::new(
            "worker_replaced",
            "the session's worker pod was replaced or restarted",
        ),
        (Some(_), None) => Verdict::new("worker_replaced", "the session's worker pod is gone"),
        _ => None,
    }
}

/// The lifetime rules of a serving or kept pod (docs/tier1.md, "Lifetimes"): a turn past its
/// bound (the tier's maxTurnSeconds), a kept pod past its idle time (idleTimeoutSeconds), a
/// turn's pod that lost its turn's record to another pod, or that nothing recorded
/// [`RECORD_GRACE`] after its turn began. `recorded`: the pod its turn's record names, if there
/// is a record.
pub fn lifetime(
    pod: &Pod,
    recorded: Option<&str>,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<Verdict> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let annotation = |k: &str| pod.annotations().get(k).cloned().unwrap_or_default();
    if !pod.labels().contains_key(labels::TURN) {
        return match super::pod::passed(pod, labels::IDLE_UNTIL, now) {
            Some(true) => Verdict::new(
                "idle_timeout",
                format!(
                    "it was kept idle for the session's next turn until {} (the tier's idleTimeoutSeconds) and none came",
                    annotation(labels::IDLE_UNTIL)
                ),
            ),
            _ => None,
        };
    }
    if super::pod::passed(pod, labels::TURN_DEADLINE, now) == Some(true) {
        return Verdict::new(
            "turn_timeout",
            format!(
                "turn {} held it past its bound {} (the tier's maxTurnSeconds) without ending",
                annotation(labels::TURN_ID),
                annotation(labels::TURN_DEADLINE)
            ),
        );
    }
    match recorded {
        Some(holder) if holder != pod.name_any() => Verdict::new(
            "lost_race",
            format!(
                "another pod, {holder}, is recorded for its turn {}",
                annotation(labels::TURN_ID)
            ),
        ),
        Some(_) => None,
        None => {
            let started: Option<k8s_openapi::jiff::Timestamp> =
                annotation(labels::TURN_STARTED).parse().ok();
            let waited = started.map(|t| now.duration_since(t).as_secs());
            let grace = RECORD_GRACE.as_secs() as i64;
            match waited {
                Some(w) if w > grace => Verdict::new(
                    "unrecorded",
                    format!(
                        "its turn {} was never recorded (the open that claimed it stopped half-way, {w}s ago)",
                        annotation(labels::TURN_ID)
                    ),
                ),
                _ => None,
            }
        }
    }
}

/// When the next lifetime rule of `pod` falls due, from `now` (its turn's bound, or the end of
/// its idle time).
fn due(pod: &Pod, now: k8s_openapi::jiff::Timestamp) -> Option<Duration> {
    let key = if pod.labels().contains_key(labels::TURN) {
        labels::TURN_DEADLINE
    } else {
        labels::IDLE_UNTIL
    };
    let at: k8s_openapi::jiff::Timestamp = pod.annotations().get(key)?.parse().ok()?;
    let secs = at.duration_since(now).as_secs();
    Some(Duration::from_secs(secs.max(0) as u64))
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

/// One thing a sweep deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    /// `pod`, `secret` or `record` (a turn's Lease).
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
    // Without the records (an API error, or RBAC from an older chart without `list` on leases),
    // nothing is judged by them: no pod goes for a record it lacks.
    let (records, records_known) = match record::list(ctx).await {
        Ok(records) => (records, true),
        Err(e) => {
            tracing::warn!(error = %e, "listing the Tier-1 turn records; sweeping without them");
            (Vec::new(), false)
        }
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let selector = format!("{}={}", labels::ROLE, labels::ROLE_TIER1);
    let all = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
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
    let holders: HashMap<(String, String, String), String> = records
        .iter()
        .filter_map(|r| Some((key(r.labels()), record::holder(r)?.to_string())))
        .collect();
    let mut sessions: HashMap<(String, String), SessionSeen> = HashMap::new();
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
            let found = Api::<HarnessSession>::namespaced(ctx.client.clone(), &ns)
                .get_opt(&name)
                .await?
                .filter(|s| s.metadata.deletion_timestamp.is_none());
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
            sessions.insert(
                session_key.clone(),
                SessionSeen {
                    session: found,
                    worker,
                },
            );
        }
        let seen = &sessions[&session_key];
        // A session created again under the same name is another session.
        let exists = seen.session.as_ref().is_some_and(|s| {
            match (pod.labels().get(labels::SESSION_UID), &s.metadata.uid) {
                (Some(opened_for), Some(uid)) => opened_for == uid,
                _ => true,
            }
        });
        let turn = key(pod.labels());
        let pod_name = pod.name_any();
        let recorded = match records_known {
            true => holders.get(&turn).map(String::as_str),
            false => Some(pod_name.as_str()),
        };
        let v = verdict(&pod, exists, seen.worker.as_deref(), age(&pod))
            .or_else(|| lifetime(&pod, recorded, now));
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
        open::delete(ctx, &pod.name_any()).await?;
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
        let Some(holder) = record::holder(r) else {
            continue;
        };
        let turn = key(r.labels()).2;
        if serving.get(holder) == Some(&turn) {
            continue;
        }
        let written = r
            .spec
            .as_ref()
            .and_then(|s| s.acquire_time.as_ref())
            .map(|t| t.0)
            .or_else(|| r.metadata.creation_timestamp.as_ref().map(|t| t.0));
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
        let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
        if deleted(leases.delete(&r.name_any(), &DeleteParams::default()).await)? {
            swept(ctx, &mut out, "record", r, &v).await;
        }
        let Some(ordinary) = r.annotations().get(record::ORDINARY) else {
            continue;
        };
        if names.contains(ordinary) {
            continue;
        }
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
        if deleted(secrets.delete(ordinary, &DeleteParams::default()).await)? {
            let gone = Secret {
                metadata: ObjectMeta {
                    name: Some(ordinary.clone()),
                    namespace: Some(ctx.config.namespace.clone()),
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
                tracing::warn!(error = %e, "Tier-1 sweep");
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
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let selector = super::pod::session_selector(ns, session);
    let found = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    for pod in &found {
        open::delete(ctx, &pod.name_any()).await?;
    }
    Ok(found.len())
}
