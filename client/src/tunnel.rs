//! A local TCP port that forwards to a pod port through the API server (pods/portforward), like
//! `kubectl port-forward`: each accepted connection opens its own port-forward stream, so an HTTP
//! client can use it unchanged.

use crate::error::ClientError;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running forwarder; dropping it stops accepting and closes open streams.
pub struct Tunnel {
    pub local: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tunnel {
    /// Listens on 127.0.0.1 (an ephemeral port) and forwards to `pod:port`.
    pub async fn open(pods: Api<Pod>, pod: &str, port: u16) -> Result<Tunnel, ClientError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| ClientError::Tunnel(format!("cannot listen on 127.0.0.1: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| ClientError::Tunnel(e.to_string()))?;
        let pod = pod.to_string();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                let pods = pods.clone();
                let pod = pod.clone();
                conns.spawn(async move {
                    let mut forwarder = match pods.portforward(&pod, &[port]).await {
                        Ok(f) => f,
                        Err(e) => {
                            tracing::warn!(error = %e, pod, "port-forward failed");
                            return;
                        }
                    };
                    let Some(mut upstream) = forwarder.take_stream(port) else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut socket, &mut upstream).await;
                    drop(upstream);
                    let _ = forwarder.join().await;
                });
            }
        });
        Ok(Tunnel { local, task })
    }
}
