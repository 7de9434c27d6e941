//! The session workspace: its mount table (`spec`), and the archive handoff and merge that move it
//! to a higher tier and back.

pub mod spec;

pub use spec::{Mount, WorkspaceSpec};
