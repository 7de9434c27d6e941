//! What one command produced, as every tier reports it and the worker API returns it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the agent gets back for one command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandOutcome {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
    pub tier: u8,
    pub timed_out: bool,
    pub truncated: bool,
}
