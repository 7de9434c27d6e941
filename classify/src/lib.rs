//! Classification before execution: every script is parsed with tree-sitter-bash and each command
//! it would run is judged against the versioned Tier-0 capability matrix, so a turn escalates
//! before its first side effect (the seed's `rm -rf build && cargo build`).

//!
//! Without the default `parser` feature this crate is the capability matrix, the options and
//! reasons, and emulation-gap detection: what the operator and clients need, with no C grammar.

pub mod ansi_c;
mod gap;
pub mod matrix;
mod options;
#[cfg(feature = "parser")]
mod parser;
mod reason;

pub use gap::{detect_emulation_gap, Gap, GapSignal, RunOutput};
pub use options::{ClassifyOptions, CommandUse, Policy, PolicyRule, RuntimeToggles};
#[cfg(feature = "parser")]
pub use parser::{classify, MAX_NESTING, MAX_SCRIPT_BYTES, PARSE_BUDGET};
pub use reason::{Classification, Decision, RealExecReason, Reason, Toggle};

/// The `command` of the `policy-blocked` reason that refuses a script the classifier could not
/// judge while a policy is in force.
pub const UNJUDGED: &str = "(unclassified script)";
