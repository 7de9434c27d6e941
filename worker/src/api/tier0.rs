//! Tier-0 with a per-command time limit, read from each request. The sandbox fixes its limits
//! when it is built (the supervisor enforces them between fork and exec), so each distinct
//! `timeoutMs` gets its own sandbox, built on first use and kept in a small cache; the default one
//! is built at start-up, which is also the readiness check. A pooled worker builds that default
//! sandbox while it waits in its warm pool ([`Prepared`]), so that an adoption does not pay for it.

use super::relock;
use async_trait::async_trait;
use kube_harness_runtime::{
    CommandExecutor, DisposeReport, ExecRequest, ExecResult, Tier0Executor, TierError,
};
use kube_harness_sandbox::{denied_tools, Limits, Presentation, SandboxConfig, SandboxError};
use kube_harness_workspace::WorkspaceSpec;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Sandboxes kept for non-default timeouts (beyond it the least recently used is dropped; a
/// command still running on it keeps it alive through its `Arc`).
const CACHED: usize = 8;

pub struct TimedTier0 {
    spec: WorkspaceSpec,
    presentation: Presentation,
    limits: Limits,
    /// The deny policy's command names, left out of every sandbox's tool set.
    denied: Vec<String>,
    default: Arc<Tier0Executor>,
    others: Mutex<Vec<(Duration, Arc<Tier0Executor>)>>,
}

impl TimedTier0 {
    /// Builds the default sandbox, or takes `prepared` if it was built for exactly these
    /// settings (a different one is dropped, its runtime directory and forker with it): an
    /// error here means the host cannot run Tier-0 at all.
    pub fn new(
        spec: WorkspaceSpec,
        presentation: Presentation,
        limits: Limits,
        denied: Vec<String>,
        prepared: Option<Prepared>,
    ) -> Result<Self, SandboxError> {
        let config = SandboxConfig {
            workspace: spec.clone(),
            limits: limits.clone(),
            presentation,
            denied: denied.clone(),
        };
        let default = match prepared {
            Some(p) if p.fits(&config) => p.executor,
            _ => Arc::new(Tier0Executor::new(config)?),
        };
        Ok(TimedTier0 {
            spec,
            presentation,
            limits,
            denied,
            default,
            others: Mutex::new(Vec::new()),
        })
    }

    /// The default time limit.
    pub fn default_timeout(&self) -> Duration {
        self.limits.timeout
    }

    fn executor_for(&self, timeout: Duration) -> Result<Arc<Tier0Executor>, SandboxError> {
        if timeout == self.limits.timeout {
            return Ok(self.default.clone());
        }
        let mut others = relock(&self.others);
        if let Some(i) = others.iter().position(|(t, _)| *t == timeout) {
            let hit = others.remove(i);
            let executor = hit.1.clone();
            others.push(hit);
            return Ok(executor);
        }
        // Built under the lock: concurrent builds of the same limit would waste a tool directory.
        let executor = Arc::new(Tier0Executor::new(SandboxConfig {
            workspace: self.spec.clone(),
            limits: Limits {
                timeout,
                ..self.limits.clone()
            },
            presentation: self.presentation,
            denied: self.denied.clone(),
        })?);
        if others.len() >= CACHED {
            others.remove(0);
        }
        others.push((timeout, executor.clone()));
        Ok(executor)
    }
}

/// A default sandbox built before its session is known: a pooled worker's, while it waits to be
/// adopted (building one is the tool directory, the namespace plan and the forker: about 50 ms,
/// docs/performance.md "Warm start"). It has run nothing, and serves the session only if the
/// session asks for exactly the sandbox it was built for.
pub struct Prepared {
    config: SandboxConfig,
    executor: Arc<Tier0Executor>,
}

impl Prepared {
    pub fn build(config: SandboxConfig) -> Result<Self, SandboxError> {
        let executor = Arc::new(Tier0Executor::new(config.clone())?);
        Ok(Prepared { config, executor })
    }

    /// Whether a worker that wants `config` can take this sandbox: it would build the same one
    /// (deny lists count by the tools they take out).
    fn fits(&self, config: &SandboxConfig) -> bool {
        let (a, b) = (&self.config, config);
        a.workspace == b.workspace
            && a.limits == b.limits
            && a.presentation == b.presentation
            && denied_tools(&a.denied) == denied_tools(&b.denied)
    }
}

#[async_trait]
impl CommandExecutor for TimedTier0 {
    fn tier(&self) -> u8 {
        0
    }

    async fn execute(&self, req: ExecRequest) -> ExecResult {
        let timeout = req.timeout.unwrap_or(self.limits.timeout);
        match self.executor_for(timeout) {
            Ok(executor) => executor.execute(req).await,
            Err(e) => {
                kube_harness_runtime::fault(&format!("preparing the sandbox for {timeout:?}: {e}"))
            }
        }
    }

    async fn dispose(&self) -> Result<DisposeReport, TierError> {
        Ok(DisposeReport::default())
    }
}
