//! Events for state changes, for both controllers and the tier API: one per condition that
//! changed status or reason.

use crate::context::Context;
use kube::runtime::events::{Event, EventType};
use kube::Resource;
use kube_harness_crds::condition::{reasons, types};
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
    (c.type_ == types::DEGRADED && c.status == "True")
        || (c.type_ == types::READY
            && c.status == "False"
            && c.reason != reasons::WORKER_STARTING
            && c.reason != reasons::HIBERNATED)
}
