//! The second of the reconcile's three steps: what the session's status should say, as a pure
//! function of what the first step observed (and did) and of the status it read. No API server,
//! no clock beyond the transition times `condition::set` stamps, so tests feed it observations.

use super::observe::{WorkerState, ADOPTION_UNCONFIRMED};
use super::usage::WorkerReport;
use crate::tier1::state::Phase as Tier1Phase;
use kube_harness_crds::condition::{self, reasons, types};
use kube_harness_crds::session::{CarriedUsage, Usage};
use kube_harness_crds::{HarnessSessionStatus, Phase};
use std::time::Duration;

/// Requeue while the worker is Ready: how often usage counters and idleness are refreshed.
pub const READY_REQUEUE: Duration = Duration::from_secs(15);
/// Requeue while waiting for something that emits no watch event (a missing tier).
pub const WAIT_REQUEUE: Duration = Duration::from_secs(10);
/// Requeue while the worker pod starts. Its watch events bring the session back when it changes,
/// so this is only a safety net: at 5,000 starting sessions a 10 s requeue made 250 no-op
/// reconciles a second (docs/performance.md, "Scale").
pub const STARTING_REQUEUE: Duration = Duration::from_secs(60);
/// Requeue after a finished worker pod was deleted, to create its replacement.
pub const REPLACE_REQUEUE: Duration = Duration::from_secs(1);

/// What the reconcile's first step found, and what it did about the worker pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    /// The session's workerTier is not a usable level-0 tier: nothing else was looked at.
    NoWorkerTier(WorkerTierProblem),
    /// `lifetime.ttlSeconds` passed (ttlAction Release): the worker pod, Tier-1 pods and
    /// workspace PVC were deleted; `releasing` while any of them is still there.
    Expired { releasing: bool },
    /// The child objects are in place.
    Session(Box<Seen>),
    /// The spec names something the operator cannot use as a name, path, flag or label (the
    /// CRD's rules refuse it today; the object predates them): nothing was made of it.
    Invalid { message: String },
}

/// Why the workerTier cannot define the worker pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerTierProblem {
    /// No tier of that name, or one the namespace is not granted (the same to the session).
    NotFound {
        tier: String,
        namespace: String,
    },
    NotLevelZero {
        tier: String,
        level: u8,
    },
}

/// The session with its Secret, PVC and NetworkPolicy in place.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    /// Name of the token Secret.
    pub token_secret: String,
    /// The uid of the token Secret the operator made (`None`: unknown this time, keep the last).
    pub token_secret_uid: Option<String>,
    /// The uid of the worker pod the operator made or adopted, when there is one.
    pub worker_pod_uid: Option<String>,
    /// Name of the worker pod (whether or not it exists).
    pub worker_pod: String,
    /// Name of the workspace PVC.
    pub workspace_claim: String,
    /// Port of the worker API, for the endpoint.
    pub worker_port: u16,
    /// The Service's URL, shown as `status.address` while the worker is Ready.
    pub address: String,
    pub escalation: Escalation,
    pub worker: Worker,
}

/// The session's escalation tier and, when it is usable, its Tier-1 pods serving the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Escalation {
    NoTier,
    /// No tier of that name, or one the namespace is not granted (the same to the session).
    TierNotFound {
        tier: String,
        namespace: String,
    },
    TierIsLevelZero {
        tier: String,
    },
    /// The operator has no tier API URL to give the worker.
    NotConfigured {
        tier: String,
    },
    Usable {
        tier: String,
        level: u8,
        /// (pod name, phase) of the Tier-1 pods serving the session, not being deleted.
        pods: Vec<(String, Tier1Phase)>,
    },
}

/// The worker pod, and what the first step did to it.
#[derive(Clone, Debug, PartialEq)]
pub enum Worker {
    /// Hibernated with no wake request since, or suspended by `spec.suspend`: its pod (if any)
    /// was deleted; `pod_left` while it is still there (terminating).
    Hibernating { suspended: bool, pod_left: bool },
    /// Ready, not busy, and idle past idleHibernateSeconds: its pod was deleted just now.
    IdledOut { report: WorkerReport },
    /// The pod kept (or created, or replaced); `report` when it is Ready and answered the poll.
    Running {
        state: WorkerState,
        report: Option<WorkerReport>,
    },
}

