//! Tier-1 sandboxes (docs/tier1.md): the pods a turn escalates to, the tier API workers open them
//! with, warm pools of prepared pods, and the sweep that cleans up after turns that ended badly.

pub mod api;
pub mod auth;
pub mod end;
pub mod limit;
pub mod open;
pub mod pod;
pub mod pool;
pub mod record;
pub mod report;
pub mod state;
pub mod sweep;
