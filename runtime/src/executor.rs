//! The one thing a tier implements: run a (wrapped) script and report what happened, never
//! failing; and release itself at the end of the turn.

use async_trait::async_trait;
use kube_harness_protocol::trace::{HigherTierUsage, SandboxOrigin};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A command as an executor receives it: the runtime has already wrapped the agent's script so that
/// it restores cwd and reports the exported environment on file descriptor 3.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub script: String,
    /// Harness path to start in.
    pub cwd: PathBuf,
    /// The exported variables carried from earlier commands; the executor adds its own tier-owned
    /// ones (PATH, HOME, …).
    pub env: BTreeMap<String, String>,
    /// This command's time limit, when the caller set one; otherwise the executor's default.
    /// (A [`Tier0Executor`](crate::Tier0Executor) keeps the limit its sandbox was built with;
    /// the worker's `TimedTier0` picks a sandbox per limit.)
    pub timeout: Option<Duration>,
    /// Where the output also goes while the command runs (Tier-0 streams it; the higher tiers
    /// deliver it with the result). Dropping its receiver cancels a Tier-0 command.
    pub output: Option<kube_harness_sandbox::OutputTap>,
}

/// What an executor reports: the sandbox's [`Outcome`](kube_harness_sandbox::Outcome), the one
/// raw result type of every tier. Faults are results too (exit 126 and a `kube-harness:` stderr
/// line, see [`fault`]).
pub use kube_harness_sandbox::Outcome as ExecResult;

/// A refusal or infrastructure fault in the seed's shape: exit 126, one stderr line.
pub fn fault(reason: &str) -> ExecResult {
    ExecResult::fault(reason, Duration::ZERO)
}

/// Why a tier could not be provisioned or released. Its message is what the agent reads (exit
/// 126) or what `harness.runtime.dispose.failed` carries.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// This host has no such tier (a worker with no Tier-1 tier configured): the message says
    /// which and what to configure.
    #[error("{0}")]
    Unavailable(String),
    /// The tier's own failure (its pod, its API, the workspace handoff or merge).
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// What a tier reports when it is released.
#[derive(Debug, Clone, Default)]
pub struct DisposeReport {
    /// Changes merged back into the session's tracked mounts (higher tiers only).
    pub file_changes: Vec<kube_harness_workspace::FileChange>,
    /// The tier's own usage figures, when it measures any.
    pub usage: Option<HigherTierUsage>,
    /// Partial failures (a merge that applied some changes and rejected others): each becomes a
    /// `harness.runtime.dispose.failed` event after the file events of what was applied.
    pub problems: Vec<String>,
}

/// A place commands run: the Tier-0 sandbox, a local Tier-1 shell, a Tier-1 pod.
#[async_trait]
pub trait CommandExecutor: Send + Sync {
    /// 0 for Tier-0, 1 and up for higher tiers.
    fn tier(&self) -> u8;
    /// Runs one command. Must not panic or hang past `req.timeout` (plus cleanup).
    async fn execute(&self, req: ExecRequest) -> ExecResult;
    /// What the tier reports about itself when it opens, before its first command runs (a pod:
    /// where it came from); it goes into the `harness.tier.escalated` record.
    fn opened(&self) -> Option<SandboxOrigin> {
        None
    }
    /// Releases the tier at the end of the turn; an error becomes `harness.runtime.dispose.failed`.
    async fn dispose(&self) -> Result<DisposeReport, TierError>;
}

/// Provisions the next tier lazily, on a turn's first escalation.
#[async_trait]
pub trait NextTier: Send + Sync {
    /// Hands the workspace over and returns the ready tier, or why it could not be provisioned.
    async fn provision(
        &self,
        workspace: &kube_harness_workspace::WorkspaceSpec,
    ) -> Result<std::sync::Arc<dyn CommandExecutor>, TierError>;
}
