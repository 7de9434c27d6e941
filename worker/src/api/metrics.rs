//! The worker's own `GET /metrics` (Prometheus text, OpenMetrics format): commands by tier and
//! their wall time, tier refusals, turns, busy and the current tier, output bytes streamed and
//! kept in `/artifacts`, and the session log's failures as the worker met them.
//!
//! Behind the bearer, like `/v1/status` (docs/worker-api.md "Metrics"): the figures say what the
//! session's commands did (how many, when and how long each ran, what was refused, how much they
//! printed), and the worker port admits the session's `spec.access` peers, who need not hold
//! the session's token. `/healthz` and `/readyz` reveal nothing of that and stay open.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabel {
    tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabel {
    /// `stdout` or `stderr`.
    stream: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LogLabel {
    /// `start`: a command's start was not recorded, so it was refused unrun; `queued`: events
    /// after a command (or of an upload) could not be appended and wait in the queue.
    failure: &'static str,
}

/// Which session log failure.
#[derive(Clone, Copy, Debug)]
pub enum LogFailure {
    Start,
    Queued,
}

pub struct WorkerMetrics {
    registry: Registry,
    commands: Family<TierLabel, Counter>,
    command_seconds: Family<TierLabel, Histogram>,
    refusals: Counter,
    turns: Counter,
    busy: Gauge,
    tier: Gauge,
    streamed: Family<StreamLabel, Counter>,
    kept: Family<StreamLabel, Counter>,
    log_failures: Family<LogLabel, Counter>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kube_harness_worker");
        let commands = Family::<TierLabel, Counter>::default();
        // 1 ms .. 524 s: a Tier-0 command takes milliseconds, a build on Tier-1 minutes.
        let command_seconds = Family::<TierLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 20))
        });
        let refusals = Counter::default();
        let turns = Counter::default();
        let busy = Gauge::default();
        let tier = Gauge::default();
        let streamed = Family::<StreamLabel, Counter>::default();
        let kept = Family::<StreamLabel, Counter>::default();
        let log_failures = Family::<LogLabel, Counter>::default();
        registry.register(
            "commands",
            "Commands run (completed), by the tier that ran them",
            commands.clone(),
        );
        registry.register(
            "command_seconds",
            "Wall time of each command (its command.completed durationMs), by tier",
            command_seconds.clone(),
        );
        registry.register(
            "refusals",
            "Commands refused a higher tier (tier.refused events)",
            refusals.clone(),
        );
        registry.register("turns", "Turns ended", turns.clone());
        registry.register(
            "busy",
            "1 while a command, upload or end-turn holds the session",
            busy.clone(),
        );
        registry.register(
            "tier",
            "The tier the open turn runs on (0 until it escalates)",
            tier.clone(),
        );
        registry.register(
            "streamed_bytes",
            "Output bytes sent to streamed exec clients, by stream",
            streamed.clone(),
        );
        registry.register(
            "kept_bytes",
            "Output bytes a streamed exec kept in /artifacts/trace past the result's cap, by stream",
            kept.clone(),
        );
        registry.register(
            "session_log_failures",
            "Session log appends that failed: start (the command was refused unrun) or queued (events wait for the next flush)",
            log_failures.clone(),
        );
        // Series that exist from the start, at 0: a scrape before the first command shows them.
        drop(commands.get_or_create(&TierLabel { tier: "0".into() }));
        for failure in ["start", "queued"] {
            drop(log_failures.get_or_create(&LogLabel { failure }));
        }
        WorkerMetrics {
            registry,
            commands,
            command_seconds,
            refusals,
            turns,
            busy,
            tier,
            streamed,
            kept,
            log_failures,
        }
    }
}

impl WorkerMetrics {
    /// A command completed on `tier` after `duration_ms`.
    pub fn command(&self, tier: u8, duration_ms: u64) {
        let label = TierLabel {
            tier: tier.to_string(),
        };
        self.commands.get_or_create(&label).inc();
        self.command_seconds
            .get_or_create(&label)
            .observe(duration_ms as f64 / 1000.0);
    }

    pub fn refused(&self) {
        self.refusals.inc();
    }

    pub fn turn_ended(&self) {
        self.turns.inc();
    }

    /// Output sent to a streamed exec's client.
    pub fn streamed(&self, stdout: bool, bytes: usize) {
        self.streamed
            .get_or_create(&stream(stdout))
            .inc_by(bytes as u64);
    }

    /// Output a streamed exec kept in a file.
    pub fn kept(&self, stdout: bool, bytes: u64) {
        self.kept.get_or_create(&stream(stdout)).inc_by(bytes);
    }

    pub fn log_failed(&self, failure: LogFailure) {
        let failure = match failure {
            LogFailure::Start => "start",
            LogFailure::Queued => "queued",
        };
        self.log_failures.get_or_create(&LogLabel { failure }).inc();
    }

    /// The exposition, with the gauges read now.
    pub fn encode(&self, busy: bool, tier: u8) -> String {
        self.busy.set(i64::from(busy));
        self.tier.set(i64::from(tier));
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

fn stream(stdout: bool) -> StreamLabel {
    StreamLabel {
        stream: if stdout { "stdout" } else { "stderr" },
    }
}
