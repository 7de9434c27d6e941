//! kubernetes-sigs/agent-sandbox beside Kube Harness (issue 16): its kinds as `DynamicObject`s (no
//! Go types), the objects the side-by-side bench creates, and a watch that notes when each object
//! of a namespace is first seen Ready, for ours and theirs alike. The peer itself is installed and
//! run by `tests/cluster/peers/agent-sandbox.sh`.

use crate::wait::{self, Check};
use crate::{E2eError, Result};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The peer's core group and its extensions group; v1beta1 is the storage version of each kind.
pub const CORE_GROUP: &str = "agents.x-k8s.io";
pub const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";
const VERSION: &str = "v1beta1";

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, VERSION, kind), plural)
}

/// `Sandbox`: one pod, created by the peer's controller.
pub fn sandbox() -> ApiResource {
    resource(CORE_GROUP, "Sandbox", "sandboxes")
}
/// `SandboxTemplate`: the pod a warm pool keeps ready.
pub fn template() -> ApiResource {
    resource(EXTENSIONS_GROUP, "SandboxTemplate", "sandboxtemplates")
}
/// `SandboxWarmPool`: `replicas` ready Sandboxes made from a template.
pub fn warm_pool() -> ApiResource {
    resource(EXTENSIONS_GROUP, "SandboxWarmPool", "sandboxwarmpools")
}
/// `SandboxClaim`: takes a Sandbox from a warm pool.
pub fn claim() -> ApiResource {
    resource(EXTENSIONS_GROUP, "SandboxClaim", "sandboxclaims")
}

/// True when `obj` has a `Ready` condition with status `True` (a pod, a HarnessSession, a Sandbox
/// and a SandboxClaim all report readiness this way).
pub fn is_ready(obj: &DynamicObject) -> bool {
    ready_condition(obj).is_some_and(|c| c["status"] == "True")
}

fn ready_condition(obj: &DynamicObject) -> Option<&Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// Server side created → Ready: `metadata.creationTimestamp` to the Ready condition's
/// `lastTransitionTime`. Both have whole-second resolution, so this steps in seconds.
pub fn server_side(obj: &DynamicObject) -> Option<Duration> {
    let created = obj.metadata.creation_timestamp.as_ref()?.0;
    let ready: Timestamp = ready_condition(obj)?["lastTransitionTime"]
        .as_str()?
        .parse()
        .ok()?;
    let ms = ready.as_millisecond() - created.as_millisecond();
    Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// A pod spec both sides can run: `image` sleeping, restricted Pod Security (the bench's
/// namespace enforces it, as it does for our worker pods), the same resources as our worker.
pub fn sleeping_pod_spec(image: &str, resources: &Value) -> Value {
    json!({
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        // sleep ignores SIGTERM; without this a deleted pod would linger for the default 30 s.
        "terminationGracePeriodSeconds": 1,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": "main",
            "image": image,
            "imagePullPolicy": "Never",
            "command": ["sleep", "infinity"],
            "resources": resources,
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]},
            },
        }],
    })
}

/// A `Sandbox` named `name` running `pod_spec`.
pub fn sandbox_object(name: &str, pod_spec: &Value) -> DynamicObject {
    DynamicObject::new(name, &sandbox()).data(json!({"spec": {"podTemplate": {"spec": pod_spec}}}))
}

/// A `SandboxTemplate` named `name` running `pod_spec`.
pub fn template_object(name: &str, pod_spec: &Value) -> DynamicObject {
    DynamicObject::new(name, &template()).data(json!({"spec": {"podTemplate": {"spec": pod_spec}}}))
}

/// A `SandboxWarmPool` of `replicas` from the template `template`.
pub fn warm_pool_object(name: &str, template: &str, replicas: u32) -> DynamicObject {
    DynamicObject::new(name, &warm_pool()).data(json!({
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}}
    }))
}

/// A `SandboxClaim` on the warm pool `pool`.
pub fn claim_object(name: &str, pool: &str) -> DynamicObject {
    DynamicObject::new(name, &claim()).data(json!({"spec": {"warmPoolRef": {"name": pool}}}))
}

/// Creates `obj` in `ns`.
pub async fn create(
    client: &Client,
    ns: &str,
    ar: &ApiResource,
    obj: &DynamicObject,
) -> Result<DynamicObject> {
    Ok(
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar)
            .create(&PostParams::default(), obj)
            .await?,
    )
}

/// Deletes `name` (absent is fine), without waiting.
pub async fn delete(client: &Client, ns: &str, ar: &ApiResource, name: &str) -> Result<()> {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether the peer's CRDs are served by the API server.
pub async fn installed(client: &Client) -> Result<bool> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in [
        "sandboxes.agents.x-k8s.io",
        "sandboxclaims.extensions.agents.x-k8s.io",
        "sandboxtemplates.extensions.agents.x-k8s.io",
        "sandboxwarmpools.extensions.agents.x-k8s.io",
    ] {
        if crds.get_opt(name).await?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Waits until every pod of `ns` is Ready and none is terminating: one sample's teardown, and a
/// warm pool's refill after the last claim, are over before the next sample starts. (A pool's
/// replacement pod exists by then: the teardown of the claimed pod takes longer than its
/// controller takes to notice the claim.)
pub async fn pods_settled(client: &Client, ns: &str, timeout: Duration) -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait::until(
        &format!("every pod in {ns} Ready, none terminating"),
        timeout,
        || async {
            let busy: Vec<String> = pods
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter_map(|p| {
                    let ready = p
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        });
                    if p.metadata.deletion_timestamp.is_some() {
                        Some(format!("{} terminating", p.name_any()))
                    } else if !ready {
                        Some(format!("{} not Ready", p.name_any()))
                    } else {
                        None
                    }
                })
                .collect();
            Ok(if busy.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(busy.join(", "))
            })
        },
    )
    .await
}

