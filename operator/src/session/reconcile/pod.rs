//! The session's worker pod: which pod is it (only one the operator made for this session), is it
//! to be replaced, and when there is none, adopting a warm pod or creating one; then the state it
//! is in before the worker itself is asked.

use super::children::{apply_child, ensure_secret, refusal};
use crate::context::Context;
use crate::error::Result;
use crate::events;
use crate::kube_util::{admission_refusal, create_if_absent, delete_if_present};
use crate::labels;
use crate::session::observe::{started_ip, worker_state, WorkerState};
use crate::session::owned::session_key;
use crate::session::{persistent, resources, trust};
use crate::warm;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::reasons;
use kube_harness_crds::{HarnessSession, HarnessSessionStatus};

/// A refusal of the API server the session reports: (reason, message).
pub type Refused = Option<(&'static str, String)>;

/// The pod under the session's worker pod name, as the operator may use it.
pub struct Found {
    /// The worker pod's name: the one status records (an adopted warm pod keeps its own name),
    /// else `<name>-worker`.
    pub name: String,
    /// The pod of that name the operator made for this session, if there is one.
    pub existing: Option<Pod>,
    /// A pod of that name that someone else made was there: deleted now, never served.
    pub not_owned: bool,
}

/// Finds the worker pod (from the cache, else the API server). Only the pod the operator made
/// for this session is its worker (the uid recorded at its create, and a controller reference to
/// the session): one of its name that someone else made is deleted, never served or asked, and
/// the session's own is started once it is gone.
pub async fn find(
    session: &HarnessSession,
    ctx: &Context,
    pods: &Api<Pod>,
    old: &HarnessSessionStatus,
) -> Result<Found> {
    let ns = session.namespace().unwrap_or_default();
    let name = old
        .worker_pod
        .clone()
        .unwrap_or_else(|| labels::worker_pod(&session.name_any()));
    // A pod the cache does not hold yet though it exists (created a moment ago) meets a 409 on
    // create, which reads as "starting".
    let existing = match ctx.caches.pod(&ns, &name) {
        Some(pod) => pod.map(|p| Pod::clone(&p)),
        None => pods.get_opt(&name).await?,
    };
    let remembered = ctx.caches.worker_uid(&session_key(session));
    let recorded = [old.worker_pod_uid.as_deref(), remembered.as_deref()];
    let pod = match existing {
        Some(pod) if !trust::owned_pod(&pod, session, &recorded) => pod,
        existing => {
            return Ok(Found {
                name,
                existing,
                not_owned: false,
            })
        }
    };
    delete_exactly(pods, &pod).await?;
    let note = format!(
        "pod {} (uid {}) was not created by the operator for this session: deleted, never served; the session's own worker pod starts once it is gone",
        pod.name_any(),
        pod.uid().unwrap_or_default()
    );
    events::publish(
        ctx,
        session,
        true,
        reasons::WORKER_POD_NOT_OWNED,
        &note,
        "Start",
    )
    .await;
    Ok(Found {
        name,
        existing: None,
        not_owned: true,
    })
}

/// Hibernation: an idle worker is deleted, the PVC stays; a wake request brings it back. Returns
/// whether a pod was still there.
pub async fn hibernate(pods: &Api<Pod>, found: &Found) -> Result<bool> {
    if let Some(pod) = &found.existing {
        if pod.metadata.deletion_timestamp.is_none() {
            pods.delete(&found.name, &DeleteParams::default()).await?;
        }
    }
    Ok(found.existing.is_some())
}

/// What placing the worker pod needs beyond the session and the context.
pub struct Place<'a> {
    pub old: &'a HarnessSessionStatus,
    pub pods: &'a Api<Pod>,
    pub found: Found,
    /// The workspace claim so far, and the session's own.
    pub claim: String,
    pub own_claim: String,
    /// The worker pod the session asks for with this claim and uid.
    pub desired: &'a (dyn Fn(&str, i64) -> Pod + Sync),
    /// This is the session's first worker and its tier keeps a warm pool.
    pub may_adopt: bool,
    /// The warm pod claimed while the children were made, if one was asked for.
    pub warm_claim: Option<warm::adopt::Claim>,
    pub tokens: warm::adopt::Tokens,
    /// The token Secret was read or created by this reconcile.
    pub secret_seen: bool,
    /// Admission refused the workspace PVC.
    pub refused: Refused,
}

/// The worker pod as placing it left it (none while it is replaced, refused or blocked), under
/// which name and with which workspace claim.
pub struct Placed {
    pub pod: Option<Pod>,
    pub name: String,
    pub claim: String,
    pub refused: Refused,
}

/// Keeps the worker pod, deletes it when it is stale (its replacement comes at the next
/// reconcile), or starts one: an adopted warm pod, else the session's own.
pub async fn place(session: &HarnessSession, ctx: &Context, mut p: Place<'_>) -> Result<Placed> {
    let uid = if p.claim == p.own_claim {
        resources::worker_uid(session)
    } else {
        warm::adopt::claim_uid(&p.claim).unwrap_or_else(|| resources::worker_uid(session))
    };
    match p.found.existing.take() {
        Some(pod) if stale(&pod, &(p.desired)(&p.claim, uid)) => {
            if pod.metadata.deletion_timestamp.is_none() {
                p.pods
                    .delete(&p.found.name, &DeleteParams::default())
                    .await?;
            }
            Ok(Placed {
                pod: None,
                name: p.found.name,
                claim: p.claim,
                refused: p.refused,
            })
        }
        Some(pod) => Ok(Placed {
            pod: Some(pod),
            name: p.found.name,
            claim: p.claim,
            refused: p.refused,
        }),
        None => start(session, ctx, p, uid).await,
    }
}

