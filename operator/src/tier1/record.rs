//! The record of which pod serves a turn: a Lease in the operator's namespace, named after the
//! turn (`t1-turn-<hash of namespace, session, turn>`), whose `holderIdentity` names the pod. It
//! is created once: of two opens of one turn (two replicas, or a worker's retry racing its first
//! request), the one whose create succeeds decided the turn's pod, and the other gives up the pod
//! it took and answers with the recorded one. The API server's create-if-absent on one name is
//! what makes "one pod per turn" hold across replicas; a claim conditioned on a pool pod's
//! resourceVersion only keeps two turns off one pod.
//!
//! Written before the ordinary pod (and its token Secret) of a turn is created, after a pool or
//! kept pod is claimed. The end of the turn makes it a tombstone ([`labels::TURN_ENDED`],
//! written before the turn's pods are listed and ended): an open of the turn that is still under
//! way then finds its record ended, creates nothing and gives up what it claimed or made, so an
//! ended turn stays ended. The sweep deletes a tombstone after [`ENDED_KEPT`], and a record
//! whose pod is gone together with the ordinary pod's token Secret it may have left
//! (docs/tier1.md). A record carries its session's uid: one of an earlier session of the same
//! name is never this session's.

use super::pod::{self, Serving};
use crate::context::Context;
use crate::kube_util::create_if_absent;
use crate::labels;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use kube_harness_crds::SandboxTier;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// Annotation on a turn record: the name of the turn's ordinary pod (and token Secret), which
/// the sweep deletes with an orphaned record.
pub const ORDINARY: &str = "kubeharness.dev/ordinary-pod";

/// How long a tombstone is kept: far beyond an open still under way when its turn ended (the
/// worker opens a turn only before it ends it, and every turn id is fresh).
pub const ENDED_KEPT: Duration = Duration::from_secs(600);

/// Name of the record of a turn.
pub fn name(session_namespace: &str, session: &str, turn: &str) -> String {
    format!(
        "t1-turn-{}",
        crate::kube_util::short_hash(&[session_namespace, session, turn])
    )
}

/// The pod a record names.
pub fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

/// Whether a record is a tombstone: its turn ended.
pub fn ended(lease: &Lease) -> bool {
    lease.annotations().contains_key(labels::TURN_ENDED)
}

/// Whether a record (or pod) with these labels belongs to the session object with `uid`: its
/// session uid label is that uid, or it has none (written before records carried one).
pub fn belongs(on: &BTreeMap<String, String>, uid: Option<&str>) -> bool {
    match (on.get(labels::SESSION_UID), uid) {
        (Some(theirs), Some(ours)) => theirs == ours,
        _ => true,
    }
}

/// What the record of a turn says to the session object with `uid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    /// No record: no open recorded a pod yet.
    Nothing,
    /// The pod that serves the turn.
    Held(String),
    /// The turn ended (a tombstone), or belongs to an earlier session of the same name: nothing
    /// serves it for this session.
    Ended,
}

/// Reads `record` (the turn's, if any) for the session object with `uid`.
pub fn said(record: Option<&Lease>, uid: Option<&str>) -> Said {
    match record {
        None => Said::Nothing,
        Some(r) if ended(r) || !belongs(r.labels(), uid) => Said::Ended,
        // Never written without a holder; an empty one decides nothing.
        Some(r) => holder(r).map_or(Said::Nothing, |h| Said::Held(h.to_string())),
    }
}

/// The record of `turn`, if there is one.
pub async fn get(
    ctx: &Context,
    session_namespace: &str,
    session: &str,
    turn: &str,
) -> Result<Option<Lease>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    leases
        .get_opt(&name(session_namespace, session, turn))
        .await
}

/// Every record of a session's turns (of any of its uids), ended ones included.
pub async fn of_turns(
    ctx: &Context,
    session_namespace: &str,
    session: &str,
) -> Result<Vec<Lease>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let selector = pod::session_selector(session_namespace, session);
    Ok(leases
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// How recording a turn's pod went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The record names the pod this open chose (created now, or by a racing open of the same
    /// choice).
    Ours,
    /// Another open recorded this pod first: the turn's pod.
    Theirs(String),
    /// The turn ended meanwhile (or is an earlier same-named session's): nothing serves it.
    Ended,
}