/// What a [`ReadyWatch`] saw of one object: when it was first seen Ready, and the object then.
#[derive(Clone)]
pub struct Seen {
    pub at: Instant,
    pub object: DynamicObject,
}

type SeenMap = HashMap<(String, String), Seen>;

/// One watch per kind on a namespace, started before anything is created in it, each noting the
/// first time an object is seen Ready (the time the event arrived here). Client-side watch times,
/// not the API's second-resolution transition times; the same for every kind, so the two sides
/// are timed alike. The watches end when this is dropped.
pub struct ReadyWatch {
    client: Client,
    ns: String,
    seen: Arc<Mutex<SeenMap>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ReadyWatch {
    /// Starts a watch of each kind in `ns` and returns once every watch has listed the namespace
    /// (so an object created afterwards cannot be missed).
    pub async fn start(client: &Client, ns: &str, kinds: &[ApiResource]) -> Result<Self> {
        let seen: Arc<Mutex<SeenMap>> = Arc::default();
        let listed = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for ar in kinds {
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar);
            let (seen, listed, plural) = (seen.clone(), listed.clone(), ar.plural.clone());
            tasks.push(tokio::spawn(async move {
                let mut events = watcher::watcher(api, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                let mut counted = false;
                while let Some(event) = events.next().await {
                    let at = Instant::now();
                    match event {
                        Ok(Event::InitDone) if !counted => {
                            counted = true;
                            listed.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(Event::Apply(obj) | Event::InitApply(obj)) if is_ready(&obj) => {
                            let name = obj.metadata.name.clone().unwrap_or_default();
                            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                            seen.entry((plural.clone(), name))
                                .or_insert(Seen { at, object: obj });
                        }
                        Ok(_) => {}
                        Err(e) => eprintln!("warning: watch of {plural}: {e}"),
                    }
                }
            }));
        }
        let watch = ReadyWatch {
            client: client.clone(),
            ns: ns.to_string(),
            seen,
            tasks,
        };
        let n = kinds.len();
        wait::until(
            &format!("{n} watches in {ns} to list the namespace"),
            Duration::from_secs(30),
            || async {
                let done = listed.load(Ordering::SeqCst);
                Ok(if done == n {
                    Check::Done(())
                } else {
                    Check::Pending(format!("{done} of {n} listed"))
                })
            },
        )
        .await?;
        Ok(watch)
    }

    /// What was seen of `name` of kind `ar`, if it has been seen Ready.
    pub fn get(&self, ar: &ApiResource, name: &str) -> Option<Seen> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(&(ar.plural.clone(), name.to_string())).cloned()
    }

    /// Waits (bounded) until `name` of kind `ar` has been seen Ready. The time returned is when
    /// the watch event arrived, not when this noticed it. A timeout quotes the object's
    /// conditions as the API server has them then.
    pub async fn wait(&self, ar: &ApiResource, name: &str, timeout: Duration) -> Result<Seen> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.get(ar, name) {
                return Ok(s);
            }
            if Instant::now() >= deadline {
                let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), &self.ns, ar);
                let last = match api.get_opt(name).await {
                    Ok(Some(o)) => describe(&o),
                    Ok(None) => "not found".into(),
                    Err(e) => format!("reading it: {e}"),
                };
                return Err(E2eError::Timeout {
                    what: format!("{} {name} Ready", ar.kind),
                    secs: timeout.as_secs(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// An object's phase and conditions in one line, for failure messages.
pub fn describe(obj: &DynamicObject) -> String {
    let status = &obj.data["status"];
    let mut out = match status["phase"].as_str() {
        Some(p) => format!("phase {p}"),
        None => String::new(),
    };
    for c in status["conditions"].as_array().into_iter().flatten() {
        let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        out.push_str(&format!(
            "; {}={} {}: {}",
            field("type"),
            field("status"),
            field("reason"),
            field("message")
        ));
    }
    if out.is_empty() {
        "no status".into()
    } else {
        out.trim_start_matches("; ").to_string()
    }
}

impl Drop for ReadyWatch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_status(created: &str, conditions: Value) -> DynamicObject {
        let mut o =
            DynamicObject::new("x", &sandbox()).data(json!({"status": {"conditions": conditions}}));
        o.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            created.parse().unwrap(),
        ));
        o
    }

    #[test]
    fn ready_only_when_the_ready_condition_is_true() {
        let t = "2026-12-02T03:00:00Z";
        let c = |ty: &str, st: &str| json!([{"type": ty, "status": st, "lastTransitionTime": t}]);
        assert!(is_ready(&with_status(t, c("Ready", "True"))));
        assert!(!is_ready(&with_status(t, c("Ready", "False"))));
        assert!(!is_ready(&with_status(t, c("PodScheduled", "True"))));
        assert!(!is_ready(&with_status(t, json!(null))));
        assert!(!is_ready(&DynamicObject::new("x", &claim())));
    }

    #[test]
    fn server_side_is_creation_to_the_ready_transition() {
        let cond = |t: &str| json!([{"type": "Ready", "status": "True", "lastTransitionTime": t}]);
        let o = with_status("2026-12-02T03:00:00Z", cond("2026-12-02T03:00:02Z"));
        assert_eq!(server_side(&o), Some(Duration::from_secs(2)));
        // A transition stamped before the creation (clock steps) is zero, not a panic.
        let o = with_status("2026-12-02T03:00:02Z", cond("2026-12-02T03:00:01Z"));
        assert_eq!(server_side(&o), Some(Duration::ZERO));
        // No parseable transition time: no figure.
        let o = with_status("2026-12-02T03:00:02Z", cond("yesterday"));
        assert_eq!(server_side(&o), None);
    }
}