/// No worker pod: binds the warm pod claimed for the session, or creates the session's own.
async fn start(session: &HarnessSession, ctx: &Context, p: Place<'_>, uid: i64) -> Result<Placed> {
    let outcome = match p.warm_claim {
        Some(warm::adopt::Claim::Claimed(claimed)) => {
            warm::adopt::bind(*claimed, session, ctx, &p.tokens).await?
        }
        Some(warm::adopt::Claim::Done(outcome)) => outcome,
        None => warm::adopt::Outcome::NoPool,
    };
    let miss = match outcome {
        warm::adopt::Outcome::Adopted(pod) => {
            ctx.metrics.session_started(true, None);
            if let Some(uid) = pod.uid() {
                ctx.caches.remember_worker(&session_key(session), uid);
            }
            let name = pod.name_any();
            return Ok(Placed {
                claim: warm::objects::claim_name(&name),
                name,
                pod: Some(*pod),
                refused: p.refused,
            });
        }
        warm::adopt::Outcome::Miss(why) => {
            events::publish(
                ctx,
                session,
                false,
                "WarmPoolMiss",
                &format!("no warm worker pod adopted ({why}); starting one"),
                "Start",
            )
            .await;
            Some(why)
        }
        warm::adopt::Outcome::NoPool => None,
    };
    let ns = session.namespace().unwrap_or_default();
    let name = labels::worker_pod(&session.name_any());
    let mut refused = p.refused;
    if p.may_adopt {
        // Not applied while a warm pod's claim might have served instead.
        let applied =
            apply_child::<PersistentVolumeClaim>(ctx, &ns, &resources::workspace_pvc(session))
                .await;
        refused = refused.or(refusal(applied)?);
    }
    // The pod mounts the token Secret: make sure it is there (the tokens may be remembered from
    // a Secret deleted since).
    if !p.secret_seen {
        ensure_secret(session, ctx, p.old).await?;
    }
    if refused.is_some() || p.found.not_owned {
        // Refused; or a pod someone else made still holds the name.
        return Ok(Placed {
            pod: None,
            name,
            claim: p.claim,
            refused,
        });
    }
    let pod = match create_if_absent(p.pods, &(p.desired)(&p.claim, uid)).await {
        Ok(created) => {
            if let Some(pod) = &created {
                ctx.metrics.session_started(false, miss);
                if let Some(uid) = pod.uid() {
                    ctx.caches.remember_worker(&session_key(session), uid);
                }
            }
            created
        }
        Err(e) => {
            refused = Some(admission_refusal(&e).or_else(|| invalid_pod(&e)).ok_or(e)?);
            None
        }
    };
    Ok(Placed {
        pod,
        name,
        claim: p.claim,
        refused,
    })
}

/// What the worker pod says about itself, or, without one, why there is none yet.
pub fn state(pod: Option<&Pod>, refused: Refused, not_owned: bool) -> WorkerState {
    match (pod, refused) {
        (Some(pod), _) => worker_state(pod),
        (None, _) if not_owned => WorkerState::Starting {
            reason: reasons::WORKER_POD_NOT_OWNED.into(),
        },
        (None, Some((reason, message))) => WorkerState::Failing {
            reason: reason.into(),
            message,
        },
        (None, None) => WorkerState::Starting {
            reason: "WorkerStarting".into(),
        },
    }
}

/// A starting worker whose persistent directories' sources are missing is failing. Only while no
/// container runs: a running pod mounted its sources already (a source deleted afterwards does
/// not stop it).
pub async fn check_sources(
    session: &HarnessSession,
    ctx: &Context,
    pod: Option<&Pod>,
    state: WorkerState,
) -> Result<WorkerState> {
    let starting = matches!(state, WorkerState::Starting { .. })
        && !session.spec.workspace.persistent_dirs.is_empty()
        && pod.and_then(started_ip).is_none();
    if !starting {
        return Ok(state);
    }
    Ok(
        match persistent::missing_source(session, &ctx.client).await? {
            Some(message) => WorkerState::Failing {
                reason: reasons::PERSISTENT_DIR_SOURCE_MISSING.into(),
                message,
            },
            None => state,
        },
    )
}

/// The pod must be replaced: built from another spec, or finished.
fn stale(pod: &Pod, desired: &Pod) -> bool {
    let hash = |p: &Pod| p.annotations().get(labels::SPEC_HASH).cloned();
    hash(pod) != hash(desired) || worker_state(pod) == WorkerState::Gone
}

/// A worker pod the API server refuses as invalid (422): the session asked for something the
/// pod cannot be (a check the CRD and `kube_harness_crds::valid` missed), reported as a failing
/// worker (`InvalidSpec` and the API server's message) instead of an error retried forever.
fn invalid_pod(error: &kube::Error) -> Option<(&'static str, String)> {
    match error {
        kube::Error::Api(e) if e.code == 422 => Some((reasons::INVALID_SPEC, e.message.clone())),
        _ => None,
    }
}

/// Deletes exactly `pod` (its uid as a precondition, at once): a pod the operator did not make.
/// Already gone, or replaced since, is fine.
async fn delete_exactly(pods: &Api<Pod>, pod: &Pod) -> Result<()> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(&pod.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes a worker pod; already gone is fine.
pub async fn delete_worker(pods: &Api<Pod>, name: &str) -> Result<()> {
    Ok(delete_if_present(pods, name).await?)
}
