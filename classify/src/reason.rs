//! The classifier's output vocabulary. Names and JSON shapes are wire-compatible with the seed
//! (`classifyCommand` in Little Harness), so consumers in any language read the same objects.

use serde::{Deserialize, Serialize};

/// What the tiered runtime does with a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RealExecReason {
    VersionControl,
    Containers,
    BuildToolchain,
    PackageManager,
    NetworkClient,
}

impl RealExecReason {
    pub const ALL: [RealExecReason; 5] = [
        Self::VersionControl,
        Self::Containers,
        Self::BuildToolchain,
        Self::PackageManager,
        Self::NetworkClient,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::VersionControl => "version-control",
            Self::Containers => "containers",
            Self::BuildToolchain => "build-toolchain",
            Self::PackageManager => "package-manager",
            Self::NetworkClient => "network-client",
        }
    }
}

/// A runtime toggle that gates a Tier-0 command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Toggle {
    Network,
    Python,
    Javascript,
}

/// One finding about the script. `kind` is the JSON tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The classifier could not judge the script (size cap, nesting depth, unknown syntax, matrix).
    ClassifierUnavailable { detail: String },
}

impl Reason {
    /// The JSON `kind` string, for tests, metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Reason::Tier0Supported { .. } => "tier0-supported",
            Reason::EmptyScript => "empty-script",
            Reason::UnknownCommand { .. } => "unknown-command",
            Reason::NeedsRealExec { .. } => "needs-real-exec",
            Reason::CapabilityDisabled { .. } => "capability-disabled",
            Reason::PolicyBlocked { .. } => "policy-blocked",
            Reason::DynamicCommand { .. } => "dynamic-command",
            Reason::OpaqueScript { .. } => "opaque-script",
            Reason::ParseFailed { .. } => "parse-failed",
            Reason::ClassifierUnavailable { .. } => "classifier-unavailable",
        }
    }
}

/// The classifier's answer for one script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Classification {
    pub decision: Decision,
    pub reasons: Vec<Reason>,
    pub matrix_version: String,
}

impl Classification {
    /// Applies the decision rule: any policy block refuses; anything but Tier-0 support escalates.
    #[cfg(feature = "parser")]
    pub(crate) fn from_reasons(reasons: Vec<Reason>, matrix_version: &str) -> Self {
        let refuse = reasons
            .iter()
            .any(|r| matches!(r, Reason::PolicyBlocked { .. }));
        let escalate = reasons
            .iter()
            .any(|r| !matches!(r, Reason::Tier0Supported { .. } | Reason::EmptyScript));
        let decision = if refuse {
            Decision::Refuse
        } else if escalate {
            Decision::Escalate
        } else {
            Decision::Tier0
        };
        Classification {
            decision,
            reasons,
            matrix_version: matrix_version.to_string(),
        }
    }

    /// The distinct reason kinds, in order.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        for r in &self.reasons {
            if !kinds.contains(&r.kind()) {
                kinds.push(r.kind());
            }
        }
        kinds
    }
}
