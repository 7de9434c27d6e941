//! The chart's dashboard (charts/kube-harness/dashboards/kube-harness.json) queries only series
//! the registry has, with labels and values they have.

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
        (
            "kube_harness_escalation_seconds_bucket{",
            "kube_harness_escalation_seconds{",
        ),
        (
            "kube_harness_reconcile_errors_total{namespace=\\\"$namespace\\\"",
            "kube_harness_reconcile_errors_total{namespace=\\\"$namespace\\\",errors=\\\"api\\\"",
        ),
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
