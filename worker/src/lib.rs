pub mod classify;
pub mod runtime;
pub mod workspace;
