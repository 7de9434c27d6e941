//! The one Context every reconcile gets: the client, the settings, the metrics, and the Event
//! reporter, plus the per-object failure counts that drive error backoff.

use crate::config::OperatorConfig;
use crate::metrics::Metrics;
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, config: OperatorConfig) -> Self {
        let reporter = Reporter {
            controller: "kube-harness-operator".into(),
            instance: Some(config.identity.clone()),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            metrics: Metrics::default(),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Exponential backoff per object: 1 s, 2 s, 4 s … capped at 5 minutes.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut all = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = all.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs(1u64 << (*n - 1).min(8)).min(Duration::from_secs(300))
    }

    /// A reconcile of `key` succeeded: the next failure starts the backoff again.
    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}
