//! The proof that the operator made a pod (issue 30): labels, owner references and names are
//! all a tenant's to forge in its own namespace, so a warm-pool pod (level 0) or a Tier-1 pod is
//! trusted only when it carries [`ANNOTATION`] = hex HMAC-SHA256(key, "<namespace>/<name>/<uid>")
//! over its own metadata. The operator writes it right after it creates the pod (the create
//! answers with the uid the API server chose) with a key only it holds ([`load`]: a Secret in its
//! own namespace). A tenant can read and copy the annotation, but the uid of a pod it makes is
//! never that of the operator's, so a copy proves nothing. A pod the operator created and did not
//! get to annotate (it stopped in between) fails the check like a planted one and is replaced.
//!
//! A pod that fails is never claimed, adopted or handed anything: [`guard::refuse`] deletes it
//! (that very pod: a uid precondition) with a Warning Event `PodOriginUnproven`.

pub mod guard;

use hmac::{Hmac, Mac};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::{Api, Client, ResourceExt};
use kube_harness_crds::HarnessTurn;
use sha2::Sha256;
use std::collections::BTreeMap;
use subtle::ConstantTimeEq;

/// Annotation on a pod the operator made: its proof of origin.
pub const ANNOTATION: &str = "kubeharness.dev/origin";
/// Secret in the operator's namespace holding the key (`key`: 32 random bytes), made by the
/// first operator that starts and read by every later one.
pub const KEY_SECRET: &str = "kube-harness-pod-origin-key";
const KEY_FIELD: &str = "key";
const KEY_LEN: usize = 32;

/// The key the operator proves its pods with. Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct OriginKey([u8; KEY_LEN]);

impl std::fmt::Debug for OriginKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OriginKey(..)")
    }
}

impl OriginKey {
    /// A fresh random key (what a Context starts with until [`load`] replaces it).
    pub fn random() -> Self {
        use rand::RngCore;
        let mut key = [0u8; KEY_LEN];
        rand::thread_rng().fill_bytes(&mut key);
        OriginKey(key)
    }

    /// A key of these bytes (tests; a Secret's value).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        OriginKey(bytes)
    }

    fn mac(&self, namespace: &str, name: &str, uid: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any size");
        mac.update(format!("{namespace}/{name}/{uid}").as_bytes());
        mac
    }

    /// The proof for the pod `namespace`/`name` with `uid`.
    pub fn proof(&self, namespace: &str, name: &str, uid: &str) -> String {
        hex::encode(self.mac(namespace, name, uid).finalize().into_bytes())
    }

    /// The proof for `pod` as its metadata stands (`None`: it has no namespace, name or uid).
    pub fn proof_of(&self, pod: &Pod) -> Option<String> {
        let m = &pod.metadata;
        Some(self.proof(
            m.namespace.as_deref()?,
            m.name.as_deref()?,
            m.uid.as_deref()?,
        ))
    }

    /// Whether `pod` carries the proof of its own namespace, name and uid (compared in constant
    /// time).
    pub fn proves(&self, pod: &Pod) -> bool {
        let m = &pod.metadata;
        match (m.namespace.as_deref(), m.name.as_deref(), m.uid.as_deref()) {
            (Some(ns), Some(name), Some(uid)) => self.holds(ns, name, uid, pod.annotations()),
            _ => false,
        }
    }

    /// The proof for the turn object `namespace`/`name` of the session object `session_uid`. A
    /// HarnessTurn is proven at its create (the one request that decides which pod serves the
    /// turn), so the proof covers its session's uid, not its own: a copy onto a turn object
    /// made again under the same name speaks for the same turn of the same session only, a
    /// tenant's own (docs/security-model.md, T8).
    pub fn turn_proof(&self, namespace: &str, name: &str, session_uid: &str) -> String {
        self.proof(namespace, name, &format!("harnessturn:{session_uid}"))
    }

    /// Whether `turn` carries the proof of its namespace, name and its session uid label.
    pub fn proves_turn(&self, turn: &HarnessTurn) -> bool {
        let m = &turn.metadata;
        let session_uid = turn.labels().get(crate::labels::SESSION_UID);
        match (m.namespace.as_deref(), m.name.as_deref(), session_uid) {
            (Some(ns), Some(name), Some(uid)) => {
                self.holds(ns, name, &format!("harnessturn:{uid}"), turn.annotations())
            }
            _ => false,
        }
    }

    /// Whether `annotations` carry the proof of (`namespace`, `name`, `bound`), compared in
    /// constant time.
    fn holds(
        &self,
        namespace: &str,
        name: &str,
        bound: &str,
        annotations: &BTreeMap<String, String>,
    ) -> bool {
        let Some(claimed) = annotations.get(ANNOTATION) else {
            return false;
        };
        let Ok(claimed) = hex::decode(claimed) else {
            return false;
        };
        let want = self.mac(namespace, name, bound).finalize().into_bytes();
        claimed.len() == want.len() && bool::from(want.as_slice().ct_eq(&claimed))
    }

    /// `pod` with its proof set in memory (what [`stamp`] writes).
    pub fn stamped(&self, mut pod: Pod) -> Pod {
        if let Some(proof) = self.proof_of(&pod) {
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ANNOTATION.into(), proof);
        }
        pod
    }
}

