//! Every event the runtime emits, on both tiers, validates against worker/schema/lh.trace.v2.json,
//! and a turn covers every event type the schema names.

use kube_harness_worker::classify::{ClassifyOptions, RuntimeToggles};
use kube_harness_worker::local::DataDir;
use kube_harness_worker::runtime::{
    Collector, Emitter, LocalTier1, Tier0Executor, Turn, TurnConfig, WorkspaceTracker,
};
use kube_harness_worker::sandbox::{Presentation, SandboxConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

const SCHEMA: &str = include_str!("../schema/lh.trace.v2.json");

#[tokio::test]
async fn every_event_of_a_two_tier_turn_matches_the_schema() {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let tmp = tempfile::tempdir().unwrap();
    let data = DataDir::open(tmp.path().join(".little-harness")).unwrap();
    let session = data.session("s1").unwrap();
    std::fs::create_dir_all(session.root.join("persistent/company")).unwrap();
    std::fs::write(session.root.join("persistent/company/kb.md"), "kb\n").unwrap();
    let spec = session.workspace(
        RuntimeToggles::default(),
        vec![PathBuf::from("/persistent/company")],
    );
    let events = Arc::new(Collector::default());
    let mut classify = ClassifyOptions::default();
    classify.policy.deny_commands = vec!["docker".into()];
    let turn = Turn::new(
        TurnConfig {
            workspace: spec.clone(),
            classify,
            inline_output_limit: 1024,
        },
        Emitter::new("s1", "t1", vec![events.clone()]),
        Arc::new(
            Tier0Executor::new(SandboxConfig::new(spec.clone(), Presentation::Namespace)).unwrap(),
        ),
        Some(Arc::new(LocalTier1::default())),
        Some(Arc::new(WorkspaceTracker::new(spec))),
        PathBuf::from("/session"),
        BTreeMap::new(),
    );
    turn.exec("echo a > /session/a.txt; echo b > /session/b.txt; mkdir /session/d")
        .await;
    turn.exec("echo changed > /session/a.txt; rm /session/b.txt; seq 1 2000")
        .await;
    turn.exec("docker ps").await;
    turn.exec("make --version > /dev/null; echo t1 > /session/t1.txt; rm /session/a.txt; echo x > /persistent/company/kb.md").await;
    turn.end().await;

    let all = events.events();
    let mut seen = BTreeSet::new();
    for event in &all {
        let value = serde_json::to_value(event).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{value}\n{}", errors.join("\n"));
        seen.insert(event.kind.clone());
    }
    let declared: BTreeSet<String> = schema["properties"]["type"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(seen, declared, "the turn covers every event type");
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=all.len() as u64).collect::<Vec<_>>(),
        "gapless sequence"
    );
    // And the schema is not vacuous: a malformed event fails it.
    let mut bad = serde_json::to_value(&all[0]).unwrap();
    bad["data"]["tier"] = serde_json::json!("zero");
    assert!(!validator.is_valid(&bad));
}
