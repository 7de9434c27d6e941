//! `kube-harness ledger serve --store memory|file:DIR|postgres:URL --listen ADDR --token-file FILE
//! [--insecure-no-auth]`: the orchestration ledger service. Everything lives in the
//! `kube-harness-ledger` crate; this module only exposes its command-line face.

pub use kube_harness_ledger::cli::{run, LedgerArgs};
