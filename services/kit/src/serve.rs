//! Binding and serving with graceful shutdown.
//!
//! On SIGTERM (what Kubernetes sends) or SIGINT the server stops accepting connections and lets
//! in-flight requests finish, so an acknowledged append is never cut off mid-response by a rollout.

use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpSocket};

/// Binds `addr` with SO_REUSEADDR, so a restarted server can take its port back at once.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Serves `router` on `listener` until `shutdown` completes, then drains in-flight requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "listening");
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Completes on the first SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(
                "cannot install SIGTERM handler: {e}; only SIGINT will stop the server"
            );
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
    }
}
