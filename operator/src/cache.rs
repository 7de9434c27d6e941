//! What the session reconcile reads without asking the API server: reflector stores of the
//! SandboxTiers and the operator's worker pods (fed by watches the leader runs, see `run.rs`), the
//! sessions' tokens once read, and a record of the child objects it last applied, so an unchanged
//! PVC, NetworkPolicy or Service is not applied again. At 2,000 sessions the uncached reconcile
//! made six requests every 15 s per Ready session and the API server answered 429
//! (docs/performance.md, "Scale").
//!
//! A store may lag behind the API server or be empty (before its first list, in tests): every
//! reader falls back to a request on a miss, and a stale hit is one the next watch event corrects.
//! Cached pods keep their status and the operator's own labels and annotations only (the
//! reconcile reads nothing else of an existing pod; a tenant may put anything else on a pod in its
//! namespace, see [`slim_pod`]); cached objects lose their managedFields. Secrets are not watched (the operator may not
//! list them: that would be every Secret of the cluster), so a session's tokens are remembered
//! from the read or create that made them. Services are not watched either (no list permission);
//! like every applied child, an unchanged one is applied again after [`APPLIED_TTL`] anyway.

use crate::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use kube_harness_crds::{HarnessSessionStatus, SandboxTier};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an applied child counts as unchanged without a watch event saying so: the backstop
/// for a change no watch reports (Services are not watched).
pub const APPLIED_TTL: Duration = Duration::from_secs(600);

/// How long the session log's server token, read from the operator's Secret, is reused for
/// minting new sessions' scoped tokens: a rotated Secret is picked up within this.
pub const SERVER_TOKEN_TTL: Duration = Duration::from_secs(30);

/// The writing halves of the stores, handed once to the watches that feed them.
pub struct Writers {
    pub tiers: reflector::store::Writer<SandboxTier>,
    pub pods: reflector::store::Writer<Pod>,
}

/// The reconcile's read caches.
pub struct Caches {
    pub tiers: Store<SandboxTier>,
    pub pods: Store<Pod>,
    writers: Mutex<Option<Writers>>,
    tokens: Mutex<HashMap<String, Tokens>>,
    /// The uid of the worker pod the operator last created or adopted for each session, beside
    /// the one its status records (a status write that failed loses nothing).
    workers: Mutex<HashMap<String, String>>,
    applied: Mutex<HashMap<ChildKey, Applied>>,
    written: Mutex<HashMap<String, Written>>,
    server_token: Mutex<Option<(Instant, Option<String>)>>,
}

/// A session status the operator wrote, until the watch brings the session back with it.
#[derive(Clone, Debug)]
struct Written {
    /// resourceVersions this write (and the ones it built on) replaced: a session still showing
    /// one of them is older than `status`.
    superseded: Vec<String>,
    resource_version: String,
    status: HarnessSessionStatus,
}

/// A child object by kind, namespace and name.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ChildKey {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

/// What the operator last applied to a child and the resourceVersion the API server answered.
#[derive(Clone, Debug, PartialEq)]
struct Applied {
    digest: [u8; 32],
    resource_version: String,
    at: Instant,
}

/// A session's worker API token and session-log token, as its Secret holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokens {
    /// The session's UID: a new session of the same name has other tokens.
    pub uid: String,
    pub token: String,
    pub session_log: Option<String>,
}

impl Default for Caches {
    fn default() -> Self {
        let (tiers, tier_writer) = reflector::store();
        let (pods, pod_writer) = reflector::store();
        Caches {
            tiers,
            pods,
            writers: Mutex::new(Some(Writers {
                tiers: tier_writer,
                pods: pod_writer,
            })),
            tokens: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
            applied: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            server_token: Mutex::new(None),
        }
    }
}

