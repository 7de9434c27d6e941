//! The runtime toggles and policy flags shared by every command that classifies or runs scripts.

use clap::ArgAction;
use kube_harness_worker::classify::RuntimeToggles;

#[derive(clap::Args, Debug, Clone)]
pub struct ToggleArgs {
    /// Whether python3/python may run on Tier-0.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = ArgAction::Set)]
    pub python: bool,
    /// Whether node may run on Tier-0.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = ArgAction::Set)]
    pub javascript: bool,
    /// Whether network clients (curl) may run on Tier-0.
    #[arg(long, value_name = "BOOL", default_value_t = false, action = ArgAction::Set)]
    pub network: bool,
    /// Refuse this command on every tier (repeatable).
    #[arg(long = "deny", value_name = "CMD")]
    pub deny: Vec<String>,
}

impl ToggleArgs {
    pub fn runtime(&self) -> RuntimeToggles {
        RuntimeToggles {
            python: self.python,
            javascript: self.javascript,
            network: self.network,
        }
    }
}
