//! The events of one command: `harness.runtime.command.started` and `.completed`, and
//! `harness.runtime.dispose.failed`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `harness.runtime.command.started`: emitted before the command runs (and, with a session
/// log, made durable first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandStarted {
    pub command: String,
    pub tier: u8,
    #[schemars(regex(pattern = "^/"))]
    pub cwd: String,
    /// The caller's step key (worker exec with runId and stepKey): replay finds a step's started
    /// and completed events by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub step_key: Option<String>,
}

/// `harness.runtime.command.completed`: the result. Output is inline (`stdout`, `stderr`,
/// cut and flagged `…Truncated` when it could not be stored) or a reference to a file under
/// `/artifacts/trace/` (`stdoutRef`, `stderrRef`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["stdout"]}, {"required": ["stdoutRef"]}]))]
pub struct CommandCompleted {
    pub command: String,
    pub tier: u8,
    #[schemars(regex(pattern = "^/"))]
    pub cwd: String,
    pub exit_code: i32,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub truncated: bool,
    /// The caller's step key (see `command.started`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub step_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_tracking_skipped: Option<TrackingSkipped>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_ref: Option<ContentRef>,
    /// The schema allows only `true`: absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    #[schemars(extend("const" = true))]
    pub stdout_truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_ref: Option<ContentRef>,
    /// The schema allows only `true`: absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    #[schemars(extend("const" = true))]
    pub stderr_truncated: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What the file tracking newly could not follow after a command (names that are not UTF-8,
/// trees too deep, special files): how many, and the first 20.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrackingSkipped {
    #[schemars(range(min = 1))]
    pub count: u64,
    #[schemars(length(max = 20))]
    pub first: Vec<String>,
}

/// Output stored under `/artifacts/trace/`; replay returns it only if it still matches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContentRef {
    #[schemars(regex(pattern = "^/artifacts/trace/"))]
    pub content_ref: String,
    pub bytes: u64,
    /// SHA-256 of the payload (lowercase hex). Replay returns the file only if it still
    /// matches; refs recorded before it was added have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
}

/// `harness.runtime.dispose.failed`: releasing a tier (or part of its merge-back) failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DisposeFailed {
    pub tier: u8,
    #[schemars(length(min = 1))]
    pub error: String,
}
