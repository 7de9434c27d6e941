//! What a Tier-1 sandbox means for its HarnessSession: the Escalated condition, status.currentTier
//! and an Event for each opened, failed and ended sandbox. Written by whichever replica answered
//! the worker (a JSON merge patch of just these fields); the leader's session reconcile derives
//! the same from the Tier-1 pods, so a lost write converges.

use crate::context::Context;
use crate::events;
use kube::api::{Patch, PatchParams};
use kube::Api;
use kube_harness_crds::condition::{self, reasons, types};
use kube_harness_crds::HarnessSession;
use kube_harness_protocol::tier1::{Phase, Sandbox};
use serde_json::json;

/// Field manager of the tier API's status patches.
pub const MANAGER: &str = "kube-harness-tier-api";

/// What the session says about escalation: the Escalated condition and status.currentTier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    pub escalated: bool,
    pub reason: &'static str,
    pub message: String,
    pub current_tier: u8,
    /// The sandbox's Failed reason, when this reports a failure.
    pub failure: Option<String>,
}

/// The update a sandbox in `phase` calls for (none while it is Pending).
pub fn for_sandbox(sandbox: &Sandbox, tier: &str, level: u8) -> Option<Update> {
    match sandbox.phase {
        Phase::Ready => Some(Update {
            escalated: true,
            reason: reasons::TIER1_READY,
            message: format!(
                "turn {} runs on Tier-1 pod {} of SandboxTier {tier} (source {}{})",
                sandbox.turn,
                sandbox.pod_name(),
                sandbox.source_label(),
                sandbox
                    .miss_reason
                    .as_deref()
                    .map(|m| format!(", missReason {m}"))
                    .unwrap_or_default()
            ),
            current_tier: level,
            failure: None,
        }),
        Phase::Failed => Some(Update {
            escalated: false,
            reason: reasons::TIER1_FAILED,
            message: format!(
                "Tier-1 pod {} of SandboxTier {tier} failed: {}: {}",
                sandbox.pod_name(),
                sandbox.reason.as_deref().unwrap_or("Failed"),
                sandbox.message.as_deref().unwrap_or_default()
            ),
            current_tier: 0,
            failure: Some(sandbox.reason.clone().unwrap_or_else(|| "Failed".into())),
        }),
        _ => None,
    }
}

/// An Event a status write calls for, published by the caller (see [`write`]).
pub struct Announcement {
    pub session: HarnessSession,
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Announcement {
    pub async fn publish(&self, ctx: &Context) {
        events::publish(
            ctx,
            &self.session,
            self.warning,
            self.reason,
            &self.message,
            "Escalate",
        )
        .await;
    }
}

/// Sets Escalated and currentTier when they differ, with an Event. A failure to write is logged:
/// the worker's answer does not depend on it, and the leader's reconcile repairs it.
/// `only_if`: change nothing unless the condition's reason is one of these now.
pub async fn set(
    ctx: &Context,
    ns: &str,
    session: &str,
    update: &Update,
    only_if: Option<&[&str]>,
) {
    if let Some(event) = write(ctx, ns, session, update, only_if, None).await {
        event.publish(ctx).await;
    }
}

/// [`set`] without its Event: returned when the condition changed, for the caller to publish
/// off its answer's path. `read`: the session as read just now beside other requests (else it
/// is read here); the write is built on it as on a read of its own.
pub async fn write(
    ctx: &Context,
    ns: &str,
    session: &str,
    update: &Update,
    only_if: Option<&[&str]>,
    read: Option<Result<Option<HarnessSession>, kube::Error>>,
) -> Option<Announcement> {
    let Update {
        escalated,
        reason,
        message,
        current_tier,
        ..
    } = update;
    let (escalated, reason, current_tier) = (*escalated, *reason, *current_tier);
    let started = std::time::Instant::now();
    let step = |what: &str| {
        tracing::debug!(
            ns,
            session,
            reason,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "tier-1 report: {what}"
        )
    };
    let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), ns);
    let read = match read {
        Some(read) => read,
        None => api.get_opt(session).await,
    };
    let obj = match read {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(error = %e, session, "reading the session for its Escalated condition");
            return None;
        }
    };
    step("session read");
    let mut status = obj.status.clone().unwrap_or_default();
    if let Some(allowed) = only_if {
        let now = status
            .conditions
            .iter()
            .find(|c| c.type_ == types::ESCALATED)
            .map(|c| c.reason.as_str())
            .unwrap_or_default();
        if !allowed.contains(&now) {
            return None;
        }
    }
    let changed = condition::set(
        &mut status.conditions,
        types::ESCALATED,
        escalated,
        reason,
        message.clone(),
        obj.metadata.generation,
    );
    if !changed && status.current_tier == Some(current_tier) {
        return None;
    }
    let patch = json!({"status": {"conditions": status.conditions, "currentTier": current_tier}});
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    if let Err(e) = api
        .patch_status(session, &params, &Patch::Merge(patch))
        .await
    {
        tracing::warn!(error = %e, session, "writing the session's Escalated condition");
        return None;
    }
    step("status written");
    if !changed {
        return None;
    }
    if let Some(why) = &update.failure {
        ctx.metrics.tier1_failed(why);
    }
    Some(Announcement {
        session: obj,
        warning: reason == reasons::TIER1_FAILED || reason == reasons::TURN_TIMED_OUT,
        reason,
        message: message.clone(),
    })
}
