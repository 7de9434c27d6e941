//! `--escalation none`: a session without a Tier-1 tier. Escalating commands are refused with
//! exit 126 and a stderr line that names what is missing, instead of a generic runtime message.

use crate::runtime::{CommandExecutor, NextTier};
use crate::workspace::WorkspaceSpec;
use async_trait::async_trait;
use std::sync::Arc;

pub struct NoTier1;

#[async_trait]
impl NextTier for NoTier1 {
    async fn provision(&self, _: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, String> {
        Err("this command needs a Tier-1 tier, and none is configured for this session (escalation: none)".into())
    }
}
