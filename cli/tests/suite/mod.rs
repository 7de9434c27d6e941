//! The integration tests of this crate as modules of one test binary (one link on two cores).

mod adopt_pooled;
mod attack_adopt;
mod attack_carried;
mod attack_cpu;
mod attack_file_event_bytes;
mod attack_forker_outside;
mod attack_hydra;
mod attack_interpreters;
mod attack_local;
mod attack_local_inspection;
mod attack_persistent;
mod attack_shared_budgets;
mod classify_cli;
mod kubectl_plugin;
mod local_cli;
mod log_format;
#[path = "../../../tier1/tests/suite/tier1_support/procs.rs"]
mod procs;
mod support;
mod worker_cli;
mod worker_pod_like;
