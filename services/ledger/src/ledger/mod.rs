//! The five ledgers, written once over `DurableJsonStore`.

mod continuations;
mod error;
mod lease;
mod queues;
mod results;
mod space;
mod tasks;
mod wakeups;

pub use continuations::{Continuation, ContinuationLedger, ContinuationState};
pub use error::{ErrorBody, LedgerError, LedgerResult};
pub use lease::Lease;
pub use queues::{
    EnqueueRequest, MessageState, QueueMessage, WorkflowQueues, DEFAULT_MAX_DELIVERIES,
};
pub use results::{PutOutcome, ResultLedger, StoredResult};
pub use space::MAX_DURATION_MS;
pub use tasks::{NewTask, TaskLedger, TaskRecord, TaskState, CLAIM_WINDOW, DEFAULT_MAX_ATTEMPTS};
pub use wakeups::{NewWakeup, Wakeup, WakeupLedger, WakeupState};

use crate::clock::{Clock, SystemClock};
use crate::key::Key;
use crate::store::DurableJsonStore;
use space::Space;
use std::sync::Arc;

/// The ledger contract harness processes coordinate through. The durable implementation and the
/// HTTP client both produce one of these, so callers do not care where the ledgers live.
#[derive(Clone)]
pub struct OrchestrationServices {
    pub tasks: Arc<dyn TaskLedger>,
    pub continuations: Arc<dyn ContinuationLedger>,
    pub wakeups: Arc<dyn WakeupLedger>,
    pub queues: Arc<dyn WorkflowQueues>,
    pub results: Arc<dyn ResultLedger>,
}

/// Ledgers under `root_dir` of `store`, on wall-clock time.
pub fn create_durable_orchestration_services(
    root_dir: &str,
    store: Arc<dyn DurableJsonStore>,
) -> Result<OrchestrationServices, LedgerError> {
    create_durable_orchestration_services_with_clock(root_dir, store, Arc::new(SystemClock))
}

/// Same, with an injected clock (tests move time instead of sleeping).
pub fn create_durable_orchestration_services_with_clock(
    root_dir: &str,
    store: Arc<dyn DurableJsonStore>,
    clock: Arc<dyn Clock>,
) -> Result<OrchestrationServices, LedgerError> {
    let space = Space {
        store,
        root: Key::new(root_dir)?,
        clock,
    };
    Ok(OrchestrationServices {
        tasks: Arc::new(tasks::DurableTasks {
            space: space.clone(),
        }),
        continuations: Arc::new(continuations::DurableContinuations {
            space: space.clone(),
        }),
        wakeups: Arc::new(wakeups::DurableWakeups {
            space: space.clone(),
        }),
        queues: Arc::new(queues::DurableQueues {
            space: space.clone(),
        }),
        results: Arc::new(results::DurableResults { space }),
    })
}
