//! Polls the worker API for the usage counters and last activity shown in the session status.

use kube_harness_crds::session::Usage;
use kube_harness_protocol::WorkerClient;
use std::time::Duration;

/// How long the reconcile waits for the worker's answer.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(3);

/// What the worker reported.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerReport {
    pub usage: Usage,
    pub tier: u8,
    pub busy: bool,
    pub last_activity: String,
    /// The worker's own readiness (what its `/readyz` says).
    pub ready: bool,
    /// An adopted worker's adoption digest.
    pub settings: Option<String>,
}

/// Asks the worker at `ip:port` for its status; `None` when it does not answer within
/// [`POLL_TIMEOUT`] or answers with an error (the status keeps its previous figures; the worker's
/// readiness is the kubelet's business). A failed poll never fails the reconcile.
///
/// Bounded and kept on the reconcile rather than moved to a task of its own: the idle-hibernation
/// decision needs the worker's current `busy` and last activity, and a second writer of the same
/// status fields would race the reconcile's resourceVersion-conditioned apply. The bound makes
/// the cost of a hung worker one short wait for that session alone (reconciles of different
/// sessions run concurrently), every [`super::status::READY_REQUEUE`] at most.
pub async fn poll(ip: &str, port: u16, token: &str) -> Option<WorkerReport> {
    let client = WorkerClient::new(format!("http://{ip}:{port}"), token).ok()?;
    let status = tokio::time::timeout(POLL_TIMEOUT, client.status())
        .await
        .ok()?
        .map_err(|e| tracing::debug!(error = %e, ip, "worker status poll failed"))
        .ok()?;
    let total = status.commands.tier0 + status.commands.tier1;
    Some(WorkerReport {
        usage: Usage {
            turns: status.turns,
            commands_tier0: status.commands.tier0,
            commands_tier1: status.commands.tier1,
            refusals: status.refusals,
            tier0_share: (total > 0).then(|| {
                format!(
                    "{:.1}%",
                    status.commands.tier0 as f64 * 100.0 / total as f64
                )
            }),
        },
        tier: status.tier,
        busy: status.busy,
        last_activity: status.last_activity,
        ready: status.ready,
        settings: status.settings,
    })
}
