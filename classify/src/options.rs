//! What a script would run under: runtime toggles, policy, and the pinned matrix version.

use std::fmt;
use std::sync::Arc;

pub use kube_harness_protocol::RuntimeToggles;

/// One command as the policy rule sees it: its name (basename) and literal arguments.
#[derive(Debug, Clone, Copy)]
pub struct CommandUse<'a> {
    pub name: &'a str,
    /// Arguments as literal strings; `None` where an argument is only known at run time.
    pub args: &'a [Option<String>],
}

/// A policy hook: returns `Some(rule name)` to block the command.
pub type PolicyRule = Arc<dyn Fn(&CommandUse<'_>) -> Option<String> + Send + Sync>;

/// Commands refused on every tier.
#[derive(Clone, Default)]
pub struct Policy {
    /// Command names (matched against the basename) that are refused wherever they appear.
    pub deny_commands: Vec<String>,
    /// An optional rule applied to every command found.
    pub rule: Option<PolicyRule>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("deny_commands", &self.deny_commands)
            .field("rule", &self.rule.as_ref().map(|_| "<fn>"))
            .finish()
    }
}

/// Everything `classify` needs besides the script.
#[derive(Debug, Clone, Default)]
pub struct ClassifyOptions {
    pub runtime: RuntimeToggles,
    pub policy: Policy,
    /// Pin a capability-matrix version; `None` uses the newest.
    pub matrix: Option<String>,
}
