//! The one Context every reconcile gets: the client, the settings, the metrics, and the Event
//! reporter, plus the per-object failure counts that drive error backoff, the read caches, and
//! the workers' polled reports.

use crate::cache::Caches;
use crate::config::OperatorConfig;
use crate::metrics::Metrics;
use crate::origin::OriginKey;
use crate::session::usage::Polls;
use crate::tier1::auth::TierAuth;
use crate::tier1::limit::OpenLimiter;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::Client;
use kube_harness_crds::HarnessSession;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

/// Default of [`Context::report_wait`].
pub const REPORT_WAIT: Duration = Duration::from_millis(250);

pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    failures: Mutex<HashMap<String, u32>>,
    pub caches: Caches,
    pub polls: Polls,
    /// How fast each session may open Tier-1 sandboxes through the tier API.
    pub opens: OpenLimiter,
    /// The tier API's token checks: cached, and bounded per client.
    pub tier_auth: TierAuth,
    /// The key of the operator's proof of origin on the warm and Tier-1 pods it makes
    /// ([`crate::origin`]): random until [`crate::origin::load`] replaces it at start-up.
    pub origin: OriginKey,
    /// How long a reconcile waits for a background poll of its worker that it starts (one that
    /// answers does so in milliseconds; one that does not is left to the background).
    pub report_wait: Duration,
    /// Sessions a finished background poll asks to reconcile (taken once by the controller).
    poll_triggers: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<HarnessSession>>>>,
}

impl Context {
    pub fn new(client: Client, config: OperatorConfig) -> Self {
        let reporter = Reporter {
            controller: "kube-harness-operator".into(),
            instance: Some(config.identity.clone()),
        };
        let (trigger, triggers) = mpsc::unbounded_channel();
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            metrics: Metrics::default(),
            failures: Mutex::new(HashMap::new()),
            caches: Caches::default(),
            polls: Polls::new(trigger),
            opens: OpenLimiter::default(),
            tier_auth: TierAuth::default(),
            origin: OriginKey::random(),
            report_wait: REPORT_WAIT,
            poll_triggers: Mutex::new(Some(triggers)),
        }
    }

    /// The stream of sessions whose worker's polled report changed, once.
    pub fn take_poll_triggers(&self) -> Option<mpsc::UnboundedReceiver<ObjectRef<HarnessSession>>> {
        self.poll_triggers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
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
