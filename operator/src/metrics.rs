//! Prometheus metrics of the operator: reconciles and failures by cause, how long sessions take
//! to become Ready (warm or cold) and escalations to turn Ready, sessions by phase, warm pools,
//! Tier-1 pods alive, and the share of commands that stayed on Tier-0. docs/operator.md "Metrics"
//! lists them; the chart's dashboard (charts/kube-harness/dashboards/) queries them, and a test
//! below checks that every series it queries is one this registry has.

use kube_harness_crds::Phase;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    /// prepared, ordinary, or reused (a pod the session kept from an earlier turn).
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
pub struct SourceLabel {
    /// Session starts: `warm` or `cold`; escalations: `prepared` or `ordinary`.
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodsLabels {
    pub tier: String,
    /// `idle` (an unclaimed warm-pool pod, ready or starting), `serving` (a turn's pod) or
    /// `kept` (a session's pod kept between its turns).
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SweptLabels {
    /// `pod`, `secret` or `record` (a turn's Lease).
    pub kind: &'static str,
    /// Why: session_gone, ended, failed_to_start, never_ready, worker_replaced, idle_timeout,
    /// turn_timeout, lost_race, unrecorded, no_pod.
    pub reason: &'static str,
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

/// When this replica opened each Tier-1 sandbox not yet answered Ready, and the pods already
/// observed, so that an escalation is observed once however often its Ready is answered.
#[derive(Default)]
struct EscalationClock {
    opened: HashMap<String, Instant>,
    observed: VecDeque<String>,
    observed_set: HashSet<String>,
}

/// Pods remembered as observed (the oldest are forgotten beyond; a worker stops asking once its
/// sandbox is Ready, so only repeats within seconds matter).
const OBSERVED_KEPT: usize = 4096;
/// Opens never answered Ready are forgotten after this long (the sweep ends a pod still not
/// ready after 30 minutes) or beyond [`OBSERVED_KEPT`] of them.
const OPEN_FORGOTTEN: Duration = Duration::from_secs(3600);

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
        let mut clock = self.escalations.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if clock.opened.len() >= OBSERVED_KEPT {
            clock
                .opened
                .retain(|_, at| now.duration_since(*at) < OPEN_FORGOTTEN);
            if clock.opened.len() >= OBSERVED_KEPT {
                clock.opened.clear();
            }
        }
        clock.opened.insert(pod_uid.to_string(), now);
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
        let mut clock = self.escalations.lock().unwrap_or_else(|e| e.into_inner());
        if clock.observed_set.contains(pod_uid) {
            return false;
        }
        let seconds = match clock.opened.remove(pod_uid) {
            Some(at) => at.elapsed().as_secs_f64(),
            None => match created_ago {
                Some(s) if s.is_finite() && s >= 0.0 => s,
                _ => return false,
            },
        };
        if clock.observed.len() >= OBSERVED_KEPT {
            if let Some(old) = clock.observed.pop_front() {
                clock.observed_set.remove(&old);
            }
        }
        clock.observed.push_back(pod_uid.to_string());
        clock.observed_set.insert(pod_uid.to_string());
        drop(clock);
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
mod tests {
    use super::*;
    use serde_json::Value;
    use std::collections::BTreeMap;

    /// Labels Prometheus adds to every series of a scrape target (a ServiceMonitor's).
    const TARGET_LABELS: &[&str] = &[
        "instance",
        "job",
        "namespace",
        "pod",
        "service",
        "endpoint",
        "container",
    ];

    /// A registry with every recording method called, so every family has series.
    fn exercised() -> Metrics {
        let m = Metrics::default();
        m.reconciled("harnesssession", 0.004);
        m.reconciled("sandboxtier", 0.002);
        m.failed("harnesssession", "conflict");
        m.failed("sandboxtier", "api");
        m.provisioned(true, 0.04);
        m.provisioned(false, 1.7);
        m.session("session/a/one", Some((Phase::Ready, 3, 4)));
        m.session("session/a/two", Some((Phase::Provisioning, 0, 0)));
        m.tier1_opened("prepared", None);
        m.tier1_opened("ordinary", Some("stock_empty"));
        m.tier1_failed("Unschedulable");
        m.session_started(true, None);
        m.session_started(false, Some("stock-empty"));
        m.session_started(false, None);
        m.warm_pool("tier0", 2);
        m.warm_pool("rust", 1);
        m.escalation_opened("uid-prepared");
        assert!(m.escalation_ready("uid-prepared", "prepared", None));
        assert!(m.escalation_ready("uid-ordinary", "ordinary", Some(3.0)));
        m.tier1_idle("rust", 2);
        m.tier1_pods(&HashMap::from([
            (("rust".to_string(), "idle"), 2),
            (("rust".to_string(), "serving"), 1),
        ]));
        m.leader.set(1);
        m
    }

    /// Sample name -> label name -> values seen, from a text exposition.
    fn samples(text: &str) -> BTreeMap<String, BTreeMap<String, HashSet<String>>> {
        let mut out: BTreeMap<String, BTreeMap<String, HashSet<String>>> = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = out.entry(line[..end].to_string()).or_default();
            if let Some(inner) = line[end..]
                .strip_prefix('{')
                .and_then(|r| r.split_once('}'))
                .map(|(inner, _)| inner)
            {
                for pair in inner.split("\",") {
                    if let Some((k, v)) = pair.split_once("=\"") {
                        labels
                            .entry(k.to_string())
                            .or_default()
                            .insert(v.trim_end_matches('"').to_string());
                    }
                }
            }
        }
        out
    }

    /// Every PromQL expression of the dashboard (panel targets and variable queries).
    fn expressions(dashboard: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for panel in dashboard["panels"].as_array().into_iter().flatten() {
            for t in panel["targets"].as_array().into_iter().flatten() {
                out.push(t["expr"].as_str().unwrap_or_default().to_string());
            }
        }
        for v in dashboard["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(q) = v["query"]["query"].as_str() {
                out.push(q.to_string());
            }
        }
        out
    }

    fn is_ident(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_' || c == ':'
    }

    /// What is wrong with the dashboard's queries against this exposition: a metric the registry
    /// lacks, a label the metrics of a query lack, a label value never seen (equality matchers).
    fn dashboard_problems(dashboard: &Value, exposition: &str) -> Vec<String> {
        let have = samples(exposition);
        let mut problems = Vec::new();
        let exprs = expressions(dashboard);
        if exprs.is_empty() {
            problems.push("the dashboard has no queries".to_string());
        }
        for expr in exprs {
            if expr.trim().is_empty() {
                problems.push("a panel target without an expression".into());
                continue;
            }
            let chars: Vec<char> = expr.chars().collect();
            let mut metrics_here: Vec<&str> = Vec::new();
            let mut grouping_labels: Vec<String> = Vec::new();
            let mut i = 0;
            while i < chars.len() {
                if !is_ident(chars[i]) || (i > 0 && is_ident(chars[i - 1])) {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let rest: String = chars[i..].iter().collect();
                let rest = rest.trim_start();
                if word.starts_with("kube_harness_") {
                    let Some((name, labels)) = have.get_key_value(&word) else {
                        problems.push(format!("{expr}: no series {word} in the registry"));
                        continue;
                    };
                    metrics_here.push(name.as_str());
                    let Some(inner) = rest.strip_prefix('{').and_then(|r| r.split_once('}')) else {
                        continue;
                    };
                    for matcher in inner.0.split(',').filter(|m| !m.trim().is_empty()) {
                        let op = ["=~", "!~", "!=", "="]
                            .iter()
                            .find_map(|op| matcher.find(op).map(|at| (at, *op)));
                        let Some((at, op)) = op else {
                            problems.push(format!("{expr}: cannot read matcher {matcher:?}"));
                            continue;
                        };
                        let label = matcher[..at].trim();
                        let value = matcher[at + op.len()..].trim().trim_matches('"');
                        if TARGET_LABELS.contains(&label) {
                            continue;
                        }
                        match labels.get(label) {
                            None => problems.push(format!("{expr}: {word} has no label {label}")),
                            Some(values)
                                if op == "=" && !value.contains('$') && !values.contains(value) =>
                            {
                                problems.push(format!(
                                    "{expr}: {word} never has {label}=\"{value}\" (seen: {values:?})"
                                ))
                            }
                            Some(_) => {}
                        }
                    }
                } else if matches!(word.as_str(), "by" | "without" | "on" | "ignoring")
                    && rest.starts_with('(')
                {
                    if let Some((inner, _)) = rest[1..].split_once(')') {
                        grouping_labels.extend(
                            inner
                                .split(',')
                                .map(|l| l.trim().to_string())
                                .filter(|l| !l.is_empty()),
                        );
                    }
                }
            }
            if metrics_here.is_empty() {
                problems.push(format!("{expr}: queries no kube_harness metric"));
            }
            for label in grouping_labels {
                let known = TARGET_LABELS.contains(&label.as_str())
                    || metrics_here
                        .iter()
                        .any(|m| have.get(*m).is_some_and(|l| l.contains_key(&label)));
                if !known {
                    problems.push(format!("{expr}: no metric of it has the label {label}"));
                }
            }
        }
        problems
    }

    fn dashboard() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../charts/kube-harness/dashboards/kube-harness.json"
        );
        let text = std::fs::read_to_string(path).expect("the chart's dashboard");
        serde_json::from_str(&text).expect("the dashboard is JSON")
    }

