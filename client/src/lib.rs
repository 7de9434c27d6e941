//! Reaching a HarnessSession from anywhere, as `kube-harness exec` does: find the session, wake
//! it if hibernated, wait until Ready, read its token Secret, and talk to its worker: from a pod,
//! at the session's in-cluster address (its Service); from anywhere else, through a port-forward
//! over the API server (so it works from outside the cluster and on kind).

pub mod error;
pub mod session;
pub mod tunnel;

pub use error::ClientError;
pub use session::{in_pod, Connected, Route, SessionHandle};
