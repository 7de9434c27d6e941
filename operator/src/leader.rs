//! Leader election on a coordination.k8s.io Lease (kube-lease-manager): only the holder runs the
//! controllers, so two replicas never reconcile at once. A replica that loses the Lease stops its
//! controllers and exits; its Deployment restarts it as a standby.

use crate::config::OperatorConfig;
use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Seconds a Lease is valid without renewal; a dead leader is replaced after about this long.
pub const LEASE_SECONDS: u64 = 15;
/// Renewal margin before expiry.
pub const GRACE_SECONDS: u64 = 5;

pub type LeaseTask = JoinHandle<kube_lease_manager::Result<LeaseManager>>;

/// Starts competing for the Lease. The receiver says whether this replica leads now; dropping it
/// releases the Lease (the task then ends).
pub async fn compete(
    client: Client,
    config: &OperatorConfig,
) -> anyhow::Result<(watch::Receiver<bool>, LeaseTask)> {
    let manager = LeaseManagerBuilder::new(client, &config.lease_name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(LEASE_SECONDS)
        .with_grace(GRACE_SECONDS)
        .build()
        .await?;
    Ok(manager.watch().await)
}
