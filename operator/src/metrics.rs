//! Prometheus metrics of the operator: reconciles and failures by cause, how long sessions take
//! to become Ready, sessions by phase, and the share of commands that stayed on Tier-0.

use kube_harness_crds::Phase;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpenLabels {
    /// prepared or ordinary.
    pub source: &'static str,
    /// stock_empty, workspace_too_large, slot_unavailable, unreported, or none.
    pub miss_reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StartLabels {
    /// `warm` (adopted a warm pod) or `cold`.
    pub source: &'static str,
    /// Why a tier with a warm pool started cold; `none` otherwise.
    pub miss_reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabel {
    pub tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

/// Per-session figures the gauges are computed from.
#[derive(Clone, Copy, Debug, Default)]
struct SessionFigures {
    phase: Option<Phase>,
    tier0: u64,
    total: u64,
}

pub struct Metrics {
    pub registry: Registry,
    reconciles: Family<ControllerLabel, Counter>,
    errors: Family<ErrorLabels, Counter>,
    reconcile_seconds: Family<ControllerLabel, Histogram>,
    provisioning_seconds: Histogram,
    sessions: Family<PhaseLabel, Gauge>,
    tier0_share: Gauge<f64, AtomicU64>,
    pub leader: Gauge,
    tier1_opens: Family<OpenLabels, Counter>,
    tier1_failures: Family<ReasonLabel, Counter>,
    session_starts: Family<StartLabels, Counter>,
    warm_ready: Family<TierLabel, Gauge>,
    figures: Mutex<HashMap<String, SessionFigures>>,
}

const PHASES: [Phase; 6] = [
    Phase::Pending,
    Phase::Provisioning,
    Phase::Ready,
    Phase::Hibernated,
    Phase::Failed,
    Phase::Terminating,
];

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kube_harness");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_seconds = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        let provisioning_seconds = Histogram::new(exponential_buckets(0.25, 2.0, 12));
        let sessions = Family::<PhaseLabel, Gauge>::default();
        let tier0_share = Gauge::<f64, AtomicU64>::default();
        let leader = Gauge::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by cause",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took",
            reconcile_seconds.clone(),
        );
        registry.register(
            "session_provisioning_seconds",
            "From a session's creation (or wake request) to its worker being Ready",
            provisioning_seconds.clone(),
        );
        registry.register("sessions", "HarnessSessions by phase", sessions.clone());
        registry.register(
            "tier0_share",
            "Share of all sessions' commands that ran on Tier-0 (0..1)",
            tier0_share.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the Lease and reconciles",
            leader.clone(),
        );
        let tier1_opens = Family::<OpenLabels, Counter>::default();
        let tier1_failures = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "tier1_opens",
            "Tier-1 sandboxes opened by the tier API, by source and miss reason",
            tier1_opens.clone(),
        );
        registry.register(
            "tier1_failures",
            "Tier-1 sandboxes reported Failed to a worker, by reason (counted once per session change)",
            tier1_failures.clone(),
        );
        let session_starts = Family::<StartLabels, Counter>::default();
        let warm_ready = Family::<TierLabel, Gauge>::default();
        registry.register(
            "session_starts",
            "Worker pods started for sessions: adopted from a level-0 warm pool, or cold (with the miss reason when the tier has a pool)",
            session_starts.clone(),
        );
        registry.register(
            "warm_pool_ready",
            "Idle, ready warm pods of a level-0 tier, over all the namespaces it serves",
            warm_ready.clone(),
        );
        Metrics {
            registry,
            session_starts,
            warm_ready,
            tier1_opens,
            tier1_failures,
            reconciles,
            errors,
            reconcile_seconds,
            provisioning_seconds,
            sessions,
            tier0_share,
            leader,
            figures: Mutex::new(HashMap::new()),
        }
    }
}

impl Metrics {
    pub fn reconciled(&self, controller: &'static str, seconds: f64) {
        let label = ControllerLabel { controller };
        self.reconciles.get_or_create(&label).inc();
        self.reconcile_seconds
            .get_or_create(&label)
            .observe(seconds);
    }

    pub fn failed(&self, controller: &'static str, error: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels { controller, error })
            .inc();
    }

    pub fn provisioned(&self, seconds: f64) {
        self.provisioning_seconds.observe(seconds);
    }

    /// Records a session's phase and command counts; `None` forgets the session (deleted).
    /// Constant time: the gauges move by the difference to what the session had before, and the
    /// command totals are kept under the key "" (no session's key), instead of recounting every
    /// session on every reconcile.
    pub fn session(&self, key: &str, figures: Option<(Phase, u64, u64)>) {
        const TOTALS: &str = "";
        let mut all = self.figures.lock().unwrap_or_else(|e| e.into_inner());
        if !all.contains_key(TOTALS) {
            // Every phase is exported from the start, at 0.
            for phase in PHASES {
                self.sessions
                    .get_or_create(&PhaseLabel {
                        phase: phase.as_str(),
                    })
                    .set(0);
            }
            all.insert(TOTALS.into(), SessionFigures::default());
        }
        let new = figures.map(|(phase, tier0, total)| SessionFigures {
            phase: Some(phase),
            tier0,
            total,
        });
        let old = match new {
            Some(f) if !key.is_empty() => all.insert(key.to_string(), f),
            None if !key.is_empty() => all.remove(key),
            _ => None,
        };
        let sums = all.entry(TOTALS.into()).or_default();
        if let Some(old) = old {
            sums.tier0 = sums.tier0.saturating_sub(old.tier0);
            sums.total = sums.total.saturating_sub(old.total);
        }
        if let Some(new) = new.filter(|_| !key.is_empty()) {
            sums.tier0 += new.tier0;
            sums.total += new.total;
        }
        self.tier0_share.set(if sums.total == 0 {
            0.0
        } else {
            sums.tier0 as f64 / sums.total as f64
        });
        let (was, now) = (old.and_then(|f| f.phase), new.and_then(|f| f.phase));
        if was != now && !key.is_empty() {
            for (phase, by) in [(was, -1), (now, 1)] {
                if let Some(phase) = phase {
                    self.sessions
                        .get_or_create(&PhaseLabel {
                            phase: phase.as_str(),
                        })
                        .inc_by(by);
                }
            }
        }
    }

    /// A sandbox opened (a new pod created or claimed, not a repeated request).
    pub fn tier1_opened(&self, source: &'static str, miss_reason: Option<&'static str>) {
        self.tier1_opens
            .get_or_create(&OpenLabels {
                source,
                miss_reason: miss_reason.unwrap_or("none"),
            })
            .inc();
    }

    /// A sandbox failed (`reason` is one of the tier API's Failed reasons).
    pub fn tier1_failed(&self, reason: &str) {
        self.tier1_failures
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// A session's worker pod started: adopted warm (`miss` None) or cold.
    pub fn session_started(&self, warm: bool, miss: Option<&'static str>) {
        self.session_starts
            .get_or_create(&StartLabels {
                source: if warm { "warm" } else { "cold" },
                miss_reason: miss.unwrap_or("none"),
            })
            .inc();
    }

    /// Idle ready warm pods of a level-0 tier.
    pub fn warm_pool(&self, tier: &str, ready: u32) {
        self.warm_ready
            .get_or_create(&TierLabel {
                tier: tier.to_string(),
            })
            .set(i64::from(ready));
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
