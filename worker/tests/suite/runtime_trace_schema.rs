//! Every event the runtime emits, on both tiers, validates against protocol/schema/lh.trace.v2.json,
//! and a turn covers every event type the schema names.

use super::runtime_support::{fixture, Setup};
use std::collections::BTreeSet;

const SCHEMA: &str = include_str!("../../../protocol/schema/lh.trace.v2.json");

#[tokio::test]
async fn every_event_of_a_two_tier_turn_matches_the_schema() {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let f = fixture(Setup {
        deny: vec!["docker"],
        read_only: vec!["/persistent/company"],
        tier1: true,
        inline_output_limit: Some(1024),
    });
    let (turn, events) = (f.turn, f.events.clone());
    turn.exec("echo a > /session/a.txt; echo b > /session/b.txt; mkdir /session/d")
        .await;
    turn.exec("echo changed > /session/a.txt; rm /session/b.txt; seq 1 2000")
        .await;
    // More files than the emitter lists for one command (10,000): a harness.file.truncated.
    turn.exec("mkdir /session/many && cd /session/many && seq 1 10005 | xargs touch")
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