/// The status `observed` calls for, starting from `old`, and when to reconcile again (`None`:
/// on the next watch event only).
pub fn status(
    old: &HarnessSessionStatus,
    generation: Option<i64>,
    observed: &Observed,
) -> (HarnessSessionStatus, Option<Duration>) {
    let mut status = old.clone();
    status.observed_generation = generation;
    let set = |status: &mut HarnessSessionStatus,
               type_: &str,
               value: bool,
               reason: &str,
               message: String| {
        condition::set(
            &mut status.conditions,
            type_,
            value,
            reason,
            message,
            generation,
        );
    };
    let seen = match observed {
        Observed::Session(seen) => seen,
        Observed::NoWorkerTier(problem) => {
            let (reason, message) = match problem {
                WorkerTierProblem::NotLevelZero { tier, level } => (
                    reasons::WORKER_TIER_NOT_LEVEL_ZERO,
                    format!(
                        "SandboxTier {tier} has level {level}; workerTier must name a level-0 tier"
                    ),
                ),
                WorkerTierProblem::NotFound { tier, namespace } => (
                    reasons::WORKER_TIER_NOT_FOUND,
                    crate::grant::not_usable(tier, namespace),
                ),
            };
            set(&mut status, types::DEGRADED, true, reason, message.clone());
            set(&mut status, types::READY, false, reason, message.clone());
            kstatus(&mut status, generation, Progress::Stalled(reason, message));
            status.phase = Some(Phase::Pending);
            return (status, Some(WAIT_REQUEUE));
        }
        Observed::Invalid { message } => {
            let message = format!("the spec cannot be acted on: {message}");
            let reason = reasons::INVALID_SPEC;
            set(&mut status, types::DEGRADED, true, reason, message.clone());
            set(&mut status, types::READY, false, reason, message.clone());
            kstatus(&mut status, generation, Progress::Stalled(reason, message));
            unreachable(&mut status);
            status.phase = Some(Phase::Failed);
            // A spec change brings the session back; nothing else can make it valid.
            return (status, None);
        }
        Observed::Expired { releasing } => {
            status.phase = Some(Phase::Expired);
            unreachable(&mut status);
            status.worker_pod = None;
            let message = "lifetime.ttlSeconds passed: the worker pod, Tier-1 pods and workspace PVC are deleted and the session is kept (ttlAction Release); a larger ttlSeconds starts it again with an empty workspace";
            set(
                &mut status,
                types::READY,
                false,
                reasons::EXPIRED,
                message.into(),
            );
            nothing_wrong(&mut status, generation);
            if !*releasing {
                // Gone: a larger ttlSeconds starts the session again as a new one (a new claim,
                // or a warm pod's), not on a claim that no longer exists.
                status.workspace_claim = None;
            }
            let progress = if *releasing {
                Progress::Reconciling(
                    reasons::EXPIRING,
                    "the TTL passed: deleting the session's pods and workspace PVC".into(),
                )
            } else {
                Progress::Current("the session expired; its pods and PVC are released".into())
            };
            kstatus(&mut status, generation, progress);
            return (status, releasing.then_some(WAIT_REQUEUE));
        }
    };
    let serving_level = escalation(&mut status, generation, &seen.escalation);
    status.token_secret = Some(seen.token_secret.clone());
    if seen.token_secret_uid.is_some() {
        status.token_secret_uid = seen.token_secret_uid.clone();
    }
    status.worker_pod_uid = match &seen.worker {
        Worker::Running { .. } => seen.worker_pod_uid.clone(),
        _ => None,
    };
    status.workspace_claim = Some(seen.workspace_claim.clone());
    let (state, report) = match &seen.worker {
        Worker::Hibernating {
            suspended,
            pod_left,
        } => {
            status.phase = Some(Phase::Hibernated);
            unreachable(&mut status);
            status.worker_pod = None;
            if old.worker_pod.is_none() && old.workspace_claim.is_none() {
                // Suspended before its first worker: nothing of the session is in a claim yet,
                // so waking it is still its first start (a warm pod may be adopted then).
                status.workspace_claim = None;
            }
            let (reason, hibernated, ready) = if *suspended {
                (
                    reasons::SUSPENDED,
                    "spec.suspend is true: the worker pod is deleted and the workspace PVC kept; setting it to false wakes the session",
                    "the session is suspended (spec.suspend); kube-harness exec refuses it until spec.suspend is false",
                )
            } else {
                (
                    reasons::IDLE_TIMEOUT,
                    IDLE_HIBERNATED,
                    "the session is hibernated; the next exec wakes it",
                )
            };
            set(
                &mut status,
                types::HIBERNATED,
                true,
                reason,
                hibernated.into(),
            );
            let ready_reason = if *suspended {
                reasons::SUSPENDED
            } else {
                reasons::HIBERNATED
            };
            set(&mut status, types::READY, false, ready_reason, ready.into());
            nothing_wrong(&mut status, generation);
            let progress = if *pod_left {
                Progress::Reconciling(
                    reasons::HIBERNATING,
                    "the worker pod is being deleted".into(),
                )
            } else if *suspended {
                Progress::Current("the session is suspended as its spec asks".into())
            } else {
                Progress::Current("the session is hibernated; the next exec wakes it".into())
            };
            kstatus(&mut status, generation, progress);
            // A pod still terminating brings the session back with its deletion; this is only a
            // safety net.
            return (status, pod_left.then_some(WAIT_REQUEUE));
        }
        Worker::IdledOut { report } => {
            // As the worker answered: Awake until this pass deleted it.
            set(
                &mut status,
                types::HIBERNATED,
                false,
                reasons::AWAKE,
                "the worker pod is kept".into(),
            );
            apply_report(&mut status, report);
            status.phase = Some(Phase::Hibernated);
            unreachable(&mut status);
            status.worker_pod = None;
            set(
                &mut status,
                types::HIBERNATED,
                true,
                reasons::IDLE_TIMEOUT,
                IDLE_HIBERNATED.into(),
            );
            set(
                &mut status,
                types::READY,
                false,
                reasons::HIBERNATED,
                "the session is hibernated; the next exec wakes it".into(),
            );
            kstatus(
                &mut status,
                generation,
                Progress::Reconciling(
                    reasons::HIBERNATING,
                    "idle: the worker pod is being deleted".into(),
                ),
            );
            return (status, None);
        }
        Worker::Running { state, report } => (state, report),
    };
    status.worker_pod = Some(seen.worker_pod.clone());
    set(
        &mut status,
        types::HIBERNATED,
        false,
        reasons::AWAKE,
        "the worker pod is kept".into(),
    );
    let requeue = match state {
        WorkerState::Ready { ip } => {
            status.worker_endpoint = Some(format!("{ip}:{}", seen.worker_port));
            status.address = Some(seen.address.clone());
            if let Some(report) = report {
                apply_report(&mut status, report);
            }
            status.current_tier.get_or_insert(0);
            status.phase = Some(Phase::Ready);
            set(
                &mut status,
                types::READY,
                true,
                reasons::WORKER_READY,
                "the worker pod is running and answers on its API".into(),
            );
            nothing_wrong(&mut status, generation);
            kstatus(
                &mut status,
                generation,
                Progress::Current("the worker pod serves the session".into()),
            );
            READY_REQUEUE
        }
        WorkerState::Starting { reason } => {
            unreachable(&mut status);
            status.phase = Some(Phase::Provisioning);
            set(
                &mut status,
                types::READY,
                false,
                reasons::WORKER_STARTING,
                format!("waiting for the worker pod ({reason})"),
            );
            nothing_wrong(&mut status, generation);
            kstatus(
                &mut status,
                generation,
                Progress::Reconciling(
                    reasons::WORKER_STARTING,
                    format!("starting the worker pod ({reason})"),
                ),
            );
            if reason == ADOPTION_UNCONFIRMED || reason == reasons::WORKER_POD_NOT_OWNED {
                // A Ready pod whose worker has not confirmed this adoption: no pod event will
                // come, so ask again.
                WAIT_REQUEUE
            } else {
                STARTING_REQUEUE
            }
        }
        WorkerState::Failing { reason, message }
            if reason == reasons::QUOTA_EXCEEDED
                || reason == reasons::ADMISSION_REFUSED
                || reason == reasons::PERSISTENT_DIR_SOURCE_MISSING
                || reason == reasons::TOKEN_SECRET_REFUSED =>
        {
            // Not the pod failing: the namespace does not admit it, or lacks a Persistent Dir's
            // source (yet). Tried again, since freed quota or a created source sends no event.
            unreachable(&mut status);
            status.phase = Some(Phase::Pending);
            let what = if reason == reasons::PERSISTENT_DIR_SOURCE_MISSING
                || reason == reasons::TOKEN_SECRET_REFUSED
            {
                message.clone()
            } else {
                format!("the worker pod or its workspace claim was refused: {message}")
            };
            set(&mut status, types::READY, false, reason, what.clone());
            set(&mut status, types::DEGRADED, true, reason, what.clone());
            kstatus(&mut status, generation, Progress::Stalled(reason, what));
            WAIT_REQUEUE
        }
        WorkerState::Failing { reason, message } => {
            unreachable(&mut status);
            status.phase = Some(Phase::Failed);
            set(
                &mut status,
                types::READY,
                false,
                reasons::WORKER_FAILING,
                format!("{reason}: {message}"),
            );
            set(
                &mut status,
                types::DEGRADED,
                true,
                reasons::WORKER_FAILING,
                format!("the worker pod cannot start: {reason}: {message}"),
            );
            kstatus(
                &mut status,
                generation,
                Progress::Stalled(
                    reasons::WORKER_FAILING,
                    format!("the worker pod cannot start: {reason}: {message}"),
                ),
            );
            WAIT_REQUEUE
        }
        WorkerState::Gone => {
            unreachable(&mut status);
            status.phase = Some(Phase::Provisioning);
            set(
                &mut status,
                types::READY,
                false,
                reasons::WORKER_STARTING,
                "the worker pod ended; replacing it".into(),
            );
            kstatus(
                &mut status,
                generation,
                Progress::Reconciling(
                    reasons::WORKER_STARTING,
                    "the worker pod ended; replacing it".into(),
                ),
            );
            REPLACE_REQUEUE
        }
    };
    // While a Tier-1 pod serves, that is where commands run (whatever the worker said last).
    if let Some(level) = serving_level {
        status.current_tier = Some(level);
    }
    (status, Some(requeue))
}

