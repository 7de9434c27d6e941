//! Classifier throughput and latency on one thread, over a mixed corpus of agent commands (every
//! script under 200 bytes from tests/corpus/classify.txt), with a bare tree-sitter parse of the same
//! scripts measured in the same run as the baseline; then the bare-parse cost of pipelines by length
//! against a single command.
//!
//! Run: `cargo bench -p kube-harness-worker --bench classify` (add `-- --seconds 5` for longer runs;
//! `-- --rounds N [--parse-only]` only runs the realistic scripts N times, for callgrind).

use kube_harness_classify::{classify, ClassifyOptions, Decision};
use std::hint::black_box;
use std::time::{Duration, Instant};

const CORPUS: &str = include_str!("../tests/suite/corpus/classify.txt");

/// Scripts under 200 bytes; `section` keeps only one `## …` section of the corpus.
fn scripts(section: Option<&str>) -> Vec<String> {
    let mut current = "";
    CORPUS
        .lines()
        .filter(|l| {
            if let Some(name) = l.strip_prefix("## ") {
                current = name;
            }
            section.is_none_or(|s| s == current)
        })
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.splitn(4, '|').nth(3))
        .map(|s| s.strip_prefix(' ').unwrap_or(s).replace('⏎', "\n"))
        .filter(|s| s.len() < 200)
        .collect()
}

/// CPU time of this thread: throughput per core, unaffected by other processes on a busy machine.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `f` over the scripts round-robin for `budget` twice: untimed, for calls per CPU-second of
/// this thread (so other processes on a busy machine do not count), then timing each call by the
/// thread's CPU time for the latency samples. The first pass does not include the two
/// `clock_gettime` system calls per call that the second needs (their cost is printed at the start).
fn measure(scripts: &[String], budget: Duration, mut f: impl FnMut(&str)) -> (f64, Vec<Duration>) {
    for s in scripts.iter().take(2000) {
        f(s); // warm-up: thread-local parser, matrix, caches
    }
    let cpu_start = thread_cpu_time();
    let start = Instant::now();
    let mut calls = 0;
    while start.elapsed() < budget {
        for s in scripts {
            f(s);
        }
        calls += scripts.len();
    }
    let rate = calls as f64 / (thread_cpu_time() - cpu_start).as_secs_f64();
    let mut samples = Vec::with_capacity(1 << 20);
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed() < budget {
        let s = &scripts[i % scripts.len()];
        let t = thread_cpu_time();
        f(s);
        samples.push(thread_cpu_time() - t);
        i += 1;
    }
    (rate, samples)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize]
}

fn main() {
    let seconds = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    if let Some(rounds) = std::env::args()
        .skip_while(|a| a != "--rounds")
        .nth(1)
        .and_then(|s| s.parse().ok())
    {
        return rounds_only(rounds, std::env::args().any(|a| a == "--parse-only"));
    }
    let budget = Duration::from_secs_f64(seconds);
    println!("rates are per CPU-second of one thread; latencies are per-call thread CPU time");
    let clock_start = thread_cpu_time();
    for _ in 0..100_000 {
        black_box(thread_cpu_time());
    }
    println!(
        "one thread CPU-time reading costs {:.2} µs (included once in each latency sample)",
        (thread_cpu_time() - clock_start).as_secs_f64() * 1e6 / 100_000.0
    );
    run("whole corpus", &scripts(None), budget);
    run(
        "realistic agent commands",
        &scripts(Some("realistic agent commands")),
        budget,
    );
    pipelines(budget / 4);
}

/// Bare-parse cost by pipeline length, against a single command in the same run: with the
/// vendored grammar it grows with the stages; upstream's GLR pipeline rule made `a | b | c` cost
/// twenty times `a | b` (docs/classifier.md).
fn pipelines(budget: Duration) {
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&kube_harness_bash_grammar::LANGUAGE.into())
        .expect("grammar");
    println!("\n== bare parse by pipeline length (per-call CPU time, median)");
    let mut median = |script: &str| {
        let (_, mut samples) = measure(&[script.to_string()], budget, |s| {
            black_box(parser.parse(s, None));
        });
        samples.sort_unstable();
        percentile(&samples, 0.5)
    };
    let single = median("a");
    for stages in [1, 2, 3, 5, 10] {
        let script = ["a"; 10][..stages].join(" | ");
        let t = median(&script);
        println!(
            "{:>2} stage(s) {:<40} {:>7.1} µs  {:>5.1}x one command",
            stages,
            format!("`{script}`"),
            t.as_secs_f64() * 1e6,
            t.as_secs_f64() / single.as_secs_f64()
        );
    }
}

/// Classifies (or only parses) each realistic script `rounds` times, timing nothing: for counting
/// instructions, which load does not change, under
/// `valgrind --tool=callgrind target/release/deps/classify-… --rounds 20 [--parse-only]`.
fn rounds_only(rounds: usize, parse_only: bool) {
    let scripts = scripts(Some("realistic agent commands"));
    let options = ClassifyOptions::default();
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&kube_harness_bash_grammar::LANGUAGE.into())
        .expect("grammar");
    for _ in 0..rounds {
        for s in &scripts {
            if parse_only {
                black_box(parser.parse(s, None));
            } else {
                black_box(classify(s, &options));
            }
        }
    }
    println!("{} calls", rounds * scripts.len());
}

fn run(label: &str, scripts: &[String], budget: Duration) {
    let options = ClassifyOptions::default();
    let bytes: usize = scripts.iter().map(String::len).sum();
    let escalating = scripts
        .iter()
        .filter(|s| classify(s, &options).decision == Decision::Escalate)
        .count();
    println!(
        "\n== {label}: {} scripts under 200 bytes, mean {} bytes, {escalating} escalate",
        scripts.len(),
        bytes / scripts.len(),
    );
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&kube_harness_bash_grammar::LANGUAGE.into())
        .expect("grammar");
    let (parse_rate, _) = measure(scripts, budget, |s| {
        black_box(parser.parse(s, None));
    });
    let (rate, mut samples) = measure(scripts, budget, |s| {
        black_box(classify(s, &options));
    });
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    let p50 = percentile(&samples, 0.50);
    let p99 = percentile(&samples, 0.99);
    println!("baseline  tree-sitter parse only : {parse_rate:>9.0} scripts/s");
    println!(
        "classify  full decision          : {rate:>9.0} scripts/s  mean {:>5.1} µs  p50 {:>6.1} µs  p99 {:>6.1} µs  max {:>7.1} µs  ({} samples)",
        us(mean),
        us(p50),
        us(p99),
        us(*samples.last().unwrap()),
        samples.len()
    );
    println!(
        "ratio     classify / parse time  : {:.2}x",
        parse_rate / rate
    );
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!(
        "goals     >= 50000 scripts/s: {}; p99 < 100 µs: {}",
        verdict(rate >= 50_000.0),
        verdict(p99 < Duration::from_micros(100))
    );
}