impl Caches {
    /// The writers, once: the leader's watches take them when it starts its controllers.
    pub fn take_writers(&self) -> Option<Writers> {
        self.writers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    pub fn tier(&self, name: &str) -> Option<std::sync::Arc<SandboxTier>> {
        self.tiers.get(&ObjectRef::new(name))
    }

    /// Worker pod `ns/name`: `Some(None)` when the cache has listed every pod and this one is not
    /// among them, `None` when the cache cannot tell (not listed yet).
    pub fn pod(&self, ns: &str, name: &str) -> Option<Option<std::sync::Arc<Pod>>> {
        match self.pods.get(&ObjectRef::new(name).within(ns)) {
            Some(pod) => Some(Some(pod)),
            None if is_ready(&self.pods) => Some(None),
            None => None,
        }
    }

    /// The tokens remembered for session `key` with UID `uid`.
    pub fn tokens(&self, key: &str, uid: &str) -> Option<Tokens> {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .filter(|t| t.uid == uid)
            .cloned()
    }

    pub fn remember_tokens(&self, key: &str, tokens: Tokens) {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), tokens);
    }

    /// The session log's server token read less than [`SERVER_TOKEN_TTL`] ago (`Some(None)`:
    /// the Secret had none).
    pub fn server_token(&self) -> Option<Option<String>> {
        let guard = self.server_token.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .as_ref()
            .filter(|(at, _)| at.elapsed() < SERVER_TOKEN_TTL)
            .map(|(_, t)| t.clone())
    }

    /// Notes the server token just read.
    pub fn remember_server_token(&self, token: Option<String>) {
        *self.server_token.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), token));
    }

    /// Whether `desired` is exactly what was last applied to `key` and nobody changed the object
    /// since (no watch event with another resourceVersion came in between).
    pub fn unchanged(&self, key: &ChildKey, desired: &[u8]) -> bool {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .is_some_and(|a| a.digest == digest(desired) && a.at.elapsed() < APPLIED_TTL)
    }

    /// Notes that `desired` was applied to `key` and the object is now at `resource_version`.
    pub fn applied(&self, key: ChildKey, desired: &[u8], resource_version: Option<String>) {
        let mut all = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        match resource_version {
            Some(resource_version) => {
                all.insert(
                    key,
                    Applied {
                        digest: digest(desired),
                        resource_version,
                        at: Instant::now(),
                    },
                );
            }
            None => {
                all.remove(&key);
            }
        }
    }

    /// A watch event for child `key`: unless it shows the version the operator applied last, the
    /// object changed (or went) behind its back, and the next reconcile applies it again.
    pub fn observed(&self, key: &ChildKey, resource_version: Option<&str>, deleted: bool) {
        let mut all = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        let keep = !deleted
            && all
                .get(key)
                .is_some_and(|a| Some(a.resource_version.as_str()) == resource_version);
        if !keep {
            all.remove(key);
        }
    }

    /// How many applied children are remembered.
    pub fn applied_len(&self) -> usize {
        self.applied.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Feeds [`Caches::observed`] from a watch of one child kind.
    pub fn observe_event<K>(&self, kind: &'static str, event: &watcher::Event<K>)
    where
        K: Resource,
    {
        let (obj, deleted) = match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (o, false),
            watcher::Event::Delete(o) => (o, true),
            // A relist: a child deleted while the watch was down sends no Delete, so every child
            // of the kind is applied again once.
            watcher::Event::Init => {
                self.applied
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|k, _| k.kind != kind);
                return;
            }
            watcher::Event::InitDone => return,
        };
        let key = ChildKey {
            kind,
            namespace: obj.meta().namespace.clone().unwrap_or_default(),
            name: obj.meta().name.clone().unwrap_or_default(),
        };
        self.observed(&key, obj.meta().resource_version.as_deref(), deleted);
    }
}