const IDLE_HIBERNATED: &str = "no command for idleHibernateSeconds: the worker pod was deleted and the workspace PVC kept; the next exec wakes the session";

/// Where the operator stands with the spec, as kstatus (sigs.k8s.io/cli-utils) reads it.
enum Progress<'a> {
    /// Still working toward the spec: Reconciling True (reason, message), Stalled False.
    Reconciling(&'a str, String),
    /// Cannot get further without a change: Stalled True (reason, message), Reconciling False.
    Stalled(&'a str, String),
    /// Done for this spec: both False; the message says what the session is now.
    Current(String),
}

/// Sets Reconciling and Stalled, both always present, so that `kubectl wait` and kstatus read
/// them with the status's observedGeneration.
fn kstatus(status: &mut HarnessSessionStatus, generation: Option<i64>, progress: Progress<'_>) {
    let (reconciling, stalled) = match progress {
        Progress::Reconciling(reason, message) => (
            (true, reason, message),
            (false, reasons::AS_EXPECTED, "nothing is wrong".to_string()),
        ),
        Progress::Stalled(reason, message) => (
            (
                false,
                reasons::RECONCILED,
                "nothing can be done until the session, its tier or its namespace changes"
                    .to_string(),
            ),
            (true, reason, message),
        ),
        Progress::Current(message) => (
            (false, reasons::RECONCILED, message),
            (false, reasons::AS_EXPECTED, "nothing is wrong".to_string()),
        ),
    };
    for (type_, (value, reason, message)) in
        [(types::RECONCILING, reconciling), (types::STALLED, stalled)]
    {
        condition::set(
            &mut status.conditions,
            type_,
            value,
            reason,
            message,
            generation,
        );
    }
}

/// Degraded False: nothing is wrong.
fn nothing_wrong(status: &mut HarnessSessionStatus, generation: Option<i64>) {
    condition::set(
        &mut status.conditions,
        types::DEGRADED,
        false,
        reasons::AS_EXPECTED,
        "nothing is wrong",
        generation,
    );
}

/// No worker answers: neither its pod IP nor the Service's address is shown.
fn unreachable(status: &mut HarnessSessionStatus) {
    status.worker_endpoint = None;
    status.address = None;
}

/// The worker's own figures: usage, the tier it runs at, its last activity. A worker process
/// counts from zero, so the usage shown is what the session's earlier workers counted (carried
/// when a report first comes from a new instance) plus this one's report. A report from a worker
/// that started before the one counted now is from one already replaced: left out.
fn apply_report(status: &mut HarnessSessionStatus, report: &WorkerReport) {
    let usage = match &report.instance {
        // A worker too old to say which process it is: its counters as they are.
        None => report.usage.clone(),
        Some(instance) => {
            let carried = match status.usage_carried.take() {
                Some(c) if &c.worker == instance => c.usage,
                Some(c) if started_before(&report.started_at, &c.worker_started_at) => {
                    status.usage_carried = Some(c);
                    return;
                }
                // A new worker process: everything shown so far is carried.
                Some(_) => status.usage.clone().unwrap_or_default(),
                // The first report, or a status written before usage was carried (then the usage
                // shown was this worker's own).
                None => Usage::default(),
            };
            let usage = carried.plus(&report.usage);
            status.usage_carried = Some(CarriedUsage {
                worker: instance.clone(),
                worker_started_at: report.started_at.clone(),
                usage: carried,
            });
            usage
        }
    };
    status.usage = Some(usage);
    status.current_tier = Some(report.tier);
    status.last_activity_time = Some(report.last_activity.clone());
}

/// Whether RFC 3339 time `a` is strictly before `b` (unknown or unreadable: not before).
fn started_before(a: &Option<String>, b: &Option<String>) -> bool {
    let parse = |t: &Option<String>| t.as_deref()?.parse::<k8s_openapi::jiff::Timestamp>().ok();
    matches!((parse(a), parse(b)), (Some(a), Some(b)) if a < b)
}

/// Escalated says what an escalating command meets: refused (no usable tier, with why), a Tier-1
/// pod (True while one serves), or how the last one went. The tier API sets it as it happens; this
/// derives the same from the Tier-1 pods, so a lost write converges. Returns the tier level while
/// a Tier-1 pod serves.
fn escalation(
    status: &mut HarnessSessionStatus,
    generation: Option<i64>,
    seen: &Escalation,
) -> Option<u8> {
    let refused = |reason: &'static str, message: String| (false, reason, message);
    let mut serving = None;
    let (escalated, reason, message) = match seen {
        Escalation::NoTier => refused(reasons::NO_ESCALATION_TIER, "no escalation tier is configured: commands that need more than Tier-0 are refused with exit 126".to_string()),
        Escalation::TierNotFound { tier: t, namespace } => refused(reasons::ESCALATION_TIER_NOT_FOUND, format!("{}: escalating commands are refused with exit 126", crate::grant::not_usable(t, namespace))),
        Escalation::TierIsLevelZero { tier: t } => refused(reasons::ESCALATION_TIER_IS_LEVEL_ZERO, format!("SandboxTier {t} is a level-0 tier: escalating commands are refused with exit 126")),
        Escalation::NotConfigured { tier: t } => refused(reasons::ESCALATION_NOT_CONFIGURED, format!("escalation to SandboxTier {t} needs the operator's tier API URL (--tier-api-url): escalating commands are refused with exit 126")),
        Escalation::Usable { tier: t, level, pods } => {
            let now = status
                .conditions
                .iter()
                .find(|c| c.type_ == types::ESCALATED)
                .map(|c| c.reason.clone())
                .unwrap_or_default();
            let ready = pods.iter().find(|(_, p)| matches!(p, Tier1Phase::Ready { .. }));
            let failed = pods.iter().find_map(|(n, p)| match p {
                Tier1Phase::Failed { reason, message } => Some((n, reason, message)),
                _ => None,
            });
            if let Some((pod, _)) = ready {
                serving = Some(*level);
                (true, reasons::TIER1_READY, format!("Tier-1 pod {pod} of SandboxTier {t} serves a turn"))
            } else if let Some((pod, why, message)) = failed {
                (false, reasons::TIER1_FAILED, format!("Tier-1 pod {pod} of SandboxTier {t} failed: {why}: {message}"))
            } else if let Some((pod, _)) = pods.first() {
                (false, reasons::TIER1_PROVISIONING, format!("Tier-1 pod {pod} of SandboxTier {t} is starting"))
            } else if now == reasons::TIER1_READY || now == reasons::TIER1_PROVISIONING {
                (false, reasons::TURN_ENDED, format!("the turn's Tier-1 pod of SandboxTier {t} is gone"))
            } else if now == reasons::TURN_ENDED
                || now == reasons::TIER1_FAILED
                || now == reasons::TURN_TIMED_OUT
            {
                // How the last turn went stays until the next one escalates.
                return None;
            } else {
                (false, reasons::TIER1_AVAILABLE, format!("escalating commands run on a Tier-1 pod of SandboxTier {t} (level {level})"))
            }
        }
    };
    // The tier API's message names the turn; keep it while status and reason agree.
    let same = status.conditions.iter().any(|c| {
        c.type_ == types::ESCALATED && c.reason == reason && (c.status == "True") == escalated
    });
    let keeps_message = matches!(
        reason,
        reasons::TIER1_READY
            | reasons::TIER1_FAILED
            | reasons::TIER1_PROVISIONING
            | reasons::TIER1_AVAILABLE
    );
    if !same || !keeps_message {
        condition::set(
            &mut status.conditions,
            types::ESCALATED,
            escalated,
            reason,
            message,
            generation,
        );
    }
    serving
}

#[cfg(test)]
mod tests;
