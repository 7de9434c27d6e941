//! The status a reconcile computes, case by case: observations in, phase, conditions, fields and
//! requeue out. No API server. The helpers below build observations and read conditions; each
//! module asks one question of [`super::status`].

mod escalated;
mod kstatus;
mod lifetime;
mod phase;
mod usage;

use super::*;
use kube_harness_crds::session::Usage;
use kube_harness_crds::Condition;

const PORT: u16 = 8080;

fn report(tier: u8, busy: bool) -> WorkerReport {
    WorkerReport {
        usage: Usage {
            turns: 2,
            commands_tier0: 9,
            commands_tier1: 1,
            refusals: 0,
            tier0_share: Some("90.0%".into()),
        },
        tier,
        busy,
        last_activity: "2025-01-01T00:00:00Z".into(),
        ready: true,
        settings: None,
        instance: None,
        started_at: None,
    }
}

/// A report of `tier0` Tier-0 commands from worker process `instance`, started at `started`.
fn from_worker(instance: &str, started: &str, tier0: u64) -> WorkerReport {
    WorkerReport {
        usage: Usage::new(1, tier0, 0, 0),
        instance: Some(instance.into()),
        started_at: Some(started.into()),
        ..report(0, false)
    }
}

const ADDRESS: &str = "http://s-worker.ns.svc:8080";

fn running(state: WorkerState, report: Option<WorkerReport>) -> Worker {
    Worker::Running { state, report }
}

fn ready() -> WorkerState {
    WorkerState::Ready {
        ip: "10.0.0.7".into(),
    }
}

fn seen(escalation: Escalation, worker: Worker) -> Observed {
    Observed::Session(Box::new(Seen {
        token_secret: "s-token".into(),
        token_secret_uid: None,
        worker_pod_uid: None,
        worker_pod: "s-worker".into(),
        workspace_claim: "s-workspace".into(),
        worker_port: PORT,
        address: ADDRESS.into(),
        escalation,
        worker,
    }))
}

fn usable(pods: Vec<(&str, Tier1Phase)>) -> Escalation {
    Escalation::Usable {
        tier: "t1".into(),
        level: 1,
        pods: pods.into_iter().map(|(n, p)| (n.to_string(), p)).collect(),
    }
}

/// A status holding these conditions, as an earlier reconcile or the tier API left it.
fn with(conditions: &[(&str, bool, &str, &str)]) -> HarnessSessionStatus {
    let mut status = HarnessSessionStatus::default();
    for (type_, value, reason, message) in conditions {
        condition::set(
            &mut status.conditions,
            type_,
            *value,
            reason,
            *message,
            Some(1),
        );
    }
    status
}

fn get<'a>(status: &'a HarnessSessionStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// (status, reason) of a condition, `None` when it is absent.
fn cond(status: &HarnessSessionStatus, type_: &str) -> Option<(String, String)> {
    get(status, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

fn t(reason: &str) -> Option<(String, String)> {
    Some(("True".into(), reason.into()))
}

fn f(reason: &str) -> Option<(String, String)> {
    Some(("False".into(), reason.into()))
}
