//! Asking the worker itself: Ready as soon as its container runs and it answers (before the
//! kubelet's probe passes), its report (usage, activity, adoption) once Ready, and idling out a
//! worker that has been idle long enough.

use super::lifetime::idle_expired;
use super::pod::delete_worker;
use crate::context::Context;
use crate::error::Result;
use crate::session::observe::{
    confirmed_ready, just_started, started_ip, WorkerState, ADOPTION_UNCONFIRMED, FIRST_PROBE,
};
use crate::session::status::Worker;
use crate::session::trust;
use crate::session::usage::{self, WorkerReport};
use crate::warm;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use kube_harness_crds::{HarnessSession, HarnessSessionStatus};

/// The worker pod the probe asks about, and how to reach it.
pub struct Probe<'a> {
    pub old: &'a HarnessSessionStatus,
    pub pods: &'a Api<Pod>,
    /// The worker pod's name, and the pod when there is one.
    pub name: &'a str,
    pub pod: Option<&'a Pod>,
    /// The session's bearer token, which the worker asks for.
    pub token: &'a str,
}

/// What the worker is, from the pod's `state` and, once its container runs, from its own answer;
/// a finished pod, or one that is not this session's adoption, is deleted.
pub async fn worker(
    session: &HarnessSession,
    ctx: &Context,
    probe: Probe<'_>,
    state: WorkerState,
) -> Result<Worker> {
    let port = ctx.config.worker_port;
    // An adopted pod serves this session only once it reports this session's adoption.
    let adopted = probe
        .pod
        .and_then(|p| p.annotations().get(warm::objects::ADOPTED).cloned());
    let bound = |r: &WorkerReport| adopted.is_none() || r.settings == adopted;
    let (state, polled) = early_ready(&probe, port, state, &bound).await;
    let started = probe.pod.and_then(trust::pod_started);
    let bound_report = |r: WorkerReport| trust::bounded(r, started, Timestamp::now());
    let ip = match state {
        WorkerState::Ready { ip } => ip,
        WorkerState::Gone => {
            delete_worker(probe.pods, probe.name).await?;
            return Ok(Worker::Running {
                state: WorkerState::Gone,
                report: None,
            });
        }
        state => {
            return Ok(Worker::Running {
                state,
                report: None,
            })
        }
    };
    let report = match polled {
        Some(report) => Some(report),
        // An adoption is confirmed by the worker's answer now.
        None if adopted.is_some() => usage::poll(&ip, port, probe.token).await,
        // Otherwise the latest background poll will do: a worker that does not answer holds up no
        // reconcile (docs/performance.md, "Scale").
        None => {
            ctx.polls
                .report(
                    ObjectRef::from_obj(session),
                    &ip,
                    port,
                    probe.token,
                    ctx.report_wait,
                )
                .await
        }
    };
    Ok(match report.map(bound_report) {
        // An adopted pod that does not answer is not known to serve this session.
        None if adopted.is_some() => Worker::Running {
            state: WorkerState::Starting {
                reason: ADOPTION_UNCONFIRMED.into(),
            },
            report: None,
        },
        Some(report) if !bound(&report) => {
            // Not the adoption this session made: never serve it.
            delete_worker(probe.pods, probe.name).await?;
            Worker::Running {
                state: WorkerState::Gone,
                report: None,
            }
        }
        Some(report)
            if !report.busy && idle_expired(session, &report.last_activity, Timestamp::now()) =>
        {
            // The report may be a poll old: only the worker's answer now decides.
            match usage::poll(&ip, port, probe.token).await.map(bound_report) {
                Some(now)
                    if !now.busy && idle_expired(session, &now.last_activity, Timestamp::now()) =>
                {
                    delete_worker(probe.pods, probe.name).await?;
                    ctx.polls.forget(&ObjectRef::from_obj(session));
                    Worker::IdledOut { report: now }
                }
                now => Worker::Running {
                    state: WorkerState::Ready { ip },
                    report: now.or(Some(report)),
                },
            }
        }
        report => Worker::Running {
            state: WorkerState::Ready { ip },
            report,
        },
    })
}

/// A starting worker whose containers run is Ready when it answers ready itself (and, adopted,
/// bound to this session): the kubelet's readiness probe runs once a period and sometimes misses
/// the start (a whole second lost, docs/performance.md). No poll loop: a worker not ready yet is
/// seen again when the probe passes (a pod watch event). Returns the answer it got.
async fn early_ready(
    probe: &Probe<'_>,
    port: u16,
    state: WorkerState,
    bound: &impl Fn(&WorkerReport) -> bool,
) -> (WorkerState, Option<WorkerReport>) {
    let ip = match (&state, probe.pod.and_then(started_ip)) {
        (WorkerState::Starting { .. }, Some(ip)) => ip,
        _ => return (state, None),
    };
    match usage::poll_within(&ip, port, probe.token, usage::EARLY_POLL_TIMEOUT)
        .await
        .filter(|r| r.ready && bound(r))
    {
        Some(report) => (WorkerState::Ready { ip }, Some(report)),
        // One slow answer (300 ms on a busy node) does not take back a Ready this pod earned
        // since its container started: Ready would flap until the kubelet's probe passes. Past
        // the probe's first period a worker the kubelet does not call ready is not (hung,
        // restarted, crash-looping).
        None if confirmed_ready(probe.old, probe.name, &ip, port)
            && probe
                .pod
                .is_some_and(|p| just_started(p, FIRST_PROBE, Timestamp::now())) =>
        {
            (WorkerState::Ready { ip }, None)
        }
        None => (state, None),
    }
}
