//! The wire model of docs/tier1.md: the agent API (served by `kube-harness worker --tier 1`,
//! called by the worker) and the operator's tier API (called by the worker). One definition for
//! both ends of the agent API so they cannot drift apart. Field names are camelCase on the wire.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /v1/exec` on the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentExec {
    /// The runtime's wrapped script (it reports cwd and exports on fd 3).
    pub script: String,
    /// Harness path to start in.
    pub cwd: String,
    /// The variables the session exported (tier-owned ones such as PATH and HOME are ignored).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit; the agent's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The agent's answer to `POST /v1/exec`. Output is base64: a command's bytes need not be UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentExecResult {
    pub stdout_b64: String,
    pub stderr_b64: String,
    /// What the script wrote to fd 3 (the runtime's state report).
    pub state_b64: String,
    pub exit_code: i32,
    pub timed_out: bool,
    /// Either stream was cut at its cap.
    pub truncated: bool,
    #[serde(default)]
    pub stdout_truncated: bool,
    #[serde(default)]
    pub stderr_truncated: bool,
    pub duration_ms: u64,
}

/// The agent's answer to `PUT /v1/workspace`: what the archive held, for the worker to compare
/// with what it packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindReport {
    pub files: u64,
    pub bytes: u64,
}

/// `POST …/sandboxes` on the operator's tier API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenSandbox {
    pub turn: String,
    pub workspace_bytes: u64,
}

/// Where a Tier-1 sandbox's state is: `Pending` (starting or binding), `Ready` (with an endpoint
/// and a token), `Failed` (with a reason and message). A phase this build does not know reads
/// as `Unknown` and is waited on like `Pending`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    #[default]
    Pending,
    Ready,
    Failed,
    #[serde(other)]
    Unknown,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
        }
    }
}

/// Whether a sandbox came from the tier's warm pool (`prepared`) or was made for the turn
/// (`ordinary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Prepared,
    Ordinary,
    #[serde(other)]
    Unknown,
}

impl Source {
    /// Also the metric label of the operator's `tier1_opened`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Prepared => "prepared",
            Source::Ordinary => "ordinary",
            Source::Unknown => "unknown",
        }
    }
}

/// A Sandbox as the operator's tier API reports it (docs/tier1.md): one definition for the
/// operator that writes it and the worker that reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    #[serde(default)]
    pub turn: String,
    #[serde(default)]
    pub pod: Option<String>,
    pub phase: Phase,
    #[serde(default)]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub source: Option<Source>,
    #[serde(default)]
    pub miss_reason: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    /// The pod served an earlier turn of the same session and was kept for this one (the
    /// tier's idleTimeoutSeconds): its agent holds that turn's workspace, so the worker binds
    /// this turn's with `PUT /v1/workspace?replace=true`. Absent (false) for a fresh pod.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
}

impl Sandbox {
    /// The pod's name, empty before there is one.
    pub fn pod_name(&self) -> &str {
        self.pod.as_deref().unwrap_or_default()
    }

    /// `prepared`, `ordinary`, or `unknown` when the operator did not say.
    pub fn source_label(&self) -> &'static str {
        self.source.map_or("unknown", Source::as_str)
    }
}
