//! The lease a claimed task or wakeup carries. A leaf: tasks.rs and wakeups.rs both hand one out,
//! and mod.rs re-exports it with the ledgers.

use crate::clock::Millis;
use serde::{Deserialize, Serialize};

/// A claim on a task or wakeup: valid while `now < expires_at` and the token matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Lease {
    pub token: String,
    pub owner: String,
    pub expires_at: Millis,
}
