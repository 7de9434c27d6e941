//! `--escalation none`: a session without a Tier-1 tier. Escalating commands are refused with
//! exit 126 and a stderr line that names what is missing, instead of a generic runtime message.

use async_trait::async_trait;
use kube_harness_runtime::{CommandExecutor, NextTier, TierError};
use kube_harness_workspace::WorkspaceSpec;
use std::sync::Arc;

pub struct NoTier1;

#[async_trait]
impl NextTier for NoTier1 {
    async fn provision(&self, _: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, TierError> {
        Err(TierError::Unavailable("this command needs a Tier-1 tier, and none is configured for this session (escalation: none)".into()))
    }
}
