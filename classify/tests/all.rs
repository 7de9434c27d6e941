//! The integration tests of kube-harness-classify, compiled as one test binary (see suite/).

mod suite;
