//! Where a session's created → Ready goes: one session started while two watches (its pods, and
//! the session) note when each milestone is first seen, timed from the create call's return.
//! Client-side watch times, not the API's second-resolution transition times.

use crate::harness;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use kube_harness_crds::condition::{is_true, types};
use kube_harness_crds::HarnessSession;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The milestones, in the order they happen.
pub const MILESTONES: [&str; 6] = [
    "pod created",
    "pod scheduled",
    "pod has IP",
    "container running",
    "pod Ready",
    "session Ready",
];

/// Creates `examples/demo.yaml` as `name` in `ns` and returns when each milestone was first seen.
pub async fn trace(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> BTreeMap<&'static str, Duration> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let sessions: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
    let pod_cfg = watcher::Config::default().fields(&format!("metadata.name={name}-worker"));
    let hs_cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let pod_events = watcher::watcher(pods, pod_cfg).map_ok(|e| Seen::Pod(Box::new(e)));
    let hs_events = watcher::watcher(sessions, hs_cfg).map_ok(|e| Seen::Session(Box::new(e)));
    let mut events = futures::stream::select(pod_events.boxed(), hs_events.boxed());
    // Let both watches start before the create, so nothing is missed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    harness::apply_example(client, ns, "demo.yaml", name)
        .await
        .unwrap();
    let start = Instant::now();
    let mut seen: BTreeMap<&'static str, Duration> = BTreeMap::new();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    while !seen.contains_key("session Ready") {
        let event = tokio::select! {
            e = events.next() => e,
            () = &mut deadline => panic!("session {name} not Ready in {timeout:?}; seen {seen:?}"),
        };
        let Some(Ok(event)) = event else { continue };
        let at = start.elapsed();
        let mut note = |m: &'static str| {
            seen.entry(m).or_insert(at);
        };
        match event {
            Seen::Pod(e) => {
                let (Event::Apply(pod) | Event::InitApply(pod)) = *e else {
                    continue;
                };
                note("pod created");
                let status = pod.status.unwrap_or_default();
                let cond = |t: &str| {
                    status
                        .conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == t && c.status == "True")
                };
                if cond("PodScheduled") {
                    note("pod scheduled");
                }
                if status.pod_ip.is_some() {
                    note("pod has IP");
                }
                let running = status
                    .container_statuses
                    .iter()
                    .flatten()
                    .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
                if running {
                    note("container running");
                }
                if cond("Ready") {
                    note("pod Ready");
                }
            }
            Seen::Session(e) => {
                let (Event::Apply(hs) | Event::InitApply(hs)) = *e else {
                    continue;
                };
                let status = hs.status.unwrap_or_default();
                if is_true(&status.conditions, types::READY) {
                    note("session Ready");
                }
            }
        }
    }
    seen
}

enum Seen {
    Pod(Box<Event<Pod>>),
    Session(Box<Event<HarnessSession>>),
}

/// Creates `session` in `ns` and returns how long after the create call returned a watch saw it
/// Ready (the watch starts before the create, so nothing is missed).
pub async fn time_to_ready(
    client: &Client,
    ns: &str,
    session: &HarnessSession,
    timeout: Duration,
) -> Duration {
    let name = kube::ResourceExt::name_any(session);
    let sessions: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(sessions.clone(), cfg).boxed();
    // The first event (the empty initial list) says the watch is established.
    let _ = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
    sessions.create(&Default::default(), session).await.unwrap();
    let start = Instant::now();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            () = &mut deadline => panic!("session {name} not Ready in {timeout:?}"),
        };
        if let Some(Ok(Event::Apply(hs) | Event::InitApply(hs))) = event {
            if is_true(&hs.status.unwrap_or_default().conditions, types::READY) {
                return start.elapsed();
            }
        }
    }
}
