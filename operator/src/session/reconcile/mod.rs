//! Reconciling one HarnessSession, in three steps as agent-sandbox's sandbox controller takes
//! them: ensure the child objects ([`ensure`]: its children, its worker pod, what the worker
//! says), compute the status they call for ([`crate::session::status::status`], pure), and write
//! it once by server-side apply, with an Event per condition that changed. Around them: the one
//! finalizer path ([`finalizer`]), what goes when the session ends ([`cleanup`]), and its TTL,
//! hibernation and idleness ([`lifetime`], pure).

mod children;
mod cleanup;
mod ensure;
mod finalizer;
mod lifetime;
mod pod;
mod probe;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::events;
use crate::labels::{self, MANAGER};
use crate::session::owned::session_key;
use crate::session::status;
use finalizer::{AddingFinalizer, Event};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use kube_harness_crds::{HarnessSession, HarnessSessionStatus, Phase};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub async fn reconcile(session: Arc<HarnessSession>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let ns = session
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), &ns);
    let session = finalizer::with_known_finalizer(session, &ctx);
    let result = finalizer::run(&api, session, |event| async {
        match event {
            Event::Apply(s, adding) => apply(s, &ctx, adding).await,
            Event::Cleanup(s) => cleanup::cleanup(s, &ctx).await,
        }
    })
    .await;
    ctx.metrics
        .reconciled("harnesssession", started.elapsed().as_secs_f64());
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        ok = result.is_ok(),
        "reconciled"
    );
    result
}

pub fn error_policy(session: Arc<HarnessSession>, error: &Error, ctx: Arc<Context>) -> Action {
    if finalizer::is_conflict(error) {
        // The session changed after this reconcile read it (often the tier API writing
        // Escalated): not a failure, just recompute from the fresh object.
        tracing::debug!(session = %session.name_any(), "session changed meanwhile; reconciling again");
        ctx.metrics.failed("harnesssession", "conflict");
        return Action::requeue(Duration::from_millis(200));
    }
    tracing::warn!(session = %session.name_any(), %error, "HarnessSession reconcile failed");
    ctx.metrics.failed("harnesssession", error.metric_label());
    Action::requeue(ctx.backoff(&session_key(&session)))
}

/// The three steps (see the module). `adding_finalizer`: the finalizer patch of a new session,
/// in flight; the status write is conditioned on the object it returns.
async fn apply(
    session: Arc<HarnessSession>,
    ctx: &Context,
    adding_finalizer: Option<AddingFinalizer<'_>>,
) -> Result<Action> {
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    let key = session_key(&session);
    // The session at hand may predate this operator's last status write (the watch has not
    // brought it back yet): then that write is the status to build on, and its resourceVersion
    // the one to condition the next write on.
    let (old, read_version, built_on_write) = match ctx
        .caches
        .newer_status(&key, session.metadata.resource_version.as_deref())
    {
        Some((status, version)) => (status, Some(version), true),
        None => (
            session.status.clone().unwrap_or_default(),
            session.resource_version(),
            false,
        ),
    };

    let now = Timestamp::now();
    let expired = lifetime::ttl_expired(&session, now);
    if lifetime::ttl_deletes(&session, now) {
        // The finalizer first: its cleanup stops the worker once the session is deleted.
        if let Some(adding) = adding_finalizer {
            adding.await?;
        }
        let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), &ns);
        events::publish(
            ctx,
            &*session,
            false,
            "TTLExpired",
            "the session's ttlSeconds passed; deleting it (ttlAction Delete)",
            "Expire",
        )
        .await;
        api.delete(&name, &DeleteParams::default()).await?;
        return Ok(Action::await_change());
    }

    let before_finalizer = adding_finalizer
        .is_some()
        .then(|| session.resource_version())
        .flatten();
    // Expired (ttlAction Release): the session stays, what it holds goes.
    let step = async {
        if expired {
            cleanup::release(&session, ctx, &old).await
        } else {
            ensure::ensure(&session, ctx, &old).await
        }
    };
    let (observed, read_version) = match adding_finalizer {
        None => (step.await?, read_version),
        Some(adding) => {
            let (added, observed) = tokio::join!(adding, step);
            // The status write is conditioned on the object the finalizer patch returned.
            let added = added?;
            (observed?, added.resource_version())
        }
    };
    tracing::debug!(session = %name, "ensured");
    let (status, requeue) = status::status(&old, session.metadata.generation, &observed);

    let phase = status.phase.unwrap_or(Phase::Pending);
    let usage = status.usage.clone().unwrap_or_default();
    ctx.metrics.session(
        &key,
        Some((
            phase,
            usage.commands_tier0,
            usage.commands_tier0 + usage.commands_tier1,
        )),
    );
    if old.phase != Some(Phase::Ready) && phase == Phase::Ready {
        if let Some(since) = lifetime::provisioning_started(&session, Timestamp::now()) {
            // An adopted warm pod keeps its own name; every other worker is `<name>-worker`.
            let warm = status
                .worker_pod
                .as_deref()
                .is_some_and(|pod| pod != labels::worker_pod(&name));
            ctx.metrics.provisioned(warm, since);
        }
    }
    if status != old {
        let written = write_status(ctx, &ns, &name, read_version.clone(), &status).await?;
        ctx.caches
            .wrote_status(&key, read_version, built_on_write, written, &status);
        ctx.caches.also_superseded(&key, before_finalizer.clone());
        tracing::debug!(session = %name, "status written");
        for c in events::changed(&old.conditions, &status.conditions) {
            let note = format!("{} is {}: {}", c.type_, c.status, c.message);
            events::publish(
                ctx,
                &*session,
                events::is_warning(c),
                &c.reason,
                &note,
                "Reconcile",
            )
            .await;
        }
    }
    ctx.succeeded(&key);
    // A Ready session comes back when its worker is due for a poll: every 15 s while it answers,
    // less and less often while it does not.
    let requeue = match requeue {
        Some(_) if phase == Phase::Ready => Some(ctx.polls.due_in(&ObjectRef::from_obj(&*session))),
        r => r,
    };
    // A session that will expire comes back when it does, whatever else it waits for (a
    // hibernated one waits for nothing).
    let requeue = match (requeue, lifetime::ttl_left(&session, Timestamp::now())) {
        (Some(r), Some(left)) => Some(r.min(left)),
        (None, Some(left)) => Some(left),
        (r, None) => r,
    };
    Ok(requeue
        .map(Action::requeue)
        .unwrap_or_else(Action::await_change))
}

/// Server-side apply of the whole status, conditioned on the resourceVersion the reconcile read:
/// the tier API (any replica) patches Escalated and currentTier concurrently, and a status
/// computed from an older object must not overwrite those (a 409 retries with the fresh object).
async fn write_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    resource_version: Option<String>,
    status: &HarnessSessionStatus,
) -> Result<Option<String>> {
    let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), ns);
    let mut patch = json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "HarnessSession",
        "status": status,
    });
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    let written = api
        .patch_status(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await?;
    Ok(written.resource_version())
}
