//! The integration tests of kube-harness-workspace, compiled as one test binary (see suite/).

mod suite;
