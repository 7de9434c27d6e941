//! Classifier tests: one binary (one link) for all of them.

mod attack_hidden_exec;
mod classify_corpus;
mod classify_properties;
mod classify_robustness;
