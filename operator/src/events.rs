//! Events for state changes: one per condition that changed status or reason.

use crate::context::Context;
use kube::runtime::events::{Event, EventType};
use kube::Resource;
use kube_harness_crds::Condition;

/// Publishes one Event; a failure to publish is logged, never fails the reconcile.
pub async fn publish<K>(
    ctx: &Context,
    obj: &K,
    warning: bool,
    reason: &str,
    note: &str,
    action: &str,
) where
    K: Resource<DynamicType = ()>,
{
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "could not publish Event");
    }
}

/// Conditions in `new` whose status or reason differ from `old`.
pub fn changed<'a>(old: &[Condition], new: &'a [Condition]) -> Vec<&'a Condition> {
    new.iter()
        .filter(|c| {
            !old.iter()
                .any(|o| o.type_ == c.type_ && o.status == c.status && o.reason == c.reason)
        })
        .collect()
}

/// Whether a condition change is bad news (a Warning Event).
pub fn is_warning(c: &Condition) -> bool {
    (c.type_ == "Degraded" && c.status == "True")
        || (c.type_ == "Ready"
            && c.status == "False"
            && !matches!(
                c.reason.as_str(),
                "WorkerStarting" | "Hibernated" | "Provisioning"
            ))
}
