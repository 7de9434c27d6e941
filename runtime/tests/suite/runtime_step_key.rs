//! Steps: a caller's step key rides on the command's started, completed and refused events (and
//! those events still match lh.trace.v2), its time limit reaches the tier with that command only,
//! and a gate that refuses keeps the command from reaching its tier.

use async_trait::async_trait;
use kube_harness_classify::{ClassifyOptions, Policy};
use kube_harness_runtime::{
    event::kind, Collector, CommandExecutor, DisposeReport, Emitter, ExecRequest, ExecResult,
    NotRun, StartGate, Step, TierError, Turn, TurnConfig,
};
use kube_harness_workspace::WorkspaceSpec;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SCHEMA: &str = include_str!("../../../protocol/schema/lh.trace.v2.json");

/// Counts what it is asked to run and keeps the time limits it was given; answers exit 0 with
/// "ran" on stdout.
#[derive(Default)]
struct Counting(AtomicUsize, std::sync::Mutex<Vec<Option<Duration>>>);

#[async_trait]
impl CommandExecutor for Counting {
    fn tier(&self) -> u8 {
        0
    }
    async fn execute(&self, req: ExecRequest) -> ExecResult {
        self.0.fetch_add(1, Ordering::SeqCst);
        self.1.lock().unwrap().push(req.timeout);
        ExecResult {
            stdout: b"ran\n".to_vec(),
            ..ExecResult::default()
        }
    }
    async fn dispose(&self) -> Result<DisposeReport, TierError> {
        Ok(DisposeReport::default())
    }
}

/// Refuses every start, counting how often it was asked.
#[derive(Default)]
struct Closed(usize);

#[async_trait]
impl StartGate for Closed {
    async fn before_run(&mut self) -> Result<(), NotRun> {
        self.0 += 1;
        Err(NotRun("the log is down".into()))
    }
}

fn keyed<'a>(script: &'a str, key: &'a str) -> Step<'a> {
    Step {
        step_key: Some(key),
        ..Step::new(script)
    }
}

fn turn(executor: Arc<Counting>, events: Arc<Collector>) -> Turn {
    let spec = WorkspaceSpec::canonical(Path::new("/nonexistent"), Default::default(), vec![]);
    Turn::new(
        TurnConfig {
            workspace: spec,
            classify: ClassifyOptions {
                policy: Policy {
                    deny_commands: vec!["docker".into()],
                    rule: None,
                },
                ..ClassifyOptions::default()
            },
            inline_output_limit: 1024,
        },
        Emitter::new("s", "t", vec![events]),
        executor,
        None,
        None,
        PathBuf::from("/session"),
        BTreeMap::new(),
    )
}

#[tokio::test]
async fn step_keys_ride_on_command_events_and_match_the_schema() {
    let events = Arc::new(Collector::default());
    let executor = Arc::new(Counting::default());
    let t = turn(executor.clone(), events.clone());
    let o = t.exec_step(keyed("echo hi", "k1"), None).await.unwrap();
    assert_eq!(
        (o.outcome.stdout.as_str(), o.outcome.exit_code),
        ("ran\n", 0)
    );
    let refused = t.exec_step(keyed("docker ps", "k2"), None).await.unwrap();
    assert_eq!(refused.outcome.exit_code, 126);
    assert_eq!(
        refused.classification.decision,
        kube_harness_classify::Decision::Refuse,
        "the classification the turn acted on comes back with the outcome"
    );
    t.exec("echo plain").await;
    let all = events.events();
    let keyed: Vec<(&str, Option<&str>)> = all
        .iter()
        .map(|e| (e.kind.as_str(), e.data["stepKey"].as_str()))
        .collect();
    assert_eq!(
        keyed,
        [
            (kind::COMMAND_STARTED, Some("k1")),
            (kind::COMMAND_COMPLETED, Some("k1")),
            (kind::TIER_REFUSED, Some("k2")),
            (kind::COMMAND_STARTED, None),
            (kind::COMMAND_COMPLETED, None),
        ]
    );
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for e in &all {
        let value = serde_json::to_value(e).unwrap();
        assert!(validator.is_valid(&value), "{value}");
    }
    let mut bad = serde_json::to_value(&all[0]).unwrap();
    bad["data"]["stepKey"] = serde_json::json!("");
    assert!(
        !validator.is_valid(&bad),
        "an empty step key is not a step key"
    );
}

#[tokio::test]
async fn a_refusing_gate_keeps_the_command_from_running() {
    let events = Arc::new(Collector::default());
    let executor = Arc::new(Counting::default());
    let t = turn(executor.clone(), events.clone());
    let mut gate = Closed::default();
    let refused = t.exec_step(keyed("echo hi", "k1"), Some(&mut gate)).await;
    let not_run = refused.unwrap_err();
    assert_eq!(not_run, NotRun("the log is down".into()));
    assert_eq!(not_run.to_string(), "command not run: the log is down");
    assert_eq!(gate.0, 1, "asked once, for this command only");
    assert_eq!(
        executor.0.load(Ordering::SeqCst),
        0,
        "the tier was never asked"
    );
    let kinds: Vec<String> = events.events().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [kind::COMMAND_STARTED], "no completion is claimed");
    let usage = t.end().await;
    assert_eq!(usage["tier0"]["commands"], 0, "not counted as run");
}

/// A step's time limit reaches the tier with that command only: the next command gets the
/// tier's default again (no setter on the turn or the tier outlives the command).
#[tokio::test]
async fn a_steps_timeout_reaches_its_tier_with_that_command_only() {
    let events = Arc::new(Collector::default());
    let executor = Arc::new(Counting::default());
    let t = turn(executor.clone(), events);
    let limited = Step {
        timeout: Some(Duration::from_millis(1500)),
        ..Step::new("echo one")
    };
    t.exec_step(limited, None).await.unwrap();
    t.exec("echo two").await;
    assert_eq!(
        *executor.1.lock().unwrap(),
        [Some(Duration::from_millis(1500)), None]
    );
}
