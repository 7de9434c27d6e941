//! A turn's status as one pure function of its record, the pod the record names, and now: the
//! controller computes it, compares it with what is written, and writes it once.

use crate::labels;
use crate::tier1::{record, state};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube_harness_crds::condition::{self, reasons, types};
use kube_harness_crds::{HarnessTurn, HarnessTurnStatus, TurnPhase};
use std::time::Duration;

/// How long a recorded pod may be missing before the turn is Failed: an open records the
/// ordinary pod before it creates it.
pub const POD_MISSING_GRACE: Duration = Duration::from_secs(30);

/// Whether `pod` is the one serving `turn`: named by its record, carrying its turn and its
/// session object's uid (a pod that was released, or is another session's, is not).
pub fn serves(turn: &HarnessTurn, pod: &Pod) -> bool {
    let uid = turn.labels().get(labels::SESSION_UID).map(String::as_str);
    record::holder(turn) == Some(pod.name_any().as_str())
        && record::pod_serves(pod, &turn.spec.session, uid, &turn.spec.turn)
}

/// The status of `turn` given the pod its record names (`None`: not found, or not serving it).
/// Conditions keep their transition times from the written status.
pub fn status(turn: &HarnessTurn, pod: Option<&Pod>, now: Timestamp) -> HarnessTurnStatus {
    let before = turn.status.clone().unwrap_or_default();
    let generation = turn.metadata.generation;
    let mut out = HarnessTurnStatus {
        observed_generation: generation,
        conditions: before.conditions,
        ..HarnessTurnStatus::default()
    };
    let id = &turn.spec.turn;
    let holder = record::holder(turn).unwrap_or("");
    let (phase, ready, reason, message) = if record::ended(turn) {
        out.ended_at = turn.annotations().get(labels::TURN_ENDED).cloned();
        let message = format!("turn {id} ended");
        (TurnPhase::Ended, false, reasons::TURN_ENDED, message)
    } else if let Some(pod) = pod.filter(|p| serves(turn, p)) {
        let view = state::sandbox(pod, id, None);
        out.source = Some(match view.reused {
            true => "kept".into(),
            false => view.source_label().into(),
        });
        out.miss_reason = view.miss_reason;
        out.deadline = pod.annotations().get(labels::TURN_DEADLINE).cloned();
        match state::phase(pod) {
            state::Phase::Pending => {
                let message = format!("Tier-1 pod {holder} is starting");
                (
                    TurnPhase::Pending,
                    false,
                    reasons::TIER1_PROVISIONING,
                    message,
                )
            }
            state::Phase::Ready { ip } => {
                out.pod_ip = Some(ip);
                let message = format!("Tier-1 pod {holder} serves turn {id}");
                (TurnPhase::Ready, true, reasons::TIER1_READY, message)
            }
            state::Phase::Failed { reason, message } => {
                let message = format!("{reason}: {message}");
                (TurnPhase::Failed, false, reasons::TIER1_FAILED, message)
            }
        }
    } else {
        let created = turn.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let young = created
            .is_none_or(|t| now.duration_since(t).as_secs() <= POD_MISSING_GRACE.as_secs() as i64);
        match young {
            true => {
                let message = format!("Tier-1 pod {holder} is being made");
                (
                    TurnPhase::Pending,
                    false,
                    reasons::TIER1_PROVISIONING,
                    message,
                )
            }
            false => {
                let message = format!("Tier-1 pod {holder} is gone or serves the turn no longer");
                (TurnPhase::Failed, false, reasons::TIER1_FAILED, message)
            }
        }
    };
    out.phase = Some(phase);
    condition::set(
        &mut out.conditions,
        types::READY,
        ready,
        reason,
        message,
        generation,
    );
    out
}

#[cfg(test)]
mod tests;
