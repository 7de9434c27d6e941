//! Prometheus metrics of the operator: reconciles and failures by cause, how long sessions take
//! to become Ready (warm or cold) and escalations to turn Ready, sessions by phase, warm pools,
//! Tier-1 pods alive, and the share of commands that stayed on Tier-0. docs/operator.md "Metrics"
//! lists them; the chart's dashboard (charts/kube-harness/dashboards/) queries them, and a test
//! (`tests::dashboard`) checks that every series it queries is one this registry has. The label
//! sets are in `labels`, the timing of escalations in `escalation`.

mod escalation;
mod labels;

use escalation::EscalationClock;
use kube_harness_crds::Phase;
pub use labels::{
    ControllerLabel, ErrorLabels, OpenLabels, PhaseLabel, PodsLabels, ReasonLabel, SourceLabel,
    StartLabels, SweptLabels, TierLabel,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Instant;

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
    provisioning_seconds: Family<SourceLabel, Histogram>,
    escalation_seconds: Family<SourceLabel, Histogram>,
    sessions: Family<PhaseLabel, Gauge>,
    tier0_share: Gauge<f64, AtomicU64>,
    pub leader: Gauge,
    tier1_opens: Family<OpenLabels, Counter>,
    tier1_failures: Family<ReasonLabel, Counter>,
    session_starts: Family<StartLabels, Counter>,
    warm_ready: Family<TierLabel, Gauge>,
    tier1_pods: Family<PodsLabels, Gauge>,
    tier1_swept: Family<SweptLabels, Counter>,
    tier1_sweep_errors: Counter,
    tier1_opens_limited: Counter,
    /// Every (tier, state) of `tier1_pods` with a series now: a snapshot sets those it lacks to 0,
    /// or removes them when their tier has no pods left.
    tier1_known: Mutex<HashSet<PodsLabels>>,
    escalations: Mutex<EscalationClock>,
    figures: Mutex<HashMap<String, SessionFigures>>,
}

