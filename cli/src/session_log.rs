//! `kube-harness session-log serve --store memory|file:PATH|postgres:URL --listen ADDR
//! --token-file FILE [--sync=false] [--insecure-no-auth]`: the session log service
//! (lh.remote-session.v1). Everything lives in the `kube-harness-session-log` crate; this module
//! only exposes its command-line face.

pub use kube_harness_session_log::cli::{run, SessionLogArgs};