    #[test]
    fn the_new_series_appear_with_their_labels() {
        let text = exercised().encode();
        for want in [
            "kube_harness_session_provisioning_seconds_count{source=\"warm\"} 1",
            "kube_harness_session_provisioning_seconds_count{source=\"cold\"} 1",
            "kube_harness_escalation_seconds_count{source=\"prepared\"} 1",
            "kube_harness_escalation_seconds_count{source=\"ordinary\"} 1",
            "kube_harness_escalation_seconds_sum{source=\"ordinary\"} 3.0",
            "kube_harness_tier1_pods{tier=\"rust\",state=\"idle\"} 2",
            "kube_harness_tier1_pods{tier=\"rust\",state=\"serving\"} 1",
            "kube_harness_warm_pool_ready{tier=\"rust\"} 1",
            "kube_harness_warm_pool_ready{tier=\"tier0\"} 2",
            "kube_harness_tier1_opens_total{source=\"ordinary\",miss_reason=\"stock_empty\"} 1",
            "kube_harness_session_starts_total{source=\"cold\",miss_reason=\"stock-empty\"} 1",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        // A warm start of 40 ms lands in the 50 ms bucket, not only in +Inf.
        assert!(
            text.contains(
                "kube_harness_session_provisioning_seconds_bucket{le=\"0.05\",source=\"warm\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn an_escalation_is_observed_once_per_pod() {
        let m = Metrics::default();
        m.escalation_opened("a");
        assert!(m.escalation_ready("a", "prepared", None));
        // Answered Ready again (a repeated open or show): not a second escalation.
        assert!(!m.escalation_ready("a", "prepared", None));
        // Not opened here and no creation time: nothing to time it from.
        assert!(!m.escalation_ready("b", "prepared", None));
        assert!(!m.escalation_ready("c", "ordinary", Some(f64::NAN)));
        assert!(!m.escalation_ready("c", "ordinary", Some(-1.0)));
        // Opened by another replica: timed from the pod's creation.
        assert!(m.escalation_ready("c", "ordinary", Some(2.0)));
        assert!(!m.escalation_ready("c", "ordinary", Some(9.0)));
        let text = m.encode();
        assert!(
            text.contains("kube_harness_escalation_seconds_count{source=\"prepared\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kube_harness_escalation_seconds_sum{source=\"ordinary\"} 2.0"),
            "{text}"
        );
        // Timed from this replica's open: well under a second here.
        let sum = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("kube_harness_escalation_seconds_sum{source=\"prepared\"} ")
            })
            .and_then(|v| v.parse::<f64>().ok())
            .expect("the prepared sum");
        assert!((0.0..1.0).contains(&sum), "{sum}");
    }

    #[test]
    fn the_memory_of_escalations_is_bounded() {
        let m = Metrics::default();
        for i in 0..(OBSERVED_KEPT * 2 + 10) {
            let uid = format!("pod-{i}");
            m.escalation_opened(&uid);
            if i % 2 == 0 {
                m.escalation_ready(&uid, "ordinary", None);
            }
        }
        let clock = m.escalations.lock().unwrap();
        assert!(
            clock.opened.len() <= OBSERVED_KEPT,
            "{}",
            clock.opened.len()
        );
        assert!(clock.observed.len() <= OBSERVED_KEPT);
        assert_eq!(clock.observed.len(), clock.observed_set.len());
    }

    #[test]
    fn a_tier1_snapshot_zeroes_what_it_no_longer_sees_and_drops_tiers_with_no_pods() {
        let m = Metrics::default();
        m.tier1_pods(&HashMap::from([
            (("rust".to_string(), "serving"), 3),
            (("go".to_string(), "idle"), 1),
        ]));
        m.tier1_idle("rust", 2);
        m.tier1_pods(&HashMap::from([(("rust".to_string(), "idle"), 1)]));
        let text = m.encode();
        for want in [
            "kube_harness_tier1_pods{tier=\"rust\",state=\"serving\"} 0",
            "kube_harness_tier1_pods{tier=\"rust\",state=\"idle\"} 1",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(
            !text.contains("tier=\"go\""),
            "a tier with no pods left:\n{text}"
        );
    }

    #[test]
    fn planted_tier_labels_do_not_grow_the_series_forever() {
        let m = Metrics::default();
        for i in 0..1000 {
            m.tier1_pods(&HashMap::from([((format!("planted-{i}"), "kept"), 1)]));
        }
        m.tier1_pods(&HashMap::new());
        let text = m.encode();
        assert!(!text.contains("planted-"), "{text}");
        assert!(m.tier1_known.lock().unwrap().is_empty());
    }

    #[test]
    fn every_series_the_dashboard_queries_is_in_the_registry() {
        let dashboard = dashboard();
        let problems = dashboard_problems(&dashboard, &exercised().encode());
        assert!(problems.is_empty(), "{problems:#?}");
        let titles: Vec<&str> = dashboard["panels"]
            .as_array()
            .expect("panels")
            .iter()
            .filter_map(|p| p["title"].as_str())
            .collect();
        for want in [
            "Sessions by phase",
            "Session start latency",
            "Warm pool ready per tier",
            "Warm pool misses by reason",
            "Escalation latency",
            "Tier-1 pods alive",
            "Reconcile errors by error",
            "Reconcile duration p99",
        ] {
            assert!(
                titles.iter().any(|t| t.starts_with(want)),
                "no panel {want:?} in {titles:?}"
            );
        }
    }

    #[test]
    fn the_dashboard_check_catches_a_wrong_name_label_or_value() {
        let text = exercised().encode();
        for (from, to) in [
            ("kube_harness_tier1_pods{", "kube_harness_tier1_pod{"),
            ("sum by (tier, state)", "sum by (tier, phase)"),
            ("source=\\\"cold\\\"", "source=\\\"Cold\\\""),
            ("kube_harness_escalation_seconds_bucket{", "kube_harness_escalation_seconds{"),
            ("kube_harness_reconcile_errors_total{namespace=\\\"$namespace\\\"", "kube_harness_reconcile_errors_total{namespace=\\\"$namespace\\\",errors=\\\"api\\\""),
        ] {
            let raw = serde_json::to_string(&dashboard()).expect("JSON");
            assert!(raw.contains(from), "the dashboard no longer has {from:?}");
            let broken: Value = serde_json::from_str(&raw.replacen(from, to, 1)).expect("JSON");
            assert!(
                !dashboard_problems(&broken, &text).is_empty(),
                "{from:?} -> {to:?} was not caught"
            );
        }
    }
}
