//! The PostgreSQL connection pool of the services' stores, set up one way: a URL in libpq's
//! syntax, no TLS (the server is in-cluster or on loopback), connections checked cheaply on
//! reuse (`RecyclingMethod::Fast`), a bounded number of them.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

/// Why a pool could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PoolSetupError {
    #[error("invalid PostgreSQL URL: {0}")]
    Url(#[from] tokio_postgres::Error),
    #[error("cannot build the PostgreSQL pool: {0}")]
    Build(#[from] deadpool_postgres::BuildError),
}

/// A pool of at most `max_size` (at least 1) connections to `url`. Nothing connects until the
/// first `get`.
pub fn pool(url: &str, max_size: usize) -> Result<Pool, PoolSetupError> {
    let config: tokio_postgres::Config = url.parse()?;
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Ok(Pool::builder(manager).max_size(max_size.max(1)).build()?)
}
