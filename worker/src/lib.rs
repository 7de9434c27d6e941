pub mod classify;
pub mod workspace;
