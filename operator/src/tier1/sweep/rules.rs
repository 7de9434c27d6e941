//! What the sweep judges a Tier-1 pod by (pure, so tests feed it pods): whether its turn is
//! over ([`verdict`]), whether its lifetime ran out ([`lifetime`]), whether a newer turn of its
//! session took over ([`superseded`]).

use super::super::state::{self, Phase};
use crate::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use std::collections::HashMap;
use std::time::Duration;

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
        return match super::super::pod::passed(pod, labels::IDLE_UNTIL, now) {
            Some(true) => Verdict::new(
                "idle_timeout",
                format!(
                    "it was kept idle for the session's next turn until {} (the tier's idleTimeoutSeconds) and none came",
                    annotation(labels::IDLE_UNTIL)
                ),
            ),
            // Kept because it was Ready; no longer Ready, it never serves again (its agent gave
            // it up: a command left processes it could not end).
            _ if !matches!(state::phase(pod), Phase::Ready { .. }) => Verdict::new(
                "not_ready",
                "it was kept idle for the session's next turn but is no longer ready",
            ),
            _ => None,
        };
    }
    if super::super::pod::passed(pod, labels::TURN_DEADLINE, now) == Some(true) {
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

/// The session object a pod serves: (namespace, name, uid) from its labels.
fn session_object(pod: &Pod) -> (String, String, String) {
    let label = |k: &str| pod.labels().get(k).cloned().unwrap_or_default();
    (
        label(labels::SESSION_NAMESPACE),
        label(labels::SESSION),
        label(labels::SESSION_UID),
    )
}

/// Per session object, its newest serving turn: when it opened, and its turn label.
pub(super) type Newest =
    HashMap<(String, String, String), (Option<k8s_openapi::jiff::Timestamp>, String)>;

/// The newest serving turn of each session object in `pods`, by when the turn opened. An open of
/// a new turn ends the session's other serving turns, but two opens of new turns at once each
/// saw none: the sweep keeps the newer.
pub(super) fn newest_turns(pods: &[Pod]) -> Newest {
    let mut newest = Newest::new();
    for p in pods {
        let (Some(turn), None) = (p.labels().get(labels::TURN), &p.metadata.deletion_timestamp)
        else {
            continue;
        };
        let started = p
            .annotations()
            .get(labels::TURN_STARTED)
            .and_then(|t| t.parse().ok());
        let this = (started, turn.clone());
        let key = session_object(p);
        if newest.get(&key).is_none_or(|seen| *seen < this) {
            newest.insert(key, this);
        }
    }
    newest
}

/// A pod serving a turn of its session older than the session's newest one (see
/// [`newest_turns`]): one serving turn per session.
pub(super) fn superseded(pod: &Pod, newest: &Newest) -> Option<Verdict> {
    let turn = pod.labels().get(labels::TURN)?;
    match newest.get(&session_object(pod)) {
        Some((_, newer)) if newer != turn => Verdict::new(
            "superseded",
            format!(
                "its session opened a newer turn than {} (one serving turn per session)",
                pod.annotations()
                    .get(labels::TURN_ID)
                    .cloned()
                    .unwrap_or_default()
            ),
        ),
        _ => None,
    }
}

/// A pod serving a turn whose record is a tombstone (`ended`): an open still under way when the
/// turn ended made it after the end looked.
pub(super) fn turn_ended(pod: &Pod, ended: bool) -> Option<Verdict> {
    if !ended || !pod.labels().contains_key(labels::TURN) {
        return None;
    }
    Verdict::new(
        "turn_ended",
        format!(
            "its turn {} ended",
            pod.annotations()
                .get(labels::TURN_ID)
                .cloned()
                .unwrap_or_default()
        ),
    )
}

/// When the next lifetime rule of `pod` falls due, from `now` (its turn's bound, or the end of
/// its idle time).
pub(super) fn due(pod: &Pod, now: k8s_openapi::jiff::Timestamp) -> Option<Duration> {
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

/// Whether `pod` is where the operator would have made it: a pod serving (or kept for) a session
/// is in that session's namespace; a pool pod names no session. Labels are anyone's to set in
/// their own namespace, so a pod labelled for another namespace's session is a tenant's.
pub fn in_its_sessions_namespace(pod: &Pod) -> bool {
    match pod.labels().get(labels::SESSION_NAMESPACE) {
        Some(ns) => pod.metadata.namespace.as_deref() == Some(ns.as_str()),
        None => true,
    }
}
