//! Request counters by operation and outcome, exported on `/metrics`.

use crate::ledger::LedgerResult;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    operation: &'static str,
    /// `ok` or the error code.
    outcome: &'static str,
}

#[derive(Clone, Default)]
pub(crate) struct Metrics {
    requests: Family<Labels, Counter>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Metrics {
        let metrics = Metrics::default();
        registry.register(
            "kube_harness_ledger_requests",
            "Ledger operations served, by operation and outcome",
            metrics.requests.clone(),
        );
        metrics
    }

    pub fn observe<T>(&self, operation: &'static str, result: &LedgerResult<T>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        self.requests
            .get_or_create(&Labels { operation, outcome })
            .inc();
    }
}
