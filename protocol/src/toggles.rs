//! The runtime toggles a session runs under: part of every wire that configures a tier.

use serde::{Deserialize, Serialize};

/// The runtime toggles of the seed (`runtime.python`, `runtime.javascript`, `runtime.network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuntimeToggles {
    pub python: bool,
    pub javascript: bool,
    pub network: bool,
}

impl Default for RuntimeToggles {
    /// Python and JavaScript on, network off: the seed's defaults.
    fn default() -> Self {
        RuntimeToggles {
            python: true,
            javascript: true,
            network: false,
        }
    }
}
