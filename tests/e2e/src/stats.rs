//! Percentiles and the one-line summaries the cluster benches print.

use std::time::Duration;

/// An integer from the environment, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Prints `label n= p50 p95` and returns (p50, p95).
pub fn summary(label: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p95) = (percentile(&samples, 0.5), percentile(&samples, 0.95));
    println!(
        "{label:<44} n={:<3} p50 {:>9.1} ms   p95 {:>9.1} ms",
        samples.len(),
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );
    (p50, p95)
}
