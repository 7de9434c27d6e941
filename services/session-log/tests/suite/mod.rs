//! The integration tests of this crate as modules of one test binary (one link on two cores).

mod attack_big_runs;
mod attack_idle_connections;
mod attack_quotas;
mod attack_slow_appends;
mod client;
mod common;
mod conformance;
mod crash;
mod file_store;
mod process_support;
mod replay;
mod tenants_support;
