//! The sandbox alone against a bare spawn: `Tier0Sandbox::run` of a script (both presentations)
//! and `bash -c` started the way tokio does it (in the same directory), interleaved, with the load
//! average. What the
//! worker's runtime bench (`cargo bench -p kube-harness-worker --bench runtime`) adds on top is
//! classification, file tracking and events.
//!
//! Run: `cargo run --release -p kube-harness-sandbox --example spawn_cost -- [ITERATIONS]` (as
//! root, or where user namespaces are allowed).

use kube_harness_classify::RuntimeToggles;
use kube_harness_sandbox::{Invocation, Presentation, SandboxConfig, Tier0Sandbox};
use kube_harness_workspace::WorkspaceSpec;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn p50(v: &mut [Duration]) -> f64 {
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    for d in ["session", "artifacts", "persistent", ".agents"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    let spec = WorkspaceSpec::canonical(dir.path(), RuntimeToggles::default(), vec![]);
    let ns = Tier0Sandbox::new(SandboxConfig::new(spec, Presentation::Namespace)).unwrap();
    println!(
        "{n} iterations each, interleaved; load average {}",
        loadavg()
    );
    for script in ["true", "ls | wc -l"] {
        let inv = Invocation {
            script: script.into(),
            cwd: "/session".into(),
            env: BTreeMap::new(),
            output: None,
        };
        let (mut bare, mut sand) = (Vec::new(), Vec::new());
        for i in 0..n + 20 {
            let t = Instant::now();
            let o = tokio::process::Command::new("bash")
                .args(["-c", script])
                .current_dir(dir.path().join("session"))
                .output()
                .await
                .unwrap();
            let b = t.elapsed();
            assert!(o.status.success());
            let t = Instant::now();
            let o = ns.run(&inv).await;
            let s = t.elapsed();
            assert_eq!(o.exit_code, 0, "{}", String::from_utf8_lossy(&o.stderr));
            if i >= 20 {
                bare.push(b);
                sand.push(s);
            }
        }
        let (b, s) = (p50(&mut bare), p50(&mut sand));
        println!(
            "{script:<12} bare p50 {b:.3} ms, sandbox p50 {s:.3} ms, overhead {:+.3} ms",
            s - b
        );
    }
    // Where the time goes: from the call to bash's first line (`$EPOCHREALTIME`), and from
    // there to the result.
    let probe = "echo $EPOCHREALTIME";
    let inv = Invocation {
        script: probe.into(),
        cwd: "/session".into(),
        env: BTreeMap::new(),
        output: None,
    };
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let started = |out: &[u8]| -> f64 {
        String::from_utf8_lossy(out)
            .trim()
            .replace(',', ".")
            .parse()
            .unwrap()
    };
    let (mut bs, mut be, mut ss, mut se) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let ms = |s: f64| Duration::from_secs_f64(s.max(0.0));
    for i in 0..n + 20 {
        let t0 = now();
        let o = tokio::process::Command::new("bash")
            .args(["-c", probe])
            .output()
            .await
            .unwrap();
        let t1 = now();
        let b = started(&o.stdout);
        let t2 = now();
        let o = ns.run(&inv).await;
        let t3 = now();
        let s = started(&o.stdout);
        if i >= 20 {
            bs.push(ms(b - t0));
            be.push(ms(t1 - b));
            ss.push(ms(s - t2));
            se.push(ms(t3 - s));
        }
    }
    println!(
        "to bash's first line: bare p50 {:.3} ms, sandbox {:.3} ms; from there to the result: bare {:.3} ms, sandbox {:.3} ms",
        p50(&mut bs),
        p50(&mut ss),
        p50(&mut be),
        p50(&mut se)
    );
    println!("load average at the end {}", loadavg());
}