const PHASES: [Phase; 7] = [
    Phase::Pending,
    Phase::Provisioning,
    Phase::Ready,
    Phase::Hibernated,
    Phase::Failed,
    Phase::Expired,
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
        // 25 ms .. 819 s: a warm start takes tens of milliseconds, a cold one seconds.
        let provisioning_seconds = Family::<SourceLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.025, 2.0, 16))
        });
        // 5 ms .. 164 s: a prepared pod is Ready at its claim, an ordinary one once it started.
        let escalation_seconds = Family::<SourceLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.005, 2.0, 16))
        });
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
            "From a session's creation (or wake request) to its worker being Ready, by source (warm: an adopted warm pod; cold)",
            provisioning_seconds.clone(),
        );
        registry.register(
            "escalation_seconds",
            "From the tier API's open of a Tier-1 sandbox to its first answer that the sandbox is Ready, by source (prepared, ordinary)",
            escalation_seconds.clone(),
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
            "Idle, ready warm pods of a tier: worker pods of a level-0 tier over all the namespaces it serves, prepared pods of an escalation tier",
            warm_ready.clone(),
        );
        let tier1_pods = Family::<PodsLabels, Gauge>::default();
        registry.register(
            "tier1_pods",
            "Tier-1 pods alive (not being deleted), by tier and state (idle: an unclaimed warm-pool pod; serving: a turn's pod; kept: a session's pod kept between its turns)",
            tier1_pods.clone(),
        );
        let tier1_swept = Family::<SweptLabels, Counter>::default();
        registry.register(
            "tier1_swept",
            "Tier-1 pods, token Secrets and turn records deleted by the leader's sweep, by kind and reason",
            tier1_swept.clone(),
        );
        let tier1_sweep_errors = Counter::default();
        registry.register(
            "tier1_sweep_errors",
            "Kubernetes API requests of the leader's Tier-1 sweep that failed (the sweep goes on with the rest, and tries again at the next)",
            tier1_sweep_errors.clone(),
        );
        let tier1_opens_limited = Counter::default();
        registry.register(
            "tier1_opens_limited",
            "Tier API opens of new turns answered 429 because their session opened too many too fast (per replica)",
            tier1_opens_limited.clone(),
        );
        Metrics {
            tier1_pods,
            tier1_swept,
            tier1_sweep_errors,
            tier1_opens_limited,
            tier1_known: Mutex::new(HashSet::new()),
            escalations: Mutex::new(EscalationClock::default()),
            escalation_seconds,
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

    /// A session's worker turned Ready `seconds` after its creation (or wake request); `warm`:
    /// the worker is an adopted warm pod.
    pub fn provisioned(&self, warm: bool, seconds: f64) {
        let source = if warm { "warm" } else { "cold" };
        self.provisioning_seconds
            .get_or_create(&SourceLabel { source })
            .observe(seconds);
    }

    /// The tier API opened a Tier-1 sandbox on the pod with this uid (created or claimed now).
    pub fn escalation_opened(&self, pod_uid: &str) {
        self.escalations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .opened(pod_uid, Instant::now());
    }

    /// The tier API answered the sandbox on this pod Ready (with its token): observes the time
    /// since its open, once per pod. Timed from this replica's [`Metrics::escalation_opened`]
    /// when it opened it; else from `created_ago`, seconds since the pod's creation (whole
    /// seconds), which the caller gives for ordinary pods only (they are created by the open; a
    /// prepared pod is answered Ready by the open that claims it). Returns whether it observed.
    pub fn escalation_ready(
        &self,
        pod_uid: &str,
        source: &'static str,
        created_ago: Option<f64>,
    ) -> bool {
        let seconds = self
            .escalations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ready(pod_uid, created_ago);
        let Some(seconds) = seconds else {
            return false;
        };
        self.escalation_seconds
            .get_or_create(&SourceLabel { source })
            .observe(seconds);
        true
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

    /// The sweep deleted one thing.
    pub fn tier1_swept(&self, kind: &'static str, reason: &'static str) {
        self.tier1_swept
            .get_or_create(&SweptLabels { kind, reason })
            .inc();
    }

    /// An open refused by [`crate::tier1::limit::OpenLimiter`].
    pub fn tier1_open_limited(&self) {
        self.tier1_opens_limited.inc();
    }

    /// A request of the sweep failed.
    pub fn tier1_sweep_error(&self) {
        self.tier1_sweep_errors.inc();
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

    /// Idle ready warm pods of a tier (level 0: worker pods; level 1 and up: prepared pods).
    pub fn warm_pool(&self, tier: &str, ready: u32) {
        self.warm_ready
            .get_or_create(&TierLabel {
                tier: tier.to_string(),
            })
            .set(i64::from(ready));
    }

    /// Idle pods of an escalation tier's warm pool, after its reconcile.
    pub fn tier1_idle(&self, tier: &str, alive: u32) {
        self.set_tier1(
            PodsLabels {
                tier: tier.to_string(),
                state: "idle",
            },
            i64::from(alive),
        );
    }

    /// Every Tier-1 pod alive, counted by (tier, state): the whole picture, so a (tier, state)
    /// counted before and missing now is set to 0 while its tier has pods, and removed once the
    /// tier has none. The tier label comes from pods a tenant can create too, so a series lives
    /// only as long as such pods do (bounded by the namespaces' pod quotas).
    pub fn tier1_pods(&self, alive: &HashMap<(String, &'static str), u32>) {
        let tiers: HashSet<&str> = alive.keys().map(|(tier, _)| tier.as_str()).collect();
        // One lock for the whole snapshot: a pool's `tier1_idle` in between waits, and is not
        // lost between reading what is known and removing it.
        let mut known = self.tier1_known.lock().unwrap_or_else(|e| e.into_inner());
        known.retain(|labels| {
            if alive.contains_key(&(labels.tier.clone(), labels.state)) {
                return true;
            }
            if tiers.contains(labels.tier.as_str()) {
                self.tier1_pods.get_or_create(labels).set(0);
                true
            } else {
                self.tier1_pods.remove(labels);
                false
            }
        });
        for ((tier, state), n) in alive {
            let labels = PodsLabels {
                tier: tier.clone(),
                state,
            };
            self.tier1_pods.get_or_create(&labels).set(i64::from(*n));
            known.insert(labels);
        }
    }

    fn set_tier1(&self, labels: PodsLabels, n: i64) {
        self.tier1_pods.get_or_create(&labels).set(n);
        self.tier1_known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(labels);
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

#[cfg(test)]
mod tests;