/// The operator's key: read from [`KEY_SECRET`] in `namespace`, made there first when there is
/// none (of two replicas starting at once, the one whose create wins decides, and the other
/// reads it). A Secret without a usable key is an error: pods proven with another key would all
/// be refused.
pub async fn load(client: &Client, namespace: &str) -> anyhow::Result<OriginKey> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _ in 0..2 {
        if let Some(found) = secrets.get_opt(KEY_SECRET).await? {
            return from_secret(&found);
        }
        let fresh = OriginKey::random();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(KEY_SECRET.into()),
                namespace: Some(namespace.into()),
                labels: Some(BTreeMap::from([(
                    crate::labels::MANAGED_BY.0.into(),
                    crate::labels::MANAGED_BY.1.into(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(
                KEY_FIELD.into(),
                ByteString(fresh.0.to_vec()),
            )])),
            ..Secret::default()
        };
        if crate::kube_util::create_if_absent(&secrets, &secret)
            .await?
            .is_some()
        {
            return Ok(fresh);
        }
    }
    anyhow::bail!("Secret {namespace}/{KEY_SECRET} is made and deleted over and over")
}

fn from_secret(secret: &Secret) -> anyhow::Result<OriginKey> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KEY_FIELD))
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    let key: [u8; KEY_LEN] = bytes.try_into().map_err(|_| {
        anyhow::anyhow!(
            "Secret {KEY_SECRET} has no {KEY_LEN}-byte key `{KEY_FIELD}`; delete it and the operator makes one (its warm and Tier-1 pods are then replaced)"
        )
    })?;
    Ok(OriginKey(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, uid: &str, proof: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(uid.into());
        if let Some(proof) = proof {
            p.metadata.annotations = Some(BTreeMap::from([(ANNOTATION.into(), proof.into())]));
        }
        p
    }

    #[test]
    fn a_stamped_pod_proves_itself_and_nothing_else_does() {
        let key = OriginKey::from_bytes([7; 32]);
        let ours = key.stamped(pod("team-a", "kh-warm-1", "uid-1", None));
        assert!(key.proves(&ours));
        let proof = ours.annotations()[ANNOTATION].clone();
        assert_eq!(proof.len(), 64, "hex of HMAC-SHA256");
        assert_eq!(proof, key.proof("team-a", "kh-warm-1", "uid-1"));
        // The tenant's copy of the annotation on its own pod (same name, another uid; or
        // another name or namespace): refused.
        for (ns, name, uid) in [
            ("team-a", "kh-warm-1", "uid-2"),
            ("team-a", "kh-warm-2", "uid-1"),
            ("team-b", "kh-warm-1", "uid-1"),
        ] {
            assert!(
                !key.proves(&pod(ns, name, uid, Some(&proof))),
                "{ns}/{name}/{uid}"
            );
        }
        // No annotation, garbage, a truncated proof, no uid, another key.
        assert!(!key.proves(&pod("team-a", "kh-warm-1", "uid-1", None)));
        assert!(!key.proves(&pod("team-a", "kh-warm-1", "uid-1", Some("zz"))));
        assert!(!key.proves(&pod("team-a", "kh-warm-1", "uid-1", Some(&proof[..62]))));
        assert!(!key.proves(&pod("team-a", "kh-warm-1", "uid-1", Some(""))));
        let mut no_uid = ours.clone();
        no_uid.metadata.uid = None;
        assert!(!key.proves(&no_uid));
        assert!(!OriginKey::from_bytes([8; 32]).proves(&ours));
        assert!(!OriginKey::random().proves(&ours));
    }

    #[test]
    fn a_key_is_read_from_its_secret_only_when_whole() {
        let secret = |bytes: Vec<u8>| Secret {
            data: Some(BTreeMap::from([(KEY_FIELD.into(), ByteString(bytes))])),
            ..Secret::default()
        };
        let key = from_secret(&secret(vec![3; 32])).unwrap();
        assert_eq!(
            key.proof("a", "b", "c"),
            OriginKey::from_bytes([3; 32]).proof("a", "b", "c")
        );
        assert!(from_secret(&secret(vec![3; 31])).is_err());
        assert!(from_secret(&Secret::default()).is_err());
        assert_eq!(format!("{key:?}"), "OriginKey(..)");
    }
}
