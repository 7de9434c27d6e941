//! Workspace tests: one binary (one link) for all of them.

mod remove_tree;
mod unreadable;
mod workspace_bad_input;
mod workspace_merge;
mod workspace_properties;
mod workspace_roundtrip;
mod workspace_support;
