//! Tier-1: the real toolchain a turn escalates to (docs/tier1.md).
//!
//! - `shell`: running one command with real bash (shared with the local host's Tier-1).
//! - `local_tier1`: the local host's Tier-1: this machine's toolchain in a private mount namespace.
//! - `agent`, `agent_http`, `bind`, `reap`: the agent in a Tier-1 pod (`kube-harness worker
//!   --tier 1`): workspace bind, commands, changes.
//! - `skills`, `keeper`, `agent_skills`: the session's skills, read-only at `/.agents` on every
//!   Tier-1: their archive and install, the pod's skills keeper, where the agent installs them.
//! - `pod`, `pod_shell`, `tier_api` (settings in `pod_config`): the worker's side: a sandbox from
//!   the operator, the handoff, the commands and the merge (`merge_report`: what a merge tells the
//!   turn, for both Tier-1s).
//! - The JSON both sides speak is `kube_harness_protocol::tier1`.

pub mod agent;
pub mod agent_http;
mod agent_skills;
pub mod bind;
mod error;
pub mod keeper;
pub mod local_tier1;
mod merge_report;
pub mod pod;
mod pod_config;
pub mod pod_shell;
pub mod reap;
pub mod shell;
pub mod skills;
pub mod tier_api;

pub use agent::{Agent, AgentConfig};
pub use error::Tier1Error;
pub use local_tier1::LocalTier1;
pub use pod::{PodTier1, PodTier1Config};
pub use pod_shell::PodShell;
