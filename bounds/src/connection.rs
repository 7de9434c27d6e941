//! The defaults of the connection limits every server of Kube Harness applies (the service kit's
//! `ConnectionLimits`), here so the worker's settings default to the same values without linking
//! a server.

use std::time::Duration;

/// Default `ConnectionLimits::header_read_timeout`: 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `ConnectionLimits::idle_timeout`: 120 s, longer than the 90 s for which our clients
/// (reqwest's pool) keep an idle connection, so a client retires its connection before the server
/// closes it under a request it is sending.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default `ConnectionLimits::max_connections`: 1024 (and never more than half the process's
/// open-file limit).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
