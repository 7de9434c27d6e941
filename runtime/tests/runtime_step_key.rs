//! Step keys on command events and the start gate: a caller's step key rides on the command's
//! started, completed and refused events (and those events still match lh.trace.v2), and a gate
//! that refuses keeps the command from reaching its tier.

use async_trait::async_trait;
use kube_harness_classify::{ClassifyOptions, Policy};
use kube_harness_runtime::{
    event::kind, Collector, CommandExecutor, DisposeReport, Emitter, ExecRequest, ExecResult,
    StartGate, Turn, TurnConfig,
};
use kube_harness_workspace::WorkspaceSpec;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const SCHEMA: &str = include_str!("../../protocol/schema/lh.trace.v2.json");

/// Counts what it is asked to run; answers exit 0 with "ran" on stdout.
#[derive(Default)]
struct Counting(AtomicUsize);

#[async_trait]
impl CommandExecutor for Counting {
    fn tier(&self) -> u8 {
        0
    }
    async fn execute(&self, _: ExecRequest) -> ExecResult {
        self.0.fetch_add(1, Ordering::SeqCst);
        ExecResult {
            stdout: b"ran\n".to_vec(),
            ..ExecResult::default()
        }
    }
    async fn dispose(&self) -> Result<DisposeReport, String> {
        Ok(DisposeReport::default())
    }
}

/// Refuses every start.
struct Closed;

#[async_trait]
impl StartGate for Closed {
    async fn before_run(&self) -> Result<(), String> {
        Err("the log is down".into())
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
    let o = t.exec_step("echo hi", Some("k1")).await;
    assert_eq!((o.stdout.as_str(), o.exit_code), ("ran\n", 0));
    t.exec_step("docker ps", Some("k2")).await;
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
    let t = turn(executor.clone(), events.clone()).with_start_gate(Arc::new(Closed));
    let o = t.exec_step("echo hi", Some("k1")).await;
    assert_eq!(o.exit_code, 126);
    assert!(
        o.stderr.contains("command not run: the log is down"),
        "{}",
        o.stderr
    );
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
