//! The operator's main loop: serve probes and metrics, check the CRDs are installed, wait for the
//! Lease, then run the controllers until SIGTERM or the Lease is lost.

use crate::config::OperatorConfig;
use crate::context::Context;
use crate::labels::MANAGED_BY;
use crate::{cache, leader, server, session, tier, tier1, turn};
use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Config as ControllerConfig;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::ResourceExt;
use kube::{Api, Client};
use kube_harness_crds::{HarnessSession, HarnessTurn, SandboxTier};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// Session reconciles run at once. Unbounded, 2,000 new sessions started thousands of reconciles
/// whose requests the API server answered with 429 and timeouts (docs/performance.md, "Scale").
pub const SESSION_RECONCILES: u16 = 32;

pub async fn run(config: OperatorConfig) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("no Kubernetes client configuration (in-cluster or KUBECONFIG)")?;
    let mut ctx = Context::new(client.clone(), config.clone());
    // Before any controller or the tier API: every warm and Tier-1 pod is proven with it.
    ctx.origin = crate::origin::load(&client, &config.namespace)
        .await
        .with_context(|| {
            format!(
                "reading (or making) the pod origin key Secret {}/{}",
                config.namespace,
                crate::origin::KEY_SECRET
            )
        })?;
    let ctx = Arc::new(ctx);
    let ready = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let http = tokio::spawn(server::serve(
        config.listen,
        ctx.clone(),
        ready.clone(),
        stopped(stop_rx.clone()),
    ));
    // The tier API answers on every replica, leader or not: its state is all in the API server.
    let tier_listener = tokio::net::TcpListener::bind(config.tier_api_listen)
        .await
        .with_context(|| format!("binding the tier API to {}", config.tier_api_listen))?;
    let tier_api = tokio::spawn(tier1::api::serve(
        tier_listener,
        ctx.clone(),
        stopped(stop_rx.clone()),
    ));
    let signals = tokio::spawn({
        let stop_tx = stop_tx.clone();
        async move {
            kube_harness_service_kit::shutdown_signal().await;
            tracing::info!("shutdown requested");
            let _ = stop_tx.send(true);
        }
    });

    for (what, check) in [
        (
            "HarnessSession",
            Api::<HarnessSession>::all(client.clone())
                .list(&ListParams::default().limit(1))
                .await
                .map(|_| ()),
        ),
        (
            "SandboxTier",
            Api::<SandboxTier>::all(client.clone())
                .list(&ListParams::default().limit(1))
                .await
                .map(|_| ()),
        ),
    ] {
        check.with_context(|| format!("cannot list {what} objects: is the CRD installed (kubectl apply --server-side -f crds/) and may the operator list them?"))?;
    }
    ready.store(true, Ordering::Relaxed);

    let (mut leading, lease_task) = leader::compete(client.clone(), &config).await?;
    let mut stop_wait = stop_rx.clone();
    let stop_first = tokio::select! {
        r = leading.wait_for(|l| *l) => { r.context("leader election ended")?; false }
        _ = stop_wait.wait_for(|s| *s) => true,
    };
    if stop_first {
        drop(leading);
        let _ = lease_task.await;
        let _ = http.await;
        let _ = tier_api.await;
        return Ok(());
    }
    tracing::info!(identity = %config.identity, "leading: starting controllers");
    ctx.metrics.leader.set(1);

    // Leadership lost also stops the controllers.
    let lost = tokio::spawn({
        let stop_tx = stop_tx.clone();
        let mut leading = leading.clone();
        async move {
            if leading.wait_for(|l| !*l).await.is_ok() {
                tracing::error!("lost the Lease: stopping controllers");
                let _ = stop_tx.send(true);
            }
        }
    });

    let managed = paged().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    let writers = ctx
        .caches
        .take_writers()
        .context("the read caches were started twice")?;
    // One watch of the worker pods both fills the cache the reconcile reads and triggers it.
    let worker_pods = watcher(Api::<Pod>::all(client.clone()), managed.clone())
        .default_backoff()
        .modify(cache::slim_pod)
        .reflect(writers.pods)
        .touched_objects();
    let mut sessions = Controller::new(Api::<HarnessSession>::all(client.clone()), paged())
        .with_config(ControllerConfig::default().concurrency(SESSION_RECONCILES))
        .owns_stream(worker_pods);
    if let Some(polled) = ctx.take_poll_triggers() {
        sessions = sessions.reconcile_on(tokio_stream_of(polled));
    }
    let sessions = sessions
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(session::reconcile, session::error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "session reconcile");
            }
        });
    // The tiers the reconcile reads, and the applied children whose changes it must not miss.
    let tier_cache = watcher(Api::<SandboxTier>::all(client.clone()), paged())
        .default_backoff()
        .modify(cache::slim)
        .reflect(writers.tiers)
        .take_until(stopped(stop_rx.clone()))
        .for_each(|_| async {});
    let claims = child_watch::<PersistentVolumeClaim>(
        &ctx,
        "PersistentVolumeClaim",
        &managed,
        stopped(stop_rx.clone()),
    );
    let policies =
        child_watch::<NetworkPolicy>(&ctx, "NetworkPolicy", &managed, stopped(stop_rx.clone()));
    // Tier-1 pods (pool pods and serving ones, in the namespaces they serve) requeue their tier:
    // a pool refills as soon as a pod is claimed, becomes ready or goes away.
    let tier1_pods = paged().labels(&format!(
        "{}={}",
        crate::labels::ROLE,
        crate::labels::ROLE_TIER1
    ));
    let tiers = Controller::new(Api::<SandboxTier>::all(client.clone()), paged())
        .watches(Api::<Pod>::all(client.clone()), tier1_pods, |pod: Pod| {
            pod.labels()
                .get(crate::labels::TIER)
                .map(|t| ObjectRef::<SandboxTier>::new(t))
        })
        // Level-0 warm pods (in the namespaces their pools serve) requeue their tier, idle or just
        // claimed (a claim empties a place in the pool).
        .watches(
            Api::<Pod>::all(client.clone()),
            paged().labels(&format!(
                "{},{}={}",
                crate::labels::POOL,
                crate::labels::ROLE,
                crate::labels::ROLE_WORKER
            )),
            |pod: Pod| {
                pod.annotations()
                    .get(crate::warm::objects::POOL_TIER)
                    .map(|t| ObjectRef::<SandboxTier>::new(t))
            },
        )
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(tier::reconcile, tier::error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "tier reconcile");
            }
        });
    // Turn objects, requeued by the Tier-1 pods serving them.
    let turns = Controller::new(
        Api::<HarnessTurn>::all(client.clone()),
        paged().labels(&tier1::record::selector()),
    )
    .watches(
        Api::<Pod>::all(client.clone()),
        paged().labels(&turn::pod_selector()),
        |pod: Pod| turn::turn_of(&pod),
    )
    .graceful_shutdown_on(stopped(stop_rx.clone()))
    .run(turn::reconcile, turn::error_policy, ctx.clone())
    .for_each(|r| async move {
        if let Err(e) = r {
            tracing::debug!(error = %e, "turn reconcile");
        }
    });
    let sweep = tier1::sweep::run(ctx.clone(), stopped(stop_rx.clone()));
    futures::join!(sessions, tiers, turns, sweep, tier_cache, claims, policies);
    ctx.metrics.leader.set(0);
    let lost_lease = !*leading.borrow();
    lost.abort();
    signals.abort();
    drop(leading);
    let _ = lease_task.await;
    let _ = stop_tx.send(true);
    let _ = http.await;
    let _ = tier_api.await;
    if lost_lease {
        anyhow::bail!("lost the Lease");
    }
    Ok(())
}

pub use crate::kube_util::WATCH_PAGE_SIZE;

/// A watch configuration listing [`WATCH_PAGE_SIZE`] objects a page (kube's default: 500).
pub fn paged() -> watcher::Config {
    watcher::Config::default().page_size(WATCH_PAGE_SIZE)
}

/// Sessions sent on `rx`, as a stream.
fn tokio_stream_of<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A metadata-only watch of the operator's children of kind `K`, telling the cache which of them
/// changed or went ([`cache::Caches::observe_event`]).
fn child_watch<K>(
    ctx: &Arc<Context>,
    kind: &'static str,
    config: &watcher::Config,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let ctx = ctx.clone();
    // Metadata only: the resourceVersion is all the cache compares.
    watcher(
        Api::<PartialObjectMeta<K>>::all(ctx.client.clone()),
        config.clone(),
    )
    .default_backoff()
    .take_until(stop)
    .for_each(move |event| {
        if let Ok(event) = &event {
            ctx.caches.observe_event(kind, event);
        }
        async {}
    })
}
