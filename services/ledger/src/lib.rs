//! Orchestration ledgers for kube-harness: tasks, continuations, wakeups, workflow queues and
//! results, written once over the five-method [`DurableJsonStore`] so that stateless harness
//! processes can coordinate through memory, files or PostgreSQL, directly or through the HTTP
//! ledger service.

pub mod cli;
pub mod clock;
pub mod key;
pub mod store;

pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use key::{Key, KeyError};
pub use store::{
    DurableJsonStore, FileStore, MemoryStore, PostgresStore, PostgresStoreOptions, StoreError,
};
pub mod ledger;

pub use ledger::{
    create_durable_orchestration_services, create_durable_orchestration_services_with_clock,
    LedgerError, OrchestrationServices,
};
pub mod http;
