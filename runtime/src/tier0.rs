//! Tier-0 as a runtime executor: the sandbox runs the command; this only translates.

use super::executor::{CommandExecutor, DisposeReport, ExecRequest, ExecResult, TierError};
use async_trait::async_trait;
use kube_harness_sandbox::{Invocation, SandboxConfig, SandboxError, Tier0Sandbox};

pub struct Tier0Executor {
    sandbox: Tier0Sandbox,
}

impl Tier0Executor {
    /// Builds the sandbox once (tool directory, landlock and seccomp programs) for many commands.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        Ok(Tier0Executor {
            sandbox: Tier0Sandbox::new(config)?,
        })
    }
}

#[async_trait]
impl CommandExecutor for Tier0Executor {
    fn tier(&self) -> u8 {
        0
    }

    async fn execute(&self, req: ExecRequest) -> ExecResult {
        self.sandbox
            .run(&Invocation {
                script: req.script,
                cwd: req.cwd,
                env: req.env,
                output: req.output,
            })
            .await
    }

    /// The sandbox is per session, not per turn: nothing to release at the end of a turn.
    async fn dispose(&self) -> Result<DisposeReport, TierError> {
        Ok(DisposeReport::default())
    }
}
