//! The integration tests, compiled as one test binary (see suite/).

mod suite;
