//! The record of which pod serves a turn: a [`HarnessTurn`] in the session's namespace, owned by
//! the session and named after the turn (`<session>-turn-<hash of namespace, session, turn>`),
//! whose `spec.pod` names the pod. It is created once: of two opens of one turn (two replicas, or
//! a worker's retry racing its first request), the one whose create succeeds decided the turn's
//! pod, and the other gives up the pod it took and answers with the recorded one. The API
//! server's create-if-absent on one name is what makes "one pod per turn" hold across replicas;
//! a claim conditioned on a pool pod's resourceVersion only keeps two turns off one pod.
//!
//! Written before the ordinary pod (and its token Secret) of a turn is created, after a pool or
//! kept pod is claimed. The end of the turn sets `spec.ended` (and [`labels::TURN_ENDED`], when),
//! written before the turn's pods are listed and ended: an open of the turn that is still under
//! way then finds its record ended, creates nothing and gives up what it claimed or made, so an
//! ended turn stays ended (the CRD's validation keeps `ended` from going back). The sweep deletes
//! an ended record after [`ENDED_KEPT`], and a record whose pod is gone together with the
//! ordinary pod's token Secret it may have left (docs/tier1.md); deleting the session deletes
//! its records (the garbage collector). A record carries its session's uid: one of an earlier
//! session of the same name is never this session's. It lives in the tenant's namespace, so a
//! record counts only with the operator's proof ([`crate::origin`]): an unproven one names no
//! pod, and the open that meets it deletes it.

