//! What bounds every HTTP peer of Kube Harness the same way, without a server: the client side of
//! bounded bodies ([`body`]: an answer read, spooled or streamed within a limit, and the
//! [`BodyError`] both sides report) and the connection limits' defaults ([`connection`]), which
//! the worker's settings (`kube-harness-protocol`) and the services' serve
//! (`kube-harness-service-kit`, which re-exports all of it) share. No axum, no hyper server: the
//! wire crate links this, not the service kit.

pub mod body;
pub mod connection;

pub use body::{chain, BodyError};
pub use connection::{DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS};
