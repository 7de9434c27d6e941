//! The SandboxTier controller: checks each tier against the classifier's capability matrix and
//! reports it Ready (or not, with a stable reason) in status; for escalation tiers it also keeps
//! the NetworkPolicy of their Tier-1 pods and their warm pool (status warmReady, warmUpdated and
//! the /scale selector).

use crate::context::Context;
use crate::error::{Error, Result};
use crate::labels::MANAGER;
use crate::tier1;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use kube_harness_classify::{matrix, RealExecReason};
use kube_harness_crds::condition::{self, reasons, types};
use kube_harness_crds::{Capability, SandboxTier, SandboxTierSpec, SandboxTierStatus};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Why a tier is or is not usable: (ready, reason, message).
pub fn check(spec: &SandboxTierSpec) -> (bool, &'static str, String) {
    let Some(matrix) = matrix::get(None) else {
        return (
            false,
            reasons::MATRIX_UNAVAILABLE,
            "no capability matrix is built in".into(),
        );
    };
    let known: Vec<&str> = RealExecReason::ALL
        .iter()
        .map(|r| r.as_str())
        .chain(["python", "javascript", "network"])
        .collect();
    if let Some(c) = spec
        .capabilities
        .iter()
        .find(|c| !known.contains(&c.as_str()))
    {
        return (
            false,
            reasons::UNKNOWN_CAPABILITY,
            format!(
                "capability {} is not known to capability matrix {}",
                c.as_str(),
                matrix.version()
            ),
        );
    }
    if spec.template.image.trim().is_empty() {
        return (
            false,
            reasons::IMAGE_MISSING,
            "template.image is empty".into(),
        );
    }
    let escalates = spec.capabilities.iter().any(|c| {
        !matches!(
            c,
            Capability::Python | Capability::Javascript | Capability::Network
        )
    });
    if spec.level > 0 && !escalates {
        return (
            false,
            reasons::NO_ESCALATION_CAPABILITY,
            "an escalation tier must provide at least one of version-control, build-toolchain, package-manager, network-client or containers".into(),
        );
    }
    let what = if spec.level == 0 {
        "Tier-0 worker tier".to_string()
    } else {
        format!(
            "escalation tier (level {}) providing {}",
            spec.level,
            spec.capabilities
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    (
        true,
        reasons::VALID,
        format!(
            "{what}; checked against capability matrix {}",
            matrix.version()
        ),
    )
}

/// Longest name of an escalation tier: `t1-<name>` names its NetworkPolicy (63 at most).
pub const MAX_ESCALATION_NAME: usize = 60;

pub async fn reconcile(tier: Arc<SandboxTier>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let (mut ready, mut reason, mut message) = check(&tier.spec);
    let name = tier.name_any();
    if tier.spec.level > 0 && name.len() > MAX_ESCALATION_NAME {
        // Its name is a label value of its pods and part of its NetworkPolicy's name.
        (ready, reason, message) = (
            false,
            reasons::NAME_TOO_LONG,
            format!("an escalation tier's name must be at most {MAX_ESCALATION_NAME} characters (it is a label value of its pods); {name} has {}", name.len()),
        );
    }
    let mut status = tier.status.clone().unwrap_or_default();
    let generation = tier.metadata.generation;
    let condition_changed = condition::set(
        &mut status.conditions,
        types::READY,
        ready,
        reason,
        message.clone(),
        generation,
    );
    let mut requeue = Duration::from_secs(600);
    if tier.spec.level > 0 && reason != reasons::NAME_TOO_LONG {
        // The warm pool, with the tier's NetworkPolicy where it keeps pods (an ordinary pod's
        // open applies it in the session's namespace).
        let pool = tier1::pool::reconcile(&tier, &ctx, ready).await?;
        set_degraded(&ctx, &tier, &mut status, pool.failing.as_ref()).await;
        status.warm_ready = Some(pool.ready);
        status.warm_updated = Some(pool.updated);
        status.selector = Some(tier1::pod::pool_selector(&tier.name_any()));
        if pool.ready < tier.spec.warm_pool.size {
            requeue = Duration::from_secs(30);
        }
    }
    if tier.spec.level == 0 {
        // The level-0 warm pool: worker pods in the namespaces it serves.
        let pool = crate::warm::pool::reconcile(&tier, &ctx, ready).await?;
        set_degraded(&ctx, &tier, &mut status, pool.failing.as_ref()).await;
        status.warm_ready = Some(pool.ready);
        status.warm_updated = Some(pool.updated);
        status.selector = Some(crate::warm::objects::idle_selector(&tier.name_any()));
        if pool.ready < tier.spec.warm_pool.size {
            requeue = Duration::from_secs(30);
        }
    }
    status.matrix_version = matrix::get(None).map(|m| m.version().to_string());
    status.observed_generation = generation;
    if tier.status.as_ref() != Some(&status) {
        write_status(&ctx, &tier.name_any(), &status).await?;
    }
    if condition_changed {
        crate::events::publish(&ctx, &*tier, !ready, reason, &message, "Validate").await;
    }
    ctx.metrics
        .reconciled("sandboxtier", started.elapsed().as_secs_f64());
    Ok(Action::requeue(requeue))
}

/// Degraded from a pool's failing pod (or namespace), with an Event when it turns on, and when
/// it turns off after having been on.
async fn set_degraded(
    ctx: &Context,
    tier: &SandboxTier,
    status: &mut SandboxTierStatus,
    failing: Option<&(String, String)>,
) {
    let (degraded, why, note) = match failing {
        Some((reason, message)) => (
            true,
            reasons::POOL_PODS_FAILING,
            format!("{reason}: {message}"),
        ),
        None => (false, reasons::AS_EXPECTED, "nothing is wrong".to_string()),
    };
    if condition::set(
        &mut status.conditions,
        types::DEGRADED,
        degraded,
        why,
        note.clone(),
        tier.metadata.generation,
    ) && (degraded
        || tier
            .status
            .as_ref()
            .is_some_and(|s| condition::is_true(&s.conditions, types::DEGRADED)))
    {
        crate::events::publish(ctx, tier, degraded, why, &note, "Pool").await;
    }
}

async fn write_status(ctx: &Context, name: &str, status: &SandboxTierStatus) -> Result<()> {
    let api: Api<SandboxTier> = Api::all(ctx.client.clone());
    let patch = json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "SandboxTier",
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(patch),
    )
    .await
    .map_err(Error::Kube)?;
    Ok(())
}

pub fn error_policy(tier: Arc<SandboxTier>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(tier = %tier.name_any(), %error, "SandboxTier reconcile failed");
    ctx.metrics.failed("sandboxtier", error.metric_label());
    Action::requeue(ctx.backoff(&format!("tier/{}", tier.name_any())))
}