impl Caches {
    /// The status the operator last wrote for session `key` and the resourceVersion it left,
    /// when the session at hand (at `seen`) is older than that write: the watch has not brought
    /// the write back yet. Building on it instead of the stale status avoids a status write that
    /// could only fail with a conflict. `None` when the session at hand is current.
    pub fn newer_status(
        &self,
        key: &str,
        seen: Option<&str>,
    ) -> Option<(HarnessSessionStatus, String)> {
        let mut all = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let w = all.get(key)?;
        if seen.is_some_and(|rv| w.superseded.iter().any(|s| s == rv)) {
            return Some((w.status.clone(), w.resource_version.clone()));
        }
        // Caught up, or written by someone else since: the session at hand is what counts.
        all.remove(key);
        None
    }

    /// Notes a status write for session `key`: made on top of `based_on` (the resourceVersion
    /// it was conditioned on; `built_on_memo` when that came from [`Caches::newer_status`]),
    /// leaving `resource_version`.
    pub fn wrote_status(
        &self,
        key: &str,
        based_on: Option<String>,
        built_on_memo: bool,
        resource_version: Option<String>,
        status: &HarnessSessionStatus,
    ) {
        let mut all = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let (Some(based_on), Some(resource_version)) = (based_on, resource_version) else {
            all.remove(key);
            return;
        };
        let mut superseded = match all.remove(key) {
            Some(w) if built_on_memo => w.superseded,
            _ => Vec::new(),
        };
        superseded.push(based_on);
        // A handful is plenty: the watch catches up within a write or two.
        if superseded.len() > 8 {
            superseded.remove(0);
        }
        all.insert(
            key.to_string(),
            Written {
                superseded,
                resource_version,
                status: status.clone(),
            },
        );
    }

