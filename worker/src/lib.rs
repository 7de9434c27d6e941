pub mod api;
pub mod classify;
pub mod local;
pub mod runtime;
pub mod sandbox;
pub mod tier1;
pub mod workspace;
