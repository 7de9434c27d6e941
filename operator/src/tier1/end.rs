//! Ending turns (docs/tier1.md, "Lifetimes"): the worker's `DELETE` of its turn, and an open of
//! a new turn, which ends the session's other serving turns (one serving turn per session).
//!
//! A turn's record is ended before its pods are listed: an open of the same turn that
//! is still under way either sees the tombstone (it records or re-reads the record after it
//! claimed or created its pod, and then gives that pod up) or made its pod before the tombstone,
//! and then the list after the tombstone finds the pod. Either way nothing serves an ended turn.

use super::open::{self, Exactly};
use super::record;
use super::state;
use crate::context::Context;
use crate::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use kube_harness_crds::{HarnessTurn, SandboxTier};

/// The session object whose turns are ended.
pub struct Session<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: Option<&'a str>,
}

impl Session<'_> {
    /// `turn` of this session, as its record is ended.
    fn ending<'t>(&'t self, turn: &'t str) -> record::Ending<'t> {
        record::Ending {
            session_namespace: self.namespace,
            session: self.name,
            uid: self.uid,
            turn,
        }
    }
}

/// What ending a turn did to its pods.
#[derive(Debug, Default)]
pub struct Ended {
    /// A pod that served the turn (the kept one, when one was kept).
    pub pod: Option<String>,
    /// The pod kept idle for the session's next turn, and for how many seconds.
    pub kept: Option<(String, u32)>,
}

/// Ends `turn` of `session`: its record becomes a tombstone, then its pod is kept idle for the
/// session's next turn when its tier says so (idleTimeoutSeconds > 0) and it is Ready, else
/// deleted with its Secret; any other pod carrying the turn is deleted.
pub async fn turn(ctx: &Context, session: &Session<'_>, turn: &str) -> Result<Ended, kube::Error> {
    let tombstone = record::end(ctx, &session.ending(turn)).await?;
    let pods = open::session_pods(ctx, session.namespace, session.name).await?;
    let pods = open::of_turn(&open::of_session_object(pods, session.uid), turn);
    let keep = open::chosen(&pods, record::holder(&tombstone)).map(|p| p.name_any());
    let mut ended = Ended::default();
    for pod in &pods {
        ended.pod.get_or_insert_with(|| pod.name_any());
        if keep.as_deref() == Some(pod.name_any().as_str()) {
            if let Some(idle) = keep_for(ctx, pod).await? {
                if open::release(ctx, pod, idle).await? {
                    ended.kept = Some((pod.name_any(), idle));
                    ended.pod = Some(pod.name_any());
                    continue;
                }
            }
        }
        open::delete(ctx, pod, Exactly::Object).await?;
    }
    Ok(ended)
}

/// Ends every serving turn of `session` but `turn` (an open of a new turn): the other turns'
/// records become tombstones, then every pod serving another turn is deleted. `pods` and
/// `records`: the session's as the open read them, to skip the work when there is none.
/// Returns how many pods were deleted.
pub async fn others(
    ctx: &Context,
    session: &Session<'_>,
    turn: &str,
    pods: &[Pod],
    records: &[HarnessTurn],
) -> Result<usize, kube::Error> {
    let this = super::pod::turn_label(turn);
    // Checked on each object as read, not only by the list's selector.
    let other = |l: &std::collections::BTreeMap<String, String>| {
        let is = |k: &str, v: &str| l.get(k).map(String::as_str) == Some(v);
        is(labels::SESSION_NAMESPACE, session.namespace)
            && is(labels::SESSION, session.name)
            && l.get(labels::TURN).is_some_and(|t| *t != this)
    };
    let live: Vec<&HarnessTurn> = records
        .iter()
        // Only the operator's records of this session's other turns, read from their spec (a
        // record's labels are not its turn), that still name a pod.
        .filter(|r| {
            let (ns, name, _) = record::key(r);
            record::proven(ctx, r)
                && ns == session.namespace
                && name == session.name
                && r.spec.turn != turn
                && matches!(
                    record::said(ctx, Some(r), session.uid),
                    record::Said::Held(_)
                )
        })
        .collect();
    if live.is_empty() && !pods.iter().any(|p| other(p.labels())) {
        return Ok(0);
    }
    for r in live {
        record::end(ctx, &session.ending(&r.spec.turn)).await?;
    }
    let pods = open::session_pods(ctx, session.namespace, session.name).await?;
    let mut deleted = 0;
    for pod in open::of_session_object(pods, session.uid) {
        if other(pod.labels()) && open::delete(ctx, &pod, Exactly::Object).await? {
            tracing::info!(
                pod = %pod.name_any(),
                session = %format!("{}/{}", session.namespace, session.name),
                "ended the session's other serving turn: a new turn opened"
            );
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// How long `pod` is kept after its turn: its tier's idleTimeoutSeconds when that is over 0 and
/// the pod is Ready (a failed or starting pod is deleted, and so is one whose agent gave it up:
/// its readiness fails); `None`: delete it.
async fn keep_for(ctx: &Context, pod: &Pod) -> Result<Option<u32>, kube::Error> {
    if !matches!(state::phase(pod), state::Phase::Ready { .. }) {
        return Ok(None);
    }
    let Some(tier) = pod.labels().get(labels::TIER) else {
        return Ok(None);
    };
    let idle = match ctx.caches.tier(tier) {
        Some(t) => t.spec.idle_timeout_seconds,
        None => match Api::<SandboxTier>::all(ctx.client.clone())
            .get_opt(tier)
            .await?
        {
            Some(t) => t.spec.idle_timeout_seconds,
            None => return Ok(None),
        },
    };
    Ok((idle > 0).then_some(idle))
}
