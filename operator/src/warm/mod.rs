//! Level-0 warm pools (docs/operator.md "Warm pool"): pre-started worker pods, with their
//! workspace PVCs, in the namespaces a level-0 SandboxTier serves, which a new HarnessSession
//! adopts instead of waiting for a cold start. One use: an adopted pod serves its session until
//! it is deleted, never another.

pub mod adopt;
pub mod objects;
pub mod pool;
