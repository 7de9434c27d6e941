//! The integration tests of this crate as modules of one test binary (one link on two cores).

mod attack_slow_bodies;
mod common;
mod http_service;
mod ledger_conformance;
mod model;
mod races;
mod store_conformance;
