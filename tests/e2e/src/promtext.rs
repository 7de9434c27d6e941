//! The Prometheus text exposition, read: the API server's `/metrics` and the operator's, before and
//! after a bench phase, and quantiles of a histogram's difference between two reads.

use std::collections::BTreeMap;

/// One sample line: `name{labels} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).map(String::as_str).unwrap_or("")
    }
}

/// Every sample of `text`; comment lines and lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after)?;
        labels = parsed;
        rest = tail;
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// `k="v",k2="v2"}` → the labels and what follows the closing brace.
fn parse_labels(mut s: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(tail) = s.strip_prefix('}') {
            return Some((labels, tail));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_string();
        s = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        labels.insert(key, value);
        s = &s[end + 1..];
    }
}

/// Sum of the samples named `name` whose labels include every `(key, value)` of `filter`.
pub fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && filter.iter().all(|(k, v)| s.label(k) == *v))
        .map(|s| s.value)
        .sum()
}

/// Samples named `name` summed by the values of `keys` (in that order).
pub fn sum_by(samples: &[Sample], name: &str, keys: &[&str]) -> BTreeMap<Vec<String>, f64> {
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == name) {
        let key = keys.iter().map(|k| s.label(k).to_string()).collect();
        *out.entry(key).or_insert(0.0) += s.value;
    }
    out
}

/// `after - before` per key (keys only in `after` count from zero).
pub fn delta(
    before: &BTreeMap<Vec<String>, f64>,
    after: &BTreeMap<Vec<String>, f64>,
) -> BTreeMap<Vec<String>, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// The cumulative buckets `(le, count)` of histogram `name` (its `_bucket` samples) whose labels
/// include `filter`, sorted by `le`.
pub fn buckets(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket");
    let mut out: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.name == bucket && filter.iter().all(|(k, v)| s.label(k) == *v))
        .filter_map(|s| {
            let le = match s.label("le") {
                "+Inf" => f64::INFINITY,
                le => le.parse().ok()?,
            };
            Some((le, s.value))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The buckets of `after` minus those of `before` (same bounds): the observations in between.
pub fn bucket_delta(before: &[(f64, f64)], after: &[(f64, f64)]) -> Vec<(f64, f64)> {
    after
        .iter()
        .map(|(le, n)| {
            let was = before
                .iter()
                .find(|(b, _)| b == le)
                .map_or(0.0, |(_, c)| *c);
            (*le, n - was)
        })
        .collect()
}

/// The `q` quantile (0..1) of cumulative buckets, interpolated linearly inside the bucket it falls
/// in, as Prometheus's `histogram_quantile` does; the highest finite bound when it falls in
/// `+Inf`. `None` without observations.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let in_bucket = count - lower.1;
            if in_bucket <= 0.0 {
                return Some(le);
            }
            return Some(lower.0 + (le - lower.0) * (rank - lower.1) / in_bucket);
        }
        lower = (le, count);
    }
    Some(lower.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP apiserver_request_total Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",subresource="",verb="GET",version="v1"} 10
apiserver_request_total{code="404",component="apiserver",group="",resource="pods",subresource="",verb="GET",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1"} 5
x_bucket{le="0.001",controller="a"} 1
x_bucket{le="0.002",controller="a"} 3
x_bucket{le="+Inf",controller="a"} 4
x_bucket{le="0.001",controller="b"} 100
weird{msg="a \"quoted\", value}"} 1.5e3
"#;

    #[test]
    fn samples_labels_and_values_parse() {
        let s = parse(TEXT);
        assert_eq!(s.len(), 8);
        assert_eq!(s[0].label("verb"), "GET");
        assert_eq!(s[0].value, 10.0);
        assert_eq!(s[7].label("msg"), "a \"quoted\", value}");
        assert_eq!(s[7].value, 1500.0);
        assert!(parse("garbage{ 1\nname{a=\"x\"} notanumber\n").is_empty());
    }

    #[test]
    fn sums_group_by_labels_and_deltas_drop_unchanged_keys() {
        let s = parse(TEXT);
        assert_eq!(sum(&s, "apiserver_request_total", &[("verb", "GET")]), 12.0);
        let by = sum_by(
            &s,
            "apiserver_request_total",
            &["verb", "resource", "subresource"],
        );
        assert_eq!(by[&vec!["GET".into(), "pods".into(), String::new()]], 12.0);
        let mut later = by.clone();
        *later
            .get_mut(&vec!["POST".into(), "pods".into(), "binding".into()])
            .unwrap() += 7.0;
        let d = delta(&by, &later);
        assert_eq!(d.len(), 1);
        assert_eq!(d.values().next(), Some(&7.0));
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_of_the_difference() {
        let s = parse(TEXT);
        let a = buckets(&s, "x", &[("controller", "a")]);
        assert_eq!(a, vec![(0.001, 1.0), (0.002, 3.0), (f64::INFINITY, 4.0)]);
        // rank 2 of 4 falls halfway into (0.001, 0.002].
        assert!((quantile(&a, 0.5).unwrap() - 0.0015).abs() < 1e-12);
        // In +Inf: the highest finite bound.
        assert_eq!(quantile(&a, 1.0), Some(0.002));
        let before = vec![(0.001, 1.0), (0.002, 1.0), (f64::INFINITY, 1.0)];
        let d = bucket_delta(&before, &a);
        assert_eq!(d, vec![(0.001, 0.0), (0.002, 2.0), (f64::INFINITY, 3.0)]);
        assert!((quantile(&d, 0.5).unwrap() - 0.00175).abs() < 1e-12);
        assert_eq!(quantile(&bucket_delta(&a, &a), 0.5), None);
    }
}
