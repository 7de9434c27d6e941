//! The integration tests of this crate as modules of one test binary (one link on two cores).

mod kstatus_fixtures;
mod reconcile_mock;
mod reconcile_scale;
mod reconcile_warm;
mod resources;
mod support;
mod tenants;
mod tier1_objects;
mod tier1_sweep;
mod tier_api;
mod warm_objects;
