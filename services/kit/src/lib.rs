//! Server scaffolding shared by the Kube Harness services (session log, ledgers).
//!
//! Each service builds its own axum [`Router`](axum::Router) of API routes and hands it to this kit,
//! which adds what every service needs the same way: bearer-token auth compared in constant time,
//! `GET /healthz` and `GET /metrics`, JSON errors, parsing of `--store` specs and a graceful
//! [`serve`](serve::serve) that bounds what connections may hold (header read and idle timeouts, a
//! connection limit: [`ConnectionLimits`]). Keeping these in one place means the services fail the same way on the
//! same mistakes (no token configured, a wrong token, a bad store spec). [`body`] bounds the bodies
//! of requests and answers for the worker API, its client and the Tier-1 agent the same way: in
//! size, and for a request, in pace ([`body::BodyPace`], which [`serve_with`] stamps on every
//! request). [`clients`] bounds what one client may hold: connections per source address, and
//! requests in flight per bearer identity where a service can tell one (429 past either).

pub mod auth;
pub mod body;
pub mod clients;
pub mod error;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod routes;
pub mod serve;
pub mod store_spec;
#[cfg(feature = "postgres-testing")]
pub mod testing;

pub use auth::{require_bearer, AuthConfig};
pub use clients::{ClientPermit, RequestsPerClient};
pub use error::{ApiError, ErrorBody, ErrorDetail};
pub use routes::{with_health_and_metrics, with_health_check, HealthCheck};
pub use serve::{
    bind, serve, serve_with, shutdown_signal, ConnectionArgs, ConnectionLimits,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};
pub use store_spec::StoreSpec;
