//! The integration tests of this crate as modules of one test binary (one link on two cores).

mod attack_reaper;
mod tier1_agent;
mod tier1_pod;
mod tier1_pod_like;
mod tier1_skills;
mod tier1_skills_turn;
mod tier1_support;
