//! The classifier's vocabulary as it goes over the wire: the reasons of `harness.tier.escalated`
//! and `harness.tier.refused`, the emulation gap, and the `classification` an explained exec
//! returns. `kube-harness-classify` owns the behaviour and its own types; these are their JSON
//! shapes, field for field (the runtime converts with an exhaustive match, so a reason the
//! classifier adds does not compile until it is here too).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the tiered runtime does with a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Every command runs on Tier-0 (or there is nothing to run).
    Tier0,
    /// At least one command needs a higher tier (or cannot be judged): switch before running.
    Escalate,
    /// A policy-denied command is present: refused on every tier with exit 126.
    Refuse,
}

/// Why a command needs a real execution tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RealExecReason {
    VersionControl,
    Containers,
    BuildToolchain,
    PackageManager,
    NetworkClient,
}

/// A runtime toggle that gates a Tier-0 command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Toggle {
    Network,
    Python,
    Javascript,
}

/// One finding about the script. `kind` is the JSON tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Reason {
    /// Commands Tier-0 runs itself, in order of first appearance (always the last reason).
    Tier0Supported { commands: Vec<String> },
    /// Nothing to run: empty or comment-only.
    EmptyScript,
    /// A literal command name that neither Tier-0 nor the needs-real-exec table knows.
    UnknownCommand { command: String },
    /// A command that needs a real toolchain tier.
    NeedsRealExec {
        command: String,
        reason: RealExecReason,
    },
    /// A Tier-0 command whose runtime toggle is off; a tier with the capability runs it.
    CapabilityDisabled { command: String, toggle: Toggle },
    /// Denied by policy: refused on every tier.
    PolicyBlocked { command: String, rule: String },
    /// The command name (or a `-c`/`eval` script) is only known at run time.
    DynamicCommand { command: String, detail: String },
    /// A script file whose contents classification cannot see (`./x.sh`, `source f`, `bash f`).
    OpaqueScript { command: String },
    /// tree-sitter-bash could not parse the script (or it exceeded the parse budget).
    ParseFailed { detail: String },
    /// The classifier could not judge the script (size cap, nesting depth, unknown syntax,
    /// matrix).
    ClassifierUnavailable { detail: String },
}

/// The classifier's answer for one script (an explained exec's `classification`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Classification {
    pub decision: Decision,
    pub reasons: Vec<Reason>,
    pub matrix_version: String,
}

/// What kind of emulation gap stderr shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GapSignal {
    CommandNotFound,
    UnsupportedOption,
}

/// Always `"emulation-gap"` (the seed's `kind` of a gap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GapKind {
    EmulationGap,
}

/// An emulation gap found in a finished Tier-0 run: a command or an option Tier-0 lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmulationGap {
    pub kind: GapKind,
    pub signal: GapSignal,
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option: Option<String>,
}
