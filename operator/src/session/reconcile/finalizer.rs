//! The cleanup finalizer, on one path for every session: a new session's first apply runs while
//! the finalizer is added, a session with it is applied, and a deleted one is cleaned up before
//! it is removed.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::labels::FINALIZER;
use crate::session::owned::session_key;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Error as FinalizerError, Event as KubeEvent};
use kube::{Api, ResourceExt};
use kube_harness_crds::HarnessSession;
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The finalizer patch of a new session, made while its first apply runs: the patched session,
/// or the patch's error as [`Error::Finalizer`].
pub type AddingFinalizer<'a> = Pin<Box<dyn Future<Output = Result<HarnessSession>> + Send + 'a>>;

/// What [`run`] asks of the reconcile (kube's `finalizer::Event`, and the patch in flight).
pub enum Event<'a> {
    /// Bring the session to its spec. With `Some`, the finalizer is being added meanwhile: the
    /// status write is conditioned on the object that patch returns, and a session about to be
    /// deleted waits for it (its cleanup must run).
    Apply(Arc<HarnessSession>, Option<AddingFinalizer<'a>>),
    /// The session is being deleted: take its children away. The finalizer goes afterwards.
    Cleanup(Arc<HarnessSession>),
}

/// The one finalizer path. Without the finalizer (and not being deleted) the session is applied
/// while the finalizer is added: `kube::runtime::finalizer` would add it and end the reconcile,
/// leaving the work to the next one, which the finalizer's own watch event starts, a round trip
/// through the API server's watch on every new session's path to Ready (docs/performance.md,
/// "Warm start"). Otherwise `kube::runtime::finalizer` applies, or cleans up and removes it.
/// Every failure is an [`Error::Finalizer`]; a session gone meanwhile is no failure.
pub async fn run<'a, R, Fut>(
    api: &'a Api<HarnessSession>,
    session: Arc<HarnessSession>,
    reconcile: R,
) -> Result<Action>
where
    R: FnOnce(Event<'a>) -> Fut,
    Fut: Future<Output = Result<Action>>,
{
    let outcome = if needs_finalizer(&session) {
        let adding = Box::pin(add_finalizer(api, session.clone()));
        match reconcile(Event::Apply(session, Some(adding))).await {
            Ok(action) => Ok(action),
            Err(Error::Finalizer(e)) => Err(*e),
            Err(e) => Err(FinalizerError::ApplyFailed(e)),
        }
    } else {
        finalizer(api, FINALIZER, session, |event| {
            reconcile(match event {
                KubeEvent::Apply(s) => Event::Apply(s, None),
                KubeEvent::Cleanup(s) => Event::Cleanup(s),
            })
        })
        .await
    };
    match outcome {
        Ok(action) => Ok(action),
        // The session went while this reconcile ran (often a second cleanup, started from a
        // cached copy, after the first removed the finalizer): nothing is left to do.
        Err(e) if already_gone(&e) => Ok(Action::await_change()),
        Err(e) => Err(Error::Finalizer(Box::new(e))),
    }
}

/// The session, with the cleanup finalizer when the copy at hand predates this operator's own
/// status write, which followed its finalizer patch: the watch lags the patch, and patching again
/// from the stale list fails its `test` (422). At 5,000 new sessions that was most of the
/// reconcile errors (docs/performance.md, "Scale").
pub fn with_known_finalizer(session: Arc<HarnessSession>, ctx: &Context) -> Arc<HarnessSession> {
    let stale = needs_finalizer(&session)
        && ctx
            .caches
            .newer_status(
                &session_key(&session),
                session.metadata.resource_version.as_deref(),
            )
            .is_some();
    if !stale {
        return session;
    }
    let mut known = HarnessSession::clone(&session);
    known
        .metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push(FINALIZER.into());
    Arc::new(known)
}

/// Whether the cleanup finalizer is still to be added (never to a session being deleted).
fn needs_finalizer(session: &HarnessSession) -> bool {
    !session.finalizers().iter().any(|f| f == FINALIZER)
        && session.metadata.deletion_timestamp.is_none()
}

/// Adds the cleanup finalizer: a JSON patch that tests the list it extends, as kube's does.
async fn add_finalizer(
    api: &Api<HarnessSession>,
    session: Arc<HarnessSession>,
) -> Result<HarnessSession> {
    let patch = match &session.metadata.finalizers {
        Some(list) if !list.is_empty() => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ]),
        _ => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
    };
    let added = match serde_json::from_value::<json_patch::Patch>(patch) {
        Ok(patch) => {
            api.patch(
                &session.name_any(),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        }
        Err(e) => Err(kube::Error::SerdeError(e)),
    };
    added.map_err(|e| Error::Finalizer(Box::new(FinalizerError::AddFinalizer(e))))
}

/// The finalizer patch found no session (404): it was deleted meanwhile.
fn already_gone(error: &FinalizerError<Error>) -> bool {
    matches!(
        error,
        FinalizerError::AddFinalizer(kube::Error::Api(e))
            | FinalizerError::RemoveFinalizer(kube::Error::Api(e)) if e.code == 404
    )
}

/// A write refused because the session changed since it was read: a 409 from the
/// resourceVersion-conditioned status write, or a 422 from the finalizer patch, whose `test` of
/// the finalizer list fails when the cached session predates a finalizer another reconcile added.
pub fn is_conflict(error: &Error) -> bool {
    matches!(
        error,
        Error::Finalizer(f) if matches!(
            f.as_ref(),
            FinalizerError::ApplyFailed(Error::Kube(kube::Error::Api(e))) if e.code == 409
        ) || matches!(
            f.as_ref(),
            FinalizerError::AddFinalizer(kube::Error::Api(e)) if e.code == 409 || e.code == 422
        )
    )
}
