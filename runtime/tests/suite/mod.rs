//! The integration tests of this crate as modules of one test binary (one link on two cores).

mod runtime_step_key;
mod runtime_turn_logic;
