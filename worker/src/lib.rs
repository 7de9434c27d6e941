pub mod classify;