/// The record object for `serving`'s turn naming `pod`.
pub fn object(serving: &Serving, tier: &SandboxTier, pod: &str, namespace: &str) -> Lease {
    let mut labels = pod::tier_labels(&tier.name_any());
    labels.insert(
        labels::SESSION_NAMESPACE.into(),
        serving.session_namespace.clone(),
    );
    labels.insert(labels::SESSION.into(), serving.session.clone());
    labels.insert(labels::TURN.into(), pod::turn_label(&serving.turn));
    if let Some(uid) = &serving.session_uid {
        labels.insert(labels::SESSION_UID.into(), uid.clone());
    }
    let ordinary = pod::ordinary_name(&serving.session_namespace, &serving.session, &serving.turn);
    Lease {
        metadata: ObjectMeta {
            name: Some(name(
                &serving.session_namespace,
                &serving.session,
                &serving.turn,
            )),
            namespace: Some(namespace.into()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (ORDINARY.to_string(), ordinary),
                (labels::TURN_ID.to_string(), serving.turn.clone()),
            ])),
            owner_references: Some(pod::tier_owner(tier)),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(pod.into()),
            acquire_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    }
}

/// Records `pod` as the pod of `serving`'s turn, unless another pod is recorded already or the
/// turn ended.
pub async fn record(
    ctx: &Context,
    serving: &Serving,
    tier: &SandboxTier,
    pod: &str,
) -> Result<Recorded, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let wanted = object(serving, tier, pod, &ctx.config.namespace);
    // Twice at most: a record deleted between our create's 409 and its read (the turn ended
    // meanwhile) is created again.
    for _ in 0..2 {
        if create_if_absent(&leases, &wanted).await?.is_some() {
            return Ok(Recorded::Ours);
        }
        if let Some(found) = leases.get_opt(&wanted.name_any()).await? {
            return Ok(match said(Some(&found), serving.session_uid.as_deref()) {
                Said::Held(h) if h == pod => Recorded::Ours,
                Said::Held(h) => Recorded::Theirs(h),
                Said::Ended => Recorded::Ended,
                Said::Nothing => Recorded::Ours,
            });
        }
    }
    Ok(Recorded::Ours)
}

/// Whether the turn's record is a tombstone now (read again after an open made the turn's pod:
/// an end that came in between did not see that pod, so the open deletes it).
pub async fn ended_now(ctx: &Context, serving: &Serving) -> Result<bool, kube::Error> {
    let record = get(
        ctx,
        &serving.session_namespace,
        &serving.session,
        &serving.turn,
    )
    .await?;
    Ok(said(record.as_ref(), serving.session_uid.as_deref()) == Said::Ended)
}

/// Makes the record `name` a tombstone (created as one when there is none; its holder kept), by
/// server-side apply: `labels` are its labels when it is created, `turn` its turn id.
pub async fn end(
    ctx: &Context,
    name: &str,
    labels: &BTreeMap<String, String>,
    turn: Option<&str>,
) -> Result<Lease, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let mut annotations =
        BTreeMap::from([(labels::TURN_ENDED.to_string(), pod::seconds_from_now(0))]);
    if let Some(turn) = turn {
        annotations.insert(labels::TURN_ID.into(), turn.into());
    }
    let tombstone = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
    });
    let params = PatchParams::apply(labels::MANAGER).force();
    leases.patch(name, &params, &Patch::Apply(tombstone)).await
}

/// The labels of the record of `turn` of the session object (`uid`).
pub fn turn_labels(
    session_namespace: &str,
    session: &str,
    uid: Option<&str>,
    turn: &str,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (
            labels::TIER1_MANAGED_BY.0.to_string(),
            labels::TIER1_MANAGED_BY.1.to_string(),
        ),
        (labels::ROLE.into(), labels::ROLE_TIER1.into()),
        (labels::SESSION_NAMESPACE.into(), session_namespace.into()),
        (labels::SESSION.into(), session.into()),
        (labels::TURN.into(), pod::turn_label(turn)),
    ]);
    if let Some(uid) = uid {
        labels.insert(labels::SESSION_UID.into(), uid.into());
    }
    labels
}

/// Deletes the record `lease`, this very version of it (a uid and resourceVersion precondition:
/// never a record written again or changed since it was read). `false`: gone already, or changed.
pub async fn delete_as_read(ctx: &Context, lease: &Lease) -> Result<bool, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: lease.metadata.uid.clone(),
            resource_version: lease.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    match leases.delete(&lease.name_any(), &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Every turn record (the sweep's list).
pub async fn list(ctx: &Context) -> Result<Vec<Lease>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let selector = format!("{}={}", labels::ROLE, labels::ROLE_TIER1);
    Ok(leases
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}
