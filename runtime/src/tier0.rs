//! Tier-0 as a runtime executor: the sandbox runs the command; this only translates.

use super::executor::{CommandExecutor, DisposeReport, ExecRequest, ExecResult};
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
        let outcome = self
            .sandbox
            .run(&Invocation {
                script: req.script,
                cwd: req.cwd,
                env: req.env,
            })
            .await;
        ExecResult {
            stdout: outcome.stdout,
            stderr: outcome.stderr,
            exit_code: outcome.exit_code,
            timed_out: outcome.timed_out,
            truncated: outcome.stdout_truncated || outcome.stderr_truncated,
            duration: outcome.duration,
            state: outcome.state,
        }
    }

    /// The sandbox is per session, not per turn: nothing to release at the end of a turn.
    async fn dispose(&self) -> Result<DisposeReport, String> {
        Ok(DisposeReport::default())
    }
}
