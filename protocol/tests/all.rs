//! The integration tests of `kube-harness-protocol`, one binary (docs/architecture.md "Where
//! tests live").

mod suite;
