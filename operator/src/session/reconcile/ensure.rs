//! Step one of a reconcile: bring the child objects to what the session asks for (token Secret,
//! workspace PVC, NetworkPolicy, Service, worker pod: created, replaced when stale, deleted to
//! hibernate) and report what it found and did. Sets no status: that is
//! [`crate::session::status::status`]'s job.

use super::children::{self, apply_child, ensure_service, refusal};
use super::lifetime::hibernating;
use super::pod::{self, Place};
use super::probe::{self, Probe};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::labels;
use crate::session::observe::WorkerState;
use crate::session::status::{Escalation, Observed, Seen, Worker, WorkerTierProblem};
use crate::session::{access, resources};
use crate::tier1::pod::serving_selector;
use crate::tier1::state::phase as tier1_phase;
use crate::warm;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::reasons;
use kube_harness_crds::{HarnessSession, HarnessSessionStatus, SandboxTier};
use std::sync::Arc;

/// Step one (see the module): the children first, all at once where they need nothing from each
/// other, then the worker pod ([`pod`]) and what the worker says ([`probe`]).
pub async fn ensure(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<Observed> {
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    let tiers: Api<SandboxTier> = Api::all(ctx.client.clone());
    // What the CRD's rules refuse today (an object stored before them): nothing is made of it.
    let problems = kube_harness_crds::valid::problems(session);
    if !problems.is_empty() {
        return Ok(Observed::Invalid {
            message: problems.join("; "),
        });
    }

    // The level-0 tier that defines the worker pod, if the namespace may use it.
    let worker_tier = tier(ctx, &tiers, &session.spec.worker_tier).await?;
    let worker_tier = crate::grant::usable(&ctx.client, &ns, worker_tier).await?;
    let worker_tier = match worker_tier {
        Some(t) if t.spec.level == 0 => t,
        Some(t) => {
            return Ok(Observed::NoWorkerTier(WorkerTierProblem::NotLevelZero {
                tier: t.name_any(),
                level: t.spec.level,
            }))
        }
        None => {
            return Ok(Observed::NoWorkerTier(WorkerTierProblem::NotFound {
                tier: session.spec.worker_tier.clone(),
                namespace: ns.clone(),
            }))
        }
    };
    let escalation = observe_escalation(session, ctx, &tiers).await?;

    // The workspace: the session's own PVC, or the warm pod's it adopted (status keeps which).
    let own_claim = labels::workspace_pvc(&name);
    let claim = old
        .workspace_claim
        .clone()
        .unwrap_or_else(|| own_claim.clone());
    // A session's first worker may be a warm pod (with its own PVC); later ones (after
    // hibernation, a spec change, a lost pod) are the session's.
    let first = old.worker_pod.is_none() && old.workspace_claim.is_none();
    let may_adopt = first && worker_tier.spec.warm_pool.size > 0;

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let found = pod::find(session, ctx, &pods, old).await?;
    let hibernate = hibernating(session, old);
    let config_maps = if hibernate {
        Vec::new()
    } else {
        children::skills_config_maps(session, ctx).await?
    };
    let desired = |claim: &str, uid: i64| {
        resources::worker_pod_with(
            session,
            &worker_tier.spec,
            &ctx.config,
            &config_maps,
            claim,
            uid,
        )
    };
    // The children and a warm pod's claim need nothing from each other: made at once, so a warm
    // start waits for one round trip of the API server instead of five (docs/performance.md).
    let adopting = may_adopt && found.existing.is_none() && !hibernate && !found.not_owned;
    let warm_claim = async {
        if !adopting {
            return Ok(None);
        }
        let hash = |c: &str, u: i64| {
            desired(c, u)
                .annotations()
                .get(labels::SPEC_HASH)
                .cloned()
                .unwrap_or_default()
        };
        warm::adopt::claim(session, &worker_tier, ctx, &config_maps, hash)
            .await
            .map(Some)
    };
    let pvc = async {
        // Not for a session suspended before its first worker: its first start decides the
        // claim (a warm pod's, when its tier keeps a pool by then).
        if claim == own_claim && !may_adopt && !(first && hibernate) {
            apply_child::<PersistentVolumeClaim>(ctx, &ns, &resources::workspace_pvc(session))
                .await?;
        }
        Ok::<(), Error>(())
    };
    let (policy, service) = (
        resources::network_policy(session, &ctx.config),
        access::worker_service(session, ctx.config.worker_port),
    );
    let (policy, service) = (
        apply_child::<NetworkPolicy>(ctx, &ns, &policy),
        ensure_service(ctx, &ns, &service),
    );
    let (tokens, pvc, policy, service, warm_claim) = tokio::join!(
        children::session_tokens(session, ctx, old),
        pvc,
        policy,
        service,
        warm_claim
    );
    let (tokens, secret_seen) = tokens?;
    let warm_claim = warm_claim?;
    // A quota or another admission check refusing the claim or the pod is the session's to
    // report (a condition with the API server's message), not an error to back off from.
    let refused = refusal(pvc)?;
    policy?;
    service?;
    tracing::debug!(session = %name, "ensure: secret, pvc, policy, service, pod");

    let (worker, pod_name, claim, pod_uid) = if let Some(why) = tokens.refused.clone() {
        // Never a worker on a Secret the operator did not make: its tokens are someone else's.
        let worker = Worker::Running {
            state: WorkerState::Failing {
                reason: reasons::TOKEN_SECRET_REFUSED.into(),
                message: why,
            },
            report: None,
        };
        (worker, found.name, claim, None)
    } else if hibernate {
        let worker = Worker::Hibernating {
            suspended: session.spec.suspend,
            pod_left: pod::hibernate(&pods, &found).await?,
        };
        (worker, found.name, claim, None)
    } else {
        let not_owned = found.not_owned;
        let placed = pod::place(
            session,
            ctx,
            Place {
                old,
                pods: &pods,
                found,
                claim,
                own_claim,
                desired: &desired,
                may_adopt,
                warm_claim,
                tokens: warm::adopt::Tokens {
                    token: tokens.token.clone(),
                    session_log: tokens.session_log.clone(),
                },
                secret_seen,
                refused,
            },
        )
        .await?;
        let pod = placed.pod.as_ref();
        let state = pod::state(pod, placed.refused, not_owned);
        let state = pod::check_sources(session, ctx, pod, state).await?;
        let probe = Probe {
            old,
            pods: &pods,
            name: &placed.name,
            pod,
            token: &tokens.token,
        };
        let worker = probe::worker(session, ctx, probe, state).await?;
        let pod_uid = pod.and_then(|p| p.uid());
        (worker, placed.name, placed.claim, pod_uid)
    };
    Ok(Observed::Session(Box::new(Seen {
        token_secret: labels::token_secret(&name),
        token_secret_uid: tokens.secret_uid,
        worker_pod_uid: pod_uid,
        worker_pod: pod_name,
        workspace_claim: claim,
        worker_port: ctx.config.worker_port,
        address: access::address(session, ctx.config.worker_port),
        escalation,
        worker,
    })))
}

/// The session's tier: from the cache, else from the API server.
async fn tier(
    ctx: &Context,
    tiers: &Api<SandboxTier>,
    name: &str,
) -> Result<Option<Arc<SandboxTier>>> {
    if !crate::grant::plausible(name) {
        return Ok(None);
    }
    if let Some(t) = ctx.caches.tier(name) {
        return Ok(Some(t));
    }
    Ok(tiers.get_opt(name).await?.map(Arc::new))
}

/// The session's escalation tier and the Tier-1 pods serving the session (they live in the
/// operator's namespace), for the Escalated condition.
async fn observe_escalation(
    session: &HarnessSession,
    ctx: &Context,
    tiers: &Api<SandboxTier>,
) -> Result<Escalation> {
    let Some(t) = resources::escalation_tier(session).map(str::to_string) else {
        return Ok(Escalation::NoTier);
    };
    let ns = session.namespace().unwrap_or_default();
    let read = match crate::grant::plausible(&t) {
        true => tiers.get_opt(&t).await?,
        false => None,
    };
    Ok(match crate::grant::usable(&ctx.client, &ns, read).await? {
        None => Escalation::TierNotFound {
            tier: t,
            namespace: ns,
        },
        Some(tier) if tier.spec.level == 0 => Escalation::TierIsLevelZero { tier: t },
        Some(_) if ctx.config.tier_api_url.is_none() => Escalation::NotConfigured { tier: t },
        Some(tier) => {
            // The session's Tier-1 pods are in its own namespace.
            let pods: Api<Pod> =
                Api::namespaced(ctx.client.clone(), &session.namespace().unwrap_or_default());
            let selector = serving_selector(
                &session.namespace().unwrap_or_default(),
                &session.name_any(),
                None,
            );
            let pods = pods
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| (p.name_any(), tier1_phase(p)))
                .collect();
            Escalation::Usable {
                tier: t,
                level: tier.spec.level,
                pods,
            }
        }
    })
}
