//! The integration tests of this crate as modules of one test binary (one link on two cores).

mod attack_budgets;
mod attack_forker;
mod attack_sandbox;
mod sandbox_env;
mod sandbox_fs;
mod sandbox_limits;
mod sandbox_net;
mod sandbox_setup;
mod util;