    /// Notes that the last status write for session `key` also supersedes `rv`: a new session's
    /// first write is conditioned on its finalizer patch, and the object from before that patch
    /// (which a lagging watch still shows) is older than the write too.
    pub fn also_superseded(&self, key: &str, rv: Option<String>) {
        let mut all = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(w), Some(rv)) = (all.get_mut(key), rv) {
            w.superseded.push(rv);
        }
    }

    /// Forgets session `key` (deleted): its status write and tokens. Its children's records go
    /// with their Delete events.
    /// Remembers `uid` as the worker pod the operator made (or adopted) for session `key`.
    pub fn remember_worker(&self, key: &str, uid: String) {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), uid);
    }

    /// The worker pod uid remembered for session `key`.
    pub fn worker_uid(&self, key: &str) -> Option<String> {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    pub fn forget_session(&self, key: &str) {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// Whether a store has had its first complete list.
fn is_ready<K>(store: &Store<K>) -> bool
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// What a cached object keeps: no managedFields (often the largest part of an object).
pub fn slim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// The labels a cached pod keeps: the ones the operator reads or selects on.
const POD_LABELS: &[&str] = &[
    labels::SESSION,
    labels::ROLE,
    labels::POOL,
    labels::CLAIMED,
    labels::TEMPLATE_HASH,
    labels::TIER,
    labels::MANAGED_BY.0,
    labels::NAME_WORKER.0,
];

/// The annotations a cached pod keeps: the ones the operator reads.
const POD_ANNOTATIONS: &[&str] = &[
    labels::SPEC_HASH,
    crate::warm::objects::ADOPTED,
    crate::warm::objects::POOL_TIER,
    crate::origin::ANNOTATION,
];

/// The longest annotation value a cached pod keeps: every one the operator writes is a hash, a
/// name or a number.
pub const MAX_KEPT_ANNOTATION: usize = 1024;

/// What a cached pod keeps: its status and the metadata the operator reads. Labels, annotations,
/// owner references and finalizers are a tenant's to write on a pod in its namespace (8,000
/// labels and a 250 KB annotation on each of ~110 pods took the operator from 36 MB to OOM,
/// docs/security-model.md T4): only the operator's own keys stay, and only the controller
/// reference (there is at most one).
pub fn slim_pod(pod: &mut Pod) {
    slim(pod);
    pod.spec = None;
    let meta = &mut pod.metadata;
    if let Some(labels) = &mut meta.labels {
        labels.retain(|k, _| POD_LABELS.contains(&k.as_str()));
    }
    if let Some(annotations) = &mut meta.annotations {
        annotations
            .retain(|k, v| POD_ANNOTATIONS.contains(&k.as_str()) && v.len() <= MAX_KEPT_ANNOTATION);
    }
    if let Some(owners) = &mut meta.owner_references {
        owners.retain(|o| o.controller == Some(true));
        owners.truncate(1);
    }
    meta.finalizers = None;
}

/// The name of a child object (for a [`ChildKey`]).
pub fn child_key<K: Resource<DynamicType = ()>>(ns: &str, obj: &K) -> ChildKey {
    ChildKey {
        kind: kind_of::<K>(),
        namespace: ns.to_string(),
        name: obj.name_any(),
    }
}

/// `K::kind` as a `&'static str` for the kinds the session applies.
fn kind_of<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "PersistentVolumeClaim" => "PersistentVolumeClaim",
        "NetworkPolicy" => "NetworkPolicy",
        "Service" => "Service",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ChildKey {
        ChildKey {
            kind: "Service",
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn an_applied_child_stays_unchanged_until_another_version_or_a_delete_is_seen() {
        let c = Caches::default();
        let k = key("a");
        assert!(!c.unchanged(&k, b"v1"), "never applied");
        c.applied(k.clone(), b"v1", Some("10".into()));
        assert!(c.unchanged(&k, b"v1"));
        assert!(!c.unchanged(&k, b"v2"), "a different desired object");
        // The watch echoing the operator's own write keeps the record.
        c.observed(&k, Some("10"), false);
        assert!(c.unchanged(&k, b"v1"));
        // Someone else's write: apply again.
        c.observed(&k, Some("11"), false);
        assert!(!c.unchanged(&k, b"v1"));
        c.applied(k.clone(), b"v1", Some("12".into()));
        c.observed(&k, Some("12"), true);
        assert!(!c.unchanged(&k, b"v1"), "deleted");
        // An apply whose answer had no resourceVersion is not remembered.
        c.applied(k.clone(), b"v1", None);
        assert_eq!(c.applied_len(), 0);
        // Unwatched changes are caught by age.
        c.applied(k.clone(), b"v1", Some("13".into()));
        c.applied.lock().unwrap().get_mut(&k).unwrap().at -= APPLIED_TTL;
        assert!(!c.unchanged(&k, b"v1"), "too old to trust");
        // A relist of the kind forgets every record of it.
        c.applied(k.clone(), b"v1", Some("14".into()));
        c.observe_event::<k8s_openapi::api::core::v1::Service>("Service", &watcher::Event::Init);
        assert_eq!(c.applied_len(), 0);
    }

    #[test]
    fn tokens_belong_to_one_session_uid() {
        let c = Caches::default();
        let t = Tokens {
            uid: "u1".into(),
            token: "t".into(),
            session_log: None,
        };
        c.remember_tokens("ns/a", t.clone());
        assert_eq!(c.tokens("ns/a", "u1"), Some(t));
        assert_eq!(
            c.tokens("ns/a", "u2"),
            None,
            "a new session of the same name"
        );
        c.forget_session("ns/a");
        assert_eq!(c.tokens("ns/a", "u1"), None);
    }

    #[test]
    fn a_status_write_stands_in_for_the_session_until_the_watch_brings_it_back() {
        let c = Caches::default();
        let st = |phase| HarnessSessionStatus {
            phase: Some(phase),
            ..HarnessSessionStatus::default()
        };
        use kube_harness_crds::Phase;
        assert!(c.newer_status("k", Some("1")).is_none(), "nothing written");
        c.wrote_status(
            "k",
            Some("1".into()),
            false,
            Some("2".into()),
            &st(Phase::Provisioning),
        );
        // The cache still shows version 1: the write is newer.
        let (s, rv) = c.newer_status("k", Some("1")).unwrap();
        assert_eq!((s.phase, rv.as_str()), (Some(Phase::Provisioning), "2"));
        // A second write on top of the first, while the cache still shows 1, then 2.
        c.wrote_status(
            "k",
            Some("2".into()),
            true,
            Some("3".into()),
            &st(Phase::Ready),
        );
        assert_eq!(c.newer_status("k", Some("1")).unwrap().1, "3");
        assert_eq!(c.newer_status("k", Some("2")).unwrap().1, "3");
        // Caught up: the session itself counts, and the record goes.
        assert!(c.newer_status("k", Some("3")).is_none());
        assert!(c.newer_status("k", Some("1")).is_none());
        // Someone else wrote (version 9): the session counts.
        c.wrote_status(
            "k",
            Some("3".into()),
            false,
            Some("4".into()),
            &st(Phase::Ready),
        );
        assert!(c.newer_status("k", Some("9")).is_none());
        c.wrote_status(
            "k",
            Some("4".into()),
            false,
            Some("5".into()),
            &st(Phase::Ready),
        );
        c.forget_session("k");
        assert!(c.newer_status("k", Some("4")).is_none());
    }

    #[test]
    fn a_cached_pod_keeps_only_the_operators_labels_and_annotations() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        use std::collections::BTreeMap;
        let mut labels: BTreeMap<String, String> = (0..8_000)
            .map(|i| (format!("tenant.example/l{i}"), "x".repeat(63)))
            .collect();
        let ours = [
            (labels::SESSION, "s1"),
            (labels::ROLE, labels::ROLE_WORKER),
            (labels::POOL, "pool"),
            (labels::TEMPLATE_HASH, "abc"),
            (labels::MANAGED_BY.0, labels::MANAGED_BY.1),
        ];
        for (k, v) in ours {
            labels.insert(k.into(), v.into());
        }
        let origin = "f".repeat(64);
        let annotations = BTreeMap::from([
            ("tenant.example/fat".to_string(), "a".repeat(250_000)),
            (labels::SPEC_HASH.to_string(), "hash".to_string()),
            (crate::origin::ANNOTATION.to_string(), origin.clone()),
            (
                crate::warm::objects::ADOPTED.to_string(),
                "b".repeat(250_000),
            ),
        ]);
        let owner = |controller| OwnerReference {
            controller: Some(controller),
            kind: "HarnessSession".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        };
        let mut pod = Pod::default();
        pod.metadata.labels = Some(labels);
        pod.metadata.annotations = Some(annotations);
        pod.metadata.owner_references = Some(vec![owner(false), owner(true), owner(false)]);
        pod.metadata.finalizers = Some(vec!["tenant.example/f".into(); 1000]);
        slim_pod(&mut pod);
        let kept: Vec<(&str, &str)> = pod
            .labels()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut want = ours.to_vec();
        want.sort();
        assert_eq!(kept, want, "only the operator's labels");
        let kept: Vec<&str> = pod.annotations().keys().map(String::as_str).collect();
        assert_eq!(
            kept,
            [crate::origin::ANNOTATION, labels::SPEC_HASH],
            "only the operator's annotations, none over {MAX_KEPT_ANNOTATION} bytes"
        );
        assert_eq!(pod.annotations()[crate::origin::ANNOTATION], origin);
        assert_eq!(pod.owner_references(), [owner(true)]);
        assert!(pod.finalizers().is_empty());
        let size = serde_json::to_vec(&pod).unwrap().len();
        assert!(size < 2_000, "{size} bytes kept");
    }

    #[test]
    fn the_writers_are_handed_out_once() {
        let c = Caches::default();
        assert!(c.take_writers().is_some());
        assert!(c.take_writers().is_none());
    }
}
