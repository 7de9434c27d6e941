//! Attacks on the agent's reaper (docs/security-model.md §12): what a Tier-1 command leaves
//! running must not reach the session's next turn on a kept pod. The agent runs as in a pod: PID
//! 1 of its own PID namespace, uid 65532, `--workspace-root /` (`spawn_agent_pod_like_with`),
//! inside a pids cgroup with a low limit that bounds whatever the attack starts, also when the
//! reaper fails. Root only (the pod-like root, the cgroup, `nsenter`).

use super::tier1_support::{
    b64_field, spawn_agent_pod_like_with, spec_of, workspace_root, AgentProcess, PidsBound,
    AGENT_TOKEN,
};
use kube_harness_workspace::{self as workspace, PackOptions};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn not_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() != 0 }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// A workspace archive holding `/session/<name>`.
fn archive_with(name: &str) -> Vec<u8> {
    let src = workspace_root();
    std::fs::write(src.path().join("session").join(name), "x\n").unwrap();
    let mut archive = Vec::new();
    workspace::pack(&spec_of(src.path()), &PackOptions::default(), &mut archive).unwrap();
    archive
}

async fn bind(agent: &AgentProcess, archive: Vec<u8>, replace: bool) -> (u16, Value) {
    let query = if replace { "?replace=true" } else { "" };
    let r = http()
        .put(format!("{}/v1/workspace{query}", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .body(archive)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Runs `script`; returns (stdout, stderr, exit code).
async fn exec(agent: &AgentProcess, script: &str) -> (String, String, i64) {
    let r = http()
        .post(format!("{}/v1/exec", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .json(&json!({"script": script, "cwd": "/session"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    (
        b64_field(&v, "stdoutB64"),
        b64_field(&v, "stderrB64"),
        v["exitCode"].as_i64().unwrap(),
    )
}

/// Plants, from a turn's command, what outlives a reaper that kills generation by generation:
/// a chain of 250 processes, each in a session of its own and waiting for the next, whose last
/// writes into `/session` every 0.2 s; and a loop, in a session of its own, that forks without
/// pause (so a fork is under way whenever it is killed). Prints `planted` once the chain is whole.
const ATTACK: &str = r#"
cat > /tmp/chain <<'CHAIN'
n=$1
if [ "$n" -gt 0 ]; then
  setsid sh /tmp/chain $((n - 1)) &
  wait
else
  : > /tmp/bottom
  while :; do echo chain >> /session/leftover; sleep 0.2; done
fi
CHAIN
setsid sh /tmp/chain 250 </dev/null >/dev/null 2>&1 &
nice -n 19 setsid sh -c 'while :; do /bin/true; done' </dev/null >/dev/null 2>&1 &
for i in $(seq 600); do [ -e /tmp/bottom ] && break; sleep 0.05; done
[ -e /tmp/bottom ] && echo planted
"#;

/// The attack above in one turn; then the session's next turn on the same (kept) pod binds its
/// workspace: not one process of the attack is left in the pod, and nothing writes into the new
/// workspace. The attack ran whole within its bound (it never had to refuse a fork).
#[tokio::test]
async fn a_deep_setsid_chain_and_a_fork_loop_do_not_survive_into_the_next_turn() {
    if not_root() {
        eprintln!("skipped: needs root (pod-like root, pids cgroup)");
        return;
    }
    let bound = PidsBound::new("reaper-chain", 800);
    let pod = tempfile::tempdir().unwrap();
    let agent = spawn_agent_pod_like_with(pod.path(), Some(&bound), &[]);
    assert_eq!(bind(&agent, archive_with("a.txt"), false).await.0, 200);
    let (out, err, code) = exec(&agent, ATTACK).await;
    assert_eq!((out.as_str(), code), ("planted\n", 0), "{err}");

    // The session's next turn on the kept pod.
    let (status, v) = bind(&agent, archive_with("b.txt"), true).await;
    assert_eq!(status, 200, "{v}");
    let keep = [agent.pid() as i32, agent.agent_pid()];
    let deadline = Instant::now() + Duration::from_secs(3);
    let left = loop {
        let left: Vec<i32> = bound
            .procs()
            .into_iter()
            .filter(|p| !keep.contains(p))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let names: Vec<String> = left
        .iter()
        .take(5)
        .map(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default())
        .collect();
    assert!(
        left.is_empty(),
        "{} processes of the last turn survived into the next: {names:?}",
        left.len()
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (out, err, code) = exec(&agent, "ls -A /session").await;
    assert_eq!((out.as_str(), code), ("b.txt\n", 0), "{err}");
    assert_eq!(bound.refused(), 0, "the attack reached its pids bound");
}

/// Fail closed: a process in the pod the agent cannot end (here one of another uid, root,
/// planted into the agent's PID namespace from outside with `nsenter`) is still there when the
/// reaper's time bound runs out. The command's answer says so; from then on the agent refuses
/// every later bind (409 `broken`) and its readiness fails (503), so neither a new turn nor the
/// operator's keep uses the pod again. The current turn still ends: its changes are served.
#[tokio::test]
async fn leftovers_the_agent_cannot_end_make_it_refuse_every_later_turn() {
    if not_root() {
        eprintln!("skipped: needs root (pod-like root, pids cgroup, nsenter)");
        return;
    }
    let bound = PidsBound::new("reaper-stuck", 200);
    let pod = tempfile::tempdir().unwrap();
    let agent = spawn_agent_pod_like_with(
        pod.path(),
        Some(&bound),
        &["KH_TEST_AGENT_REAP_BOUND_MS=1000"],
    );
    assert_eq!(bind(&agent, archive_with("a.txt"), false).await.0, 200);
    let mut planted = std::process::Command::new("nsenter");
    planted.args([
        "--target",
        &agent.agent_pid().to_string(),
        "--pid",
        "--",
        "sleep",
        "3121",
    ]);
    bound.hold(&mut planted);
    let mut planted = planted.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // The names of the pod's processes, read with builtins only.
        let script = "for p in /proc/[0-9]*/comm; do read -r c < $p && echo $c; done";
        let (out, _, _) = exec(&agent, script).await;
        if out.lines().any(|c| c == "sleep") {
            break;
        }
        assert!(Instant::now() < deadline, "the sleep never showed: {out}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let started = Instant::now();
    let (out, err, code) = exec(&agent, "echo hi").await;
    let took = started.elapsed();
    assert_eq!((out.as_str(), code), ("hi\n", 0), "{err}");
    assert!(
        err.contains("kube-harness: ") && err.contains("serves no later turn"),
        "{err}"
    );
    assert!(
        (Duration::from_secs(1)..Duration::from_secs(15)).contains(&took),
        "{took:?}"
    );
    let r = http()
        .get(format!("{}/readyz", agent.url))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (503, Some("broken")),
        "{v}"
    );
    let (status, v) = bind(&agent, archive_with("b.txt"), true).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("broken")),
        "{v}"
    );
    let r = http()
        .get(format!("{}/v1/changes", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let _ = planted.kill();
    let _ = planted.wait();
}
