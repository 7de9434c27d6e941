//! The label sets of the operator's metrics (docs/operator.md "Metrics" lists their values).

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpenLabels {
    /// prepared, ordinary, or reused (a pod the session kept from an earlier turn).
    pub source: &'static str,
    /// stock_empty, workspace_too_large, slot_unavailable, unreported, or none.
    pub miss_reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StartLabels {
    /// `warm` (adopted a warm pod) or `cold`.
    pub source: &'static str,
    /// Why a tier with a warm pool started cold; `none` otherwise.
    pub miss_reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// Session starts: `warm` or `cold`; escalations: `prepared` or `ordinary`.
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodsLabels {
    pub tier: String,
    /// `idle` (an unclaimed warm-pool pod, ready or starting), `serving` (a turn's pod) or
    /// `kept` (a session's pod kept between its turns).
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SweptLabels {
    /// `pod`, `secret` or `record` (a turn's HarnessTurn).
    pub kind: &'static str,
    /// Why: session_gone, ended, failed_to_start, never_ready, worker_replaced, idle_timeout,
    /// turn_timeout, lost_race, unrecorded, no_pod.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabel {
    pub tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}
