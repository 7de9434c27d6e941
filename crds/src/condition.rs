//! Status conditions in the metav1.Condition shape, and the one way to set them: a transition
//! time that changes only when the status does.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Condition types of a HarnessSession and a SandboxTier.
pub mod types {
    pub const READY: &str = "Ready";
    pub const HIBERNATED: &str = "Hibernated";
    pub const ESCALATED: &str = "Escalated";
    pub const DEGRADED: &str = "Degraded";
}

/// Sets `type_` in `conditions` (adding it if absent). `lastTransitionTime` moves only when the
/// status changes, as metav1.Condition requires; reason, message and observedGeneration always
/// follow the latest observation. Returns whether anything changed.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> bool {
    let status = if status { "True" } else { "False" }.to_string();
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let changed = c.status != status
                || c.reason != reason
                || c.message != message
                || c.observed_generation != generation;
            if c.status != status {
                c.last_transition_time = now();
            }
            c.status = status;
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.into(),
                status,
                reason: reason.into(),
                message,
                observed_generation: generation,
                last_transition_time: now(),
            });
            true
        }
    }
}

/// Whether `type_` is present with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn now() -> Time {
    Time(Timestamp::now())
}
