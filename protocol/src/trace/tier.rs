//! The tier events: `harness.tier.escalated`, `harness.tier.refused` and `harness.turn.usage`,
//! and what they carry about the higher tier.

use super::classification::{EmulationGap, Reason};
use crate::tier1::Source;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Why a turn escalated to a higher tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EscalationSignal {
    /// The classifier said the script needs more than Tier-0.
    Classification,
    /// The script ran on Tier-0 and hit a missing program or feature.
    EmulationGap,
}

/// `harness.tier.escalated`, and one entry of the turn usage's `escalations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierEscalated {
    pub signal: EscalationSignal,
    /// The classifier's reasons (`classification`) or the emulation gap (`emulation-gap`).
    pub detail: EscalationDetail,
    #[schemars(range(min = 1))]
    pub to_tier: u8,
    pub provision_ms: u64,
    /// The sandbox that serves the rest of the turn (Tier-1 pods): where it came from, reported
    /// before its first command runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxOrigin>,
    /// Fields another writer added: the event is open to them (forward compatibility, not a
    /// shape this crate writes); kept, written last.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What an escalation acted on: the classifier's reasons, or the gap a Tier-0 run showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EscalationDetail {
    Reasons(Vec<Reason>),
    Gap(EmulationGap),
}

/// Where a higher tier's sandbox came from, as the tier reports it when it opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxOrigin {
    /// `prepared` (the tier's warm pool) or `ordinary`; null when the tier did not say.
    #[schemars(with = "Option<SourceSchema>")]
    pub source: Option<Source>,
    /// Why an ordinary pod serves a pooled tier (`stock_empty`, `workspace_too_large`,
    /// `slot_unavailable`, `unreported`), as the tier API reports it.
    pub miss_reason: Option<String>,
    pub pod: Option<String>,
    /// The pod was kept from an earlier turn of the session (the tier's idleTimeoutSeconds);
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
}

/// The schema of [`Source`] (defined with the tier API, whose `unknown` reads any other value).
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "SandboxSource")]
#[allow(dead_code)]
enum SourceSchema {
    Prepared,
    Ordinary,
    Unknown,
}

/// `harness.tier.refused`: a command not run (exit code 126). A policy refusal carries the
/// classifier's `reasons`; a failed retry after an emulation gap carries `signal` and `gap`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierRefused {
    pub command: String,
    pub tier: u8,
    #[schemars(length(min = 1))]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<Reason>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<EscalationSignal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<EmulationGap>,
    /// The caller's step key (see `command.started`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub step_key: Option<String>,
    /// Fields another writer added: the event is open to them (forward compatibility, not a
    /// shape this crate writes); kept, written last.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `harness.turn.usage`: closes the turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnUsage {
    pub stayed_on_tier0: bool,
    pub tier0: TierFigures,
    /// The higher tier's usage as it reports it, `null` when the turn stayed on Tier-0.
    pub higher_tier: Option<HigherTierUsage>,
    pub escalations: Vec<TierEscalated>,
    pub refusals: u64,
}

/// Commands run on a tier and their summed duration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TierFigures {
    pub commands: u64,
    pub duration_ms: u64,
}

/// A higher tier's usage of one turn, by `provider`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "provider", rename_all = "kebab-case")]
pub enum HigherTierUsage {
    /// A Tier-1 pod of the cluster.
    Pod(PodUsage),
    /// The local host's Tier-1 (`kube-harness local`).
    LocalHost(LocalUsage),
    /// A tier that reports no usage of its own, measured from its command durations.
    Unknown(TierFigures),
}

/// A Tier-1 pod's usage of one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodUsage {
    pub pod: String,
    /// As in the escalation's `sandbox`.
    #[schemars(with = "Option<SourceSchema>")]
    pub source: Option<Source>,
    pub miss_reason: Option<String>,
    /// From the sandbox's opening to its release.
    pub pod_ms: u64,
    /// Pod start and workspace handoff.
    pub provision_ms: u64,
    pub commands: u64,
    pub duration_ms: u64,
    pub bytes_handed_over: u64,
    pub bytes_returned: u64,
}

/// The local host's Tier-1 usage of one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalUsage {
    pub commands: u64,
    pub duration_ms: u64,
    pub provision_ms: u64,
    pub bytes_handed_over: u64,
    pub bytes_returned: u64,
}
