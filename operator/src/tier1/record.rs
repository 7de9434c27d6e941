//! The record of which pod serves a turn: a Lease in the operator's namespace, named after the
//! turn (`t1-turn-<hash of namespace, session, turn>`), whose `holderIdentity` names the pod. It
//! is created once: of two opens of one turn (two replicas, or a worker's retry racing its first
//! request), the one whose create succeeds decided the turn's pod, and the other gives up the pod
//! it took and answers with the recorded one. The API server's create-if-absent on one name is
//! what makes "one pod per turn" hold across replicas; a claim conditioned on a pool pod's
//! resourceVersion only keeps two turns off one pod.
//!
//! Written before the ordinary pod (and its token Secret) of a turn is created, after a pool or
//! kept pod is claimed. The end of the turn deletes it; the sweep deletes one whose pod is gone,
//! together with the ordinary pod's token Secret it may have left (docs/tier1.md).

use super::pod::{self, Serving};
use crate::context::Context;
use crate::kube_util::{create_if_absent, delete_if_present};
use crate::labels;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kube_harness_crds::SandboxTier;
use std::collections::BTreeMap;

/// Annotation on a turn record: the name of the turn's ordinary pod (and token Secret), which
/// the sweep deletes with an orphaned record.
pub const ORDINARY: &str = "kubeharness.dev/ordinary-pod";

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

/// The record of `turn`, if there is one: the pod it names.
pub async fn get(
    ctx: &Context,
    session_namespace: &str,
    session: &str,
    turn: &str,
) -> Result<Option<String>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    Ok(leases
        .get_opt(&name(session_namespace, session, turn))
        .await?
        .as_ref()
        .and_then(holder)
        .map(str::to_string))
}

/// How recording a turn's pod went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The record names the pod this open chose (created now, or by a racing open of the same
    /// choice).
    Ours,
    /// Another open recorded this pod first: the turn's pod.
    Theirs(String),
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

/// Records `pod` as the pod of `serving`'s turn, unless another pod is recorded already.
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
            return Ok(match holder(&found) {
                Some(h) if h == pod => Recorded::Ours,
                Some(h) => Recorded::Theirs(h.to_string()),
                // Never written without a holder; an empty one decides nothing: ours.
                None => Recorded::Ours,
            });
        }
    }
    Ok(Recorded::Ours)
}

/// Deletes the record of a turn; already gone is fine.
pub async fn delete(
    ctx: &Context,
    session_namespace: &str,
    session: &str,
    turn: &str,
) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    delete_if_present(&leases, &name(session_namespace, session, turn)).await
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