use super::pod::{self, Serving};
use crate::context::Context;
use crate::kube_util::create_if_absent;
use crate::labels;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use kube_harness_crds::{HarnessTurn, HarnessTurnSpec, SandboxTier};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long an ended record is kept: far beyond an open still under way when its turn ended (the
/// worker opens a turn only before it ends it, and every turn id is fresh).
pub const ENDED_KEPT: Duration = Duration::from_secs(600);

/// Name of the record of a turn (a session name too long to prefix it is left out: the Session
/// column and labels still say whose it is).
pub fn name(session_namespace: &str, session: &str, turn: &str) -> String {
    let hash = crate::kube_util::short_hash(&[session_namespace, session, turn]);
    match session.len() {
        1..=200 => format!("{session}-turn-{hash}"),
        _ => format!("turn-{hash}"),
    }
}

/// The pod a record names: only a name that can be a pod's (a DNS subdomain), so a record's
/// `spec.pod` never becomes anything but one pod's path in a request.
pub fn holder(record: &HarnessTurn) -> Option<&str> {
    record
        .spec
        .pod
        .as_deref()
        .filter(|p| kube_harness_crds::valid::dns_subdomain(p))
}

/// Whether `record` is one the operator made: its proof (over its namespace, name and session
/// uid), and a name that is the one its own spec's session and turn give. Labels are never read
/// as the record's turn: they are the tenant's to change on an object it may write.
pub fn proven(ctx: &Context, record: &HarnessTurn) -> bool {
    let own_name = record
        .metadata
        .namespace
        .as_deref()
        .map(|ns| name(ns, &record.spec.session, &record.spec.turn));
    own_name.is_some() && record.metadata.name == own_name && ctx.origin.proves_turn(record)
}

/// The (session namespace, session, turn label) a proven record is of, from its namespace and
/// spec.
pub fn key(record: &HarnessTurn) -> (String, String, String) {
    (
        record.metadata.namespace.clone().unwrap_or_default(),
        record.spec.session.clone(),
        pod::turn_label(&record.spec.turn),
    )
}

/// Whether a record says its turn ended.
pub fn ended(record: &HarnessTurn) -> bool {
    record.spec.ended
}

/// The name of the ordinary pod (and token Secret) of a record's turn.
pub fn ordinary(record: &HarnessTurn) -> Option<String> {
    let ns = record.metadata.namespace.as_deref()?;
    Some(pod::ordinary_name(
        ns,
        &record.spec.session,
        &record.spec.turn,
    ))
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
    /// No record (or one the operator did not make): no open recorded a pod yet.
    Nothing,
    /// The pod that serves the turn.
    Held(String),
    /// The turn ended, or belongs to an earlier session of the same name: nothing serves it for
    /// this session.
    Ended,
}

/// Reads `record` (the turn's, if any) for the session object with `uid`. An ended record ends
/// the turn whoever made it (a tenant's own tombstone only ends its own turn); a holder counts
/// only with the operator's proof.
pub fn said(ctx: &Context, record: Option<&HarnessTurn>, uid: Option<&str>) -> Said {
    match record {
        None => Said::Nothing,
        Some(r) if ended(r) || !belongs(r.labels(), uid) => Said::Ended,
        Some(r) if !proven(ctx, r) => Said::Nothing,
        // Never written without a holder; an empty one decides nothing.
        Some(r) => holder(r).map_or(Said::Nothing, |h| Said::Held(h.to_string())),
    }
}

fn records(ctx: &Context, session_namespace: &str) -> Api<HarnessTurn> {
    Api::namespaced(ctx.client.clone(), session_namespace)
}

/// The record of `turn`, if there is one.
pub async fn get(
    ctx: &Context,
    session_namespace: &str,
    session: &str,
    turn: &str,
) -> Result<Option<HarnessTurn>, kube::Error> {
    records(ctx, session_namespace)
        .get_opt(&name(session_namespace, session, turn))
        .await
}

/// Every record of a session's turns (of any of its uids), ended ones included.
pub async fn of_turns(
    ctx: &Context,
    session_namespace: &str,
    session: &str,
) -> Result<Vec<HarnessTurn>, kube::Error> {
    let selector = pod::session_selector(session_namespace, session);
    Ok(records(ctx, session_namespace)
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
    /// Something not the operator's holds the record's name and would not go (a record being
    /// deleted, or made again as fast as it is deleted): nothing is recorded, and the open
    /// answers 503 rather than serve a turn nothing records.
    Contested,
}

/// The owner reference of a turn's record: its session, so deleting the session deletes it.
fn session_owner(session: &str, uid: Option<&str>) -> Option<Vec<OwnerReference>> {
    Some(vec![OwnerReference {
        api_version: "kubeharness.dev/v1alpha1".into(),
        kind: "HarnessSession".into(),
        name: session.into(),
        uid: uid?.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }])
}

/// The annotations proving the record `namespace`/`name` of the session object `uid` the
/// operator's (none without a uid: such a record is never trusted).
fn proof(
    ctx: &Context,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> BTreeMap<String, String> {
    uid.map(|uid| {
        (
            crate::origin::ANNOTATION.to_string(),
            ctx.origin.turn_proof(namespace, name, uid),
        )
    })
    .into_iter()
    .collect()
}

/// Whether `pod`'s labels say it serves `turn` of the session object `session` (name, uid).
pub fn pod_serves(pod: &Pod, session: &str, uid: Option<&str>, turn: &str) -> bool {
    let has = |k: &str, v: &str| pod.labels().get(k).map(String::as_str) == Some(v);
    has(labels::TURN, &pod::turn_label(turn))
        && has(labels::SESSION, session)
        && belongs(pod.labels(), uid)
}

/// The record object for `serving`'s turn naming `pod`, with the operator's proof.
pub fn object(ctx: &Context, serving: &Serving, tier: &SandboxTier, pod: &str) -> HarnessTurn {
    let ns = &serving.session_namespace;
    let uid = serving.session_uid.as_deref();
    let record_name = name(ns, &serving.session, &serving.turn);
    let mut labels = turn_labels(ns, &serving.session, uid, &serving.turn);
    labels.insert(labels::TIER.into(), tier.name_any());
    let annotations = proof(ctx, ns, &record_name, uid);
    HarnessTurn {
        metadata: ObjectMeta {
            name: Some(record_name),
            namespace: Some(ns.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: session_owner(&serving.session, serving.session_uid.as_deref()),
            ..ObjectMeta::default()
        },
        spec: HarnessTurnSpec {
            session: serving.session.clone(),
            turn: serving.turn.clone(),
            tier: Some(tier.name_any()),
            pod: Some(pod.into()),
            ended: false,
        },
        status: None,
    }
}

/// Records `pod` as the pod of `serving`'s turn, unless another pod is recorded already or the
/// turn ended. A record the operator did not make (no proof) is deleted, that very object, and
/// the create tried again; one that does not go is [`Recorded::Contested`].
pub async fn record(
    ctx: &Context,
    serving: &Serving,
    tier: &SandboxTier,
    pod: &str,
) -> Result<Recorded, kube::Error> {
    let api = records(ctx, &serving.session_namespace);
    let wanted = object(ctx, serving, tier, pod);
    // Three times at most: a record deleted between our create's 409 and its read (the turn
    // ended meanwhile), or an unproven one deleted, is created again.
    for _ in 0..3 {
        if create_if_absent(&api, &wanted).await?.is_some() {
            return Ok(Recorded::Ours);
        }
        if let Some(found) = api.get_opt(&wanted.name_any()).await? {
            // Being deleted (an unproven one we deleted, held by a finalizer, or an ended one
            // the sweep deletes): present, and not ours.
            if found.metadata.deletion_timestamp.is_some() {
                return Ok(match ended(&found) {
                    true => Recorded::Ended,
                    false => Recorded::Contested,
                });
            }
            match said(ctx, Some(&found), serving.session_uid.as_deref()) {
                Said::Held(h) if h == pod => return Ok(Recorded::Ours),
                Said::Held(h) => return Ok(Recorded::Theirs(h)),
                Said::Ended => return Ok(Recorded::Ended),
                Said::Nothing => {
                    tracing::warn!(record = %found.name_any(), "deleting a turn record the operator did not make");
                    delete_as_read(ctx, &found).await?;
                }
            }
        }
    }
    Ok(Recorded::Contested)
}

/// Whether the turn's record says it ended now (read again after an open made the turn's pod:
/// an end that came in between did not see that pod, so the open deletes it).
pub async fn ended_now(ctx: &Context, serving: &Serving) -> Result<bool, kube::Error> {
    let record = get(
        ctx,
        &serving.session_namespace,
        &serving.session,
        &serving.turn,
    )
    .await?;
    Ok(said(ctx, record.as_ref(), serving.session_uid.as_deref()) == Said::Ended)
}

/// The turn whose record is ended by [`end`].
pub struct Ending<'a> {
    pub session_namespace: &'a str,
    pub session: &'a str,
    /// The session object's uid, when known.
    pub uid: Option<&'a str>,
    pub turn: &'a str,
}

/// Ends the record of `ending`'s turn (created ended when there is none; its pod kept), by
/// server-side apply.
pub async fn end(ctx: &Context, ending: &Ending<'_>) -> Result<HarnessTurn, kube::Error> {
    let ns = ending.session_namespace;
    let record_name = name(ns, ending.session, ending.turn);
    let labels = turn_labels(ns, ending.session, ending.uid, ending.turn);
    let mut annotations = proof(ctx, ns, &record_name, ending.uid);
    annotations.insert(labels::TURN_ENDED.to_string(), pod::seconds_from_now(0));
    let mut metadata = json!({"name": record_name, "labels": labels, "annotations": annotations});
    if let Some(owners) = session_owner(ending.session, ending.uid) {
        metadata["ownerReferences"] = json!(owners);
    }
    let tombstone = json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "HarnessTurn",
        "metadata": metadata,
        "spec": {"session": ending.session, "turn": ending.turn, "ended": true},
    });
    let params = PatchParams::apply(labels::MANAGER).force();
    records(ctx, ns)
        .patch(&record_name, &params, &Patch::Apply(tombstone))
        .await
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

/// Deletes the record `record`, this very version of it (a uid and resourceVersion precondition:
/// never a record written again or changed since it was read). `false`: gone already, or changed.
pub async fn delete_as_read(ctx: &Context, record: &HarnessTurn) -> Result<bool, kube::Error> {
    let ns = record.metadata.namespace.as_deref().unwrap_or_default();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: record.metadata.uid.clone(),
            resource_version: record.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    match records(ctx, ns).delete(&record.name_any(), &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The label selector of turn records (and of every Tier-1 pod).
pub fn selector() -> String {
    format!("{}={}", labels::ROLE, labels::ROLE_TIER1)
}

/// Every turn record the operator made, in every namespace (the sweep's list): those with its
/// proof ([`proven`]). A record without it names no pod the sweep would judge by, and is not
/// held: the list is read a page of [`crate::kube_util::WATCH_PAGE_SIZE`] at a time.
pub async fn list(ctx: &Context) -> Result<Vec<HarnessTurn>, kube::Error> {
    let api: Api<HarnessTurn> = Api::all(ctx.client.clone());
    let selector = selector();
    let mut params = ListParams::default()
        .labels(&selector)
        .limit(crate::kube_util::WATCH_PAGE_SIZE);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items.into_iter().filter(|r| proven(ctx, r)));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}
