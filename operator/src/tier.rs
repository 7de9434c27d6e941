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

/// Why a named tier is or is not usable: [`check`], and an escalation tier's name must fit in
/// a label value of its pods.
pub fn check_named(name: &str, spec: &SandboxTierSpec) -> (bool, &'static str, String) {
    if spec.level > 0 && name.len() > MAX_ESCALATION_NAME {
        // Its name is a label value of its pods and part of its NetworkPolicy's name.
        return (
            false,
            reasons::NAME_TOO_LONG,
            format!("an escalation tier's name must be at most {MAX_ESCALATION_NAME} characters (it is a label value of its pods); {name} has {}", name.len()),
        );
    }
    check(spec)
}

/// What a tier reconcile found: its check and, for a tier whose pool is kept, the pool.
#[derive(Clone, Debug, PartialEq)]
pub struct TierObserved {
    /// [`check_named`]'s verdict: (ready, reason, message).
    pub check: (bool, &'static str, String),
    /// The warm pool (absent for an escalation tier whose name is too long: it gets no pods).
    pub pool: Option<PoolSeen>,
    /// The capability matrix version the tier was checked against.
    pub matrix_version: Option<String>,
}

/// A tier's warm pool as its reconcile left it.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSeen {
    /// `warmPool.size`.
    pub size: u32,
    pub ready: u32,
    pub updated: u32,
    /// The /scale selector of the idle pool pods.
    pub selector: String,
    /// (reason, message) of a pool pod (or served namespace) that cannot start.
    pub failing: Option<(String, String)>,
}

/// The status `observed` calls for, starting from `old`: Ready (the check), Degraded (the pool's
/// pods), and the kstatus pair: Stalled True while the tier is unusable or its pool pods cannot
/// start (the same reason), else Reconciling True while the pool has fewer ready pods than its
/// size, else both False. Pure: tests feed it observations.
pub fn tier_status(
    old: &SandboxTierStatus,
    generation: Option<i64>,
    observed: &TierObserved,
) -> SandboxTierStatus {
    let mut status = old.clone();
    let (ready, reason, message) = &observed.check;
    let mut set = |type_: &str, value: bool, reason: &str, message: String| {
        condition::set(
            &mut status.conditions,
            type_,
            value,
            reason,
            message,
            generation,
        );
    };
    set(types::READY, *ready, reason, message.clone());
    let mut stalled = (!*ready).then(|| (*reason, message.clone()));
    let mut reconciling = None;
    if let Some(pool) = &observed.pool {
        match &pool.failing {
            Some((why, note)) => {
                let note = format!("{why}: {note}");
                set(
                    types::DEGRADED,
                    true,
                    reasons::POOL_PODS_FAILING,
                    note.clone(),
                );
                stalled = stalled.or(Some((reasons::POOL_PODS_FAILING, note)));
            }
            None => set(
                types::DEGRADED,
                false,
                reasons::AS_EXPECTED,
                "nothing is wrong".into(),
            ),
        }
        if pool.ready < pool.size {
            reconciling = Some((
                reasons::WARM_POOL_FILLING,
                format!(
                    "the warm pool has {} of {} pods ready ({} built from the current template)",
                    pool.ready, pool.size, pool.updated
                ),
            ));
        }
        status.warm_ready = Some(pool.ready);
        status.warm_updated = Some(pool.updated);
        status.selector = Some(pool.selector.clone());
    }
    match stalled {
        Some((reason, message)) => {
            set(types::STALLED, true, reason, message);
            set(
                types::RECONCILING,
                false,
                reasons::RECONCILED,
                "nothing can be done until the tier or its pool's pods change".into(),
            );
        }
        None => {
            set(
                types::STALLED,
                false,
                reasons::AS_EXPECTED,
                "nothing is wrong".into(),
            );
            match reconciling {
                Some((reason, message)) => set(types::RECONCILING, true, reason, message),
                None => set(
                    types::RECONCILING,
                    false,
                    reasons::RECONCILED,
                    "the tier is checked and its warm pool is full".into(),
                ),
            }
        }
    }
    status.matrix_version = observed.matrix_version.clone();
    status.observed_generation = generation;
    status
}

/// The three steps of the session reconcile, for a tier: keep its children (an escalation tier's
/// NetworkPolicy, a warm pool), compute its status ([`tier_status`], pure), write it once, with an
/// Event when Ready or Degraded changes.
pub async fn reconcile(tier: Arc<SandboxTier>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let name = tier.name_any();
    let (ready, reason, message) = check_named(&name, &tier.spec);
    let mut requeue = Duration::from_secs(600);
    let pool = if tier.spec.level > 0 && reason != reasons::NAME_TOO_LONG {
        // The warm pool, with the tier's NetworkPolicy where it keeps pods (an ordinary pod's
        // open applies it in the session's namespace).
        let pool = tier1::pool::reconcile(&tier, &ctx, ready).await?;
        Some(PoolSeen {
            size: tier.spec.warm_pool.size,
            ready: pool.ready,
            updated: pool.updated,
            selector: tier1::pod::pool_selector(&name),
            failing: pool.failing,
        })
    } else if tier.spec.level == 0 {
        // The level-0 warm pool: worker pods in the namespaces it serves.
        let pool = crate::warm::pool::reconcile(&tier, &ctx, ready).await?;
        Some(PoolSeen {
            size: tier.spec.warm_pool.size,
            ready: pool.ready,
            updated: pool.updated,
            selector: crate::warm::objects::idle_selector(&name),
            failing: pool.failing,
        })
    } else {
        None
    };
    if pool.as_ref().is_some_and(|p| p.ready < p.size) {
        requeue = Duration::from_secs(30);
    }
    let old = tier.status.clone().unwrap_or_default();
    let observed = TierObserved {
        check: (ready, reason, message.clone()),
        pool,
        matrix_version: matrix::get(None).map(|m| m.version().to_string()),
    };
    let status = tier_status(&old, tier.metadata.generation, &observed);
    let (was, now) = (
        condition::is_true(&old.conditions, types::DEGRADED),
        condition::is_true(&status.conditions, types::DEGRADED),
    );
    if let Some(d) = changed(&old, &status, types::DEGRADED) {
        // When it turns on, and when it turns off after having been on.
        if now || was {
            crate::events::publish(&ctx, &*tier, now, &d.reason, &d.message, "Pool").await;
        }
    }
    if tier.status.as_ref() != Some(&status) {
        write_status(&ctx, &name, &status).await?;
    }
    if changed(&old, &status, types::READY).is_some() {
        crate::events::publish(&ctx, &*tier, !ready, reason, &message, "Validate").await;
    }
    ctx.metrics
        .reconciled("sandboxtier", started.elapsed().as_secs_f64());
    Ok(Action::requeue(requeue))
}

