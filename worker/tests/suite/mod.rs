//! The integration tests of this crate as modules of one test binary (one link on two cores).

mod api_concurrency;
mod api_errors;
mod api_exec;
mod api_files;
mod api_log;
mod api_metrics;
mod api_persistent;
mod api_replay;
mod api_spill;
mod api_stream;
mod api_support;
mod api_turns;
mod attack_archive;
mod attack_bodies;
mod attack_file_events;
mod attack_files;
mod attack_host_paths;
mod attack_idle_connections;
mod attack_replay;
mod attack_slow_bodies;
mod attack_timestamps;
mod runtime_support;
mod runtime_tier0;
mod runtime_tiers;
mod runtime_trace_schema;
#[path = "../../../tier1/tests/suite/tier1_support/mod.rs"]
mod tier1_support;
