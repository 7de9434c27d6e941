//! Runs the classifier corpus (tests/corpus/classify.txt): every case's decision and its exact set
//! of reason kinds. All mismatches are reported together.

use kube_harness_classify::{classify, ClassifyOptions, Decision};
use std::collections::BTreeSet;

const CORPUS: &str = include_str!("corpus/classify.txt");

struct Case {
    line: usize,
    decision: Decision,
    kinds: BTreeSet<String>,
    options: ClassifyOptions,
    script: String,
}

fn parse_case(line_no: usize, line: &str) -> Case {
    // The first three fields never contain `|`; the script is everything after the third one.
    let mut fields = line.splitn(4, '|');
    let mut next = || {
        fields
            .next()
            .unwrap_or_else(|| panic!("line {line_no}: needs 4 fields"))
    };
    let decision = match next().trim() {
        "tier0" => Decision::Tier0,
        "escalate" => Decision::Escalate,
        "refuse" => Decision::Refuse,
        other => panic!("line {line_no}: unknown decision {other:?}"),
    };
    let kinds = next().split(',').map(|k| k.trim().to_string()).collect();
    let mut options = ClassifyOptions::default();
    for opt in next().split_whitespace() {
        let (key, value) = opt
            .split_once('=')
            .unwrap_or_else(|| panic!("line {line_no}: bad option {opt}"));
        let flag = || {
            value
                .parse::<bool>()
                .unwrap_or_else(|_| panic!("line {line_no}: {opt}"))
        };
        match key {
            "python" => options.runtime.python = flag(),
            "javascript" => options.runtime.javascript = flag(),
            "network" => options.runtime.network = flag(),
            "deny" => options.policy.deny_commands.push(value.to_string()),
            "matrix" => options.matrix = Some(value.to_string()),
            _ => panic!("line {line_no}: unknown option {key}"),
        }
    }
    let raw = next();
    let script = raw.strip_prefix(' ').unwrap_or(raw).replace('⏎', "\n");
    Case {
        line: line_no,
        decision,
        kinds,
        options,
        script,
    }
}

fn cases() -> Vec<Case> {
    CORPUS
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(i, l)| parse_case(i + 1, l))
        .collect()
}

#[test]
fn corpus_has_at_least_400_cases_of_every_decision() {
    let cases = cases();
    assert!(cases.len() >= 400, "only {} cases", cases.len());
    for decision in [Decision::Tier0, Decision::Escalate, Decision::Refuse] {
        assert!(cases.iter().any(|c| c.decision == decision));
    }
}

#[test]
fn every_corpus_case_classifies_as_expected() {
    let mut failures = Vec::new();
    let cases = cases();
    for case in &cases {
        let got = classify(&case.script, &case.options);
        let kinds: BTreeSet<String> = got.kinds().iter().map(|k| k.to_string()).collect();
        if got.decision != case.decision || kinds != case.kinds {
            failures.push(format!(
                "line {}: {:?}\n   expected {:?} {:?}\n   got      {:?} {}",
                case.line,
                case.script,
                case.decision,
                case.kinds,
                got.decision,
                serde_json::to_string(&got.reasons).unwrap()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