/// Condition `type_` of `new` when its status, reason, message or generation differ from `old`'s.
fn changed<'a>(
    old: &SandboxTierStatus,
    new: &'a SandboxTierStatus,
    type_: &str,
) -> Option<&'a condition::Condition> {
    let find = |s: &'a SandboxTierStatus| s.conditions.iter().find(|c| c.type_ == type_);
    let n = find(new)?;
    match old.conditions.iter().find(|c| c.type_ == type_) {
        Some(o)
            if o.status == n.status
                && o.reason == n.reason
                && o.message == n.message
                && o.observed_generation == n.observed_generation =>
        {
            None
        }
        _ => Some(n),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(size: u32, ready: u32, failing: Option<(&str, &str)>) -> Option<PoolSeen> {
        Some(PoolSeen {
            size,
            ready,
            updated: ready,
            selector: "kubeharness.dev/pool=t".into(),
            failing: failing.map(|(r, m)| (r.into(), m.into())),
        })
    }

    fn valid() -> (bool, &'static str, String) {
        (true, reasons::VALID, "ok".into())
    }

    /// (status, reason) of condition `type_`.
    fn cond(status: &SandboxTierStatus, type_: &str) -> Option<(String, String)> {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone()))
    }

    fn is(value: bool, reason: &str) -> Option<(String, String)> {
        Some((if value { "True" } else { "False" }.into(), reason.into()))
    }

    /// Stalled while the tier is unusable or its pool pods cannot start, Reconciling while its
    /// pool fills, both False (kstatus Current) otherwise; Ready stays the check's.
    #[test]
    fn a_tier_is_stalled_reconciling_or_current_as_kstatus_reads_it() {
        type Case = (
            &'static str,
            (bool, &'static str, String),
            Option<PoolSeen>,
            Option<(String, String)>,
            Option<(String, String)>,
            Option<(String, String)>,
        );
        let cases: Vec<Case> = vec![
            (
                "valid, no pool",
                valid(),
                pool(0, 0, None),
                is(true, reasons::VALID),
                is(false, reasons::RECONCILED),
                is(false, reasons::AS_EXPECTED),
            ),
            (
                "valid, pool full",
                valid(),
                pool(2, 2, None),
                is(true, reasons::VALID),
                is(false, reasons::RECONCILED),
                is(false, reasons::AS_EXPECTED),
            ),
            (
                "valid, pool filling",
                valid(),
                pool(2, 1, None),
                is(true, reasons::VALID),
                is(true, reasons::WARM_POOL_FILLING),
                is(false, reasons::AS_EXPECTED),
            ),
            (
                "pool pods failing (a bad image): Stalled",
                valid(),
                pool(2, 0, Some(("ErrImageNeverPull", "no image"))),
                is(true, reasons::VALID),
                is(false, reasons::RECONCILED),
                is(true, reasons::POOL_PODS_FAILING),
            ),
            (
                "image missing: Stalled",
                (
                    false,
                    reasons::IMAGE_MISSING,
                    "template.image is empty".into(),
                ),
                pool(0, 0, None),
                is(false, reasons::IMAGE_MISSING),
                is(false, reasons::RECONCILED),
                is(true, reasons::IMAGE_MISSING),
            ),
            (
                "name too long, no pool: Stalled",
                (false, reasons::NAME_TOO_LONG, "long".into()),
                None,
                is(false, reasons::NAME_TOO_LONG),
                is(false, reasons::RECONCILED),
                is(true, reasons::NAME_TOO_LONG),
            ),
        ];
        for (name, check, pool, ready, reconciling, stalled) in cases {
            let observed = TierObserved {
                check,
                pool,
                matrix_version: Some("v9".into()),
            };
            let got = tier_status(&SandboxTierStatus::default(), Some(5), &observed);
            assert_eq!(cond(&got, types::READY), ready, "{name}: Ready");
            assert_eq!(
                cond(&got, types::RECONCILING),
                reconciling,
                "{name}: Reconciling"
            );
            assert_eq!(cond(&got, types::STALLED), stalled, "{name}: Stalled");
            assert_eq!(got.observed_generation, Some(5), "{name}");
            assert!(
                got.conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(5)),
                "{name}: {:?}",
                got.conditions
            );
            // Ready comes first (readers of the status index it).
            assert_eq!(got.conditions[0].type_, types::READY, "{name}");
            // The same observation again changes nothing (no status write).
            assert_eq!(tier_status(&got, Some(5), &observed), got, "{name}: stable");
        }
    }
}
