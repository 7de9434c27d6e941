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

/// Conditions in `new` whose status or reason differ from `old`. A condition's first appearance
/// is the initial state, not a change: it is an Event only when it is bad news ([`is_warning`]) or
/// True (Degraded, Hibernated, Escalated, Ready at once). A new session's Ready=False
/// WorkerStarting, Degraded=False, Hibernated=False and Escalated=False were four Events per
/// session, and Events a quarter of all API requests at 300 new sessions (docs/performance.md,
/// "Scale"); its status shows them all the same.
///
/// Reconciling and Stalled are never Events: they restate Ready and Degraded for kstatus, whose
/// changes are Events already.
pub fn changed<'a>(old: &[Condition], new: &'a [Condition]) -> Vec<&'a Condition> {
    new.iter()
        .filter(|c| c.type_ != types::RECONCILING && c.type_ != types::STALLED)
        .filter(|c| match old.iter().find(|o| o.type_ == c.type_) {
            Some(o) => o.status != c.status || o.reason != c.reason,
            None => c.status == "True" || is_warning(c),
        })
        .collect()
}

/// Whether a condition change is bad news (a Warning Event).
pub fn is_warning(c: &Condition) -> bool {
    (c.type_ == types::DEGRADED && c.status == "True")
        || (c.type_ == types::READY
            && c.status == "False"
            && c.reason != reasons::WORKER_STARTING
            && c.reason != reasons::HIBERNATED
            && c.reason != reasons::SUSPENDED
            && c.reason != reasons::EXPIRED)
}

#[cfg(test)]
mod tests {
    use super::changed;
    use kube_harness_crds::condition::{reasons, set, types};

    #[test]
    fn a_first_condition_is_an_event_only_when_true_or_bad_news_and_every_later_change_is() {
        let mut old = Vec::new();
        let mut new = Vec::new();
        set(
            &mut new,
            types::READY,
            false,
            reasons::WORKER_STARTING,
            "",
            None,
        );
        set(
            &mut new,
            types::DEGRADED,
            false,
            reasons::AS_EXPECTED,
            "",
            None,
        );
        set(&mut new, types::HIBERNATED, false, reasons::AWAKE, "", None);
        set(
            &mut new,
            types::ESCALATED,
            false,
            reasons::NO_ESCALATION_TIER,
            "",
            None,
        );
        assert!(changed(&old, &new).is_empty());
        // A first appearance that is bad news is an Event.
        let mut failing = Vec::new();
        set(
            &mut failing,
            types::READY,
            false,
            reasons::WORKER_TIER_NOT_FOUND,
            "",
            None,
        );
        assert_eq!(changed(&[], &failing).len(), 1);

        old.clone_from(&new);
        set(
            &mut new,
            types::READY,
            true,
            reasons::WORKER_READY,
            "",
            None,
        );
        set(
            &mut new,
            types::DEGRADED,
            true,
            reasons::WORKER_FAILING,
            "",
            None,
        );
        let later: Vec<_> = changed(&old, &new)
            .iter()
            .map(|c| c.type_.clone())
            .collect();
        assert_eq!(
            later,
            vec![types::READY.to_string(), types::DEGRADED.to_string()]
        );

        // A condition that first appears True is news.
        let mut fresh = Vec::new();
        set(
            &mut fresh,
            types::HIBERNATED,
            true,
            reasons::IDLE_TIMEOUT,
            "",
            None,
        );
        assert_eq!(changed(&[], &fresh).len(), 1);
    }

    #[test]
    fn reconciling_and_stalled_are_never_events() {
        let mut new = Vec::new();
        set(
            &mut new,
            types::RECONCILING,
            true,
            reasons::WORKER_STARTING,
            "",
            None,
        );
        set(
            &mut new,
            types::STALLED,
            true,
            reasons::QUOTA_EXCEEDED,
            "",
            None,
        );
        assert!(changed(&[], &new).is_empty());
        let old = new.clone();
        set(
            &mut new,
            types::RECONCILING,
            false,
            reasons::RECONCILED,
            "",
            None,
        );
        set(
            &mut new,
            types::STALLED,
            false,
            reasons::AS_EXPECTED,
            "",
            None,
        );
        assert!(changed(&old, &new).is_empty());
    }
}
