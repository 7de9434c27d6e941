//! The Tier-1 agent as a real process for the tests: the test binary re-runs itself with a
//! filter that selects only its (ignored) `tier1_agent_child` test, which serves the agent on
//! 127.0.0.1 and prints the address. So each agent can be killed with SIGKILL, and has an
//! environment of its own (which the tests fill with secrets scripts must not see).
#![allow(dead_code)]

use kube_harness_classify::{ClassifyOptions, RuntimeToggles};
use kube_harness_runtime::{
    Collector, Emitter, NextTier, Tier0Executor, Turn, TurnConfig, WorkspaceTracker,
};
use kube_harness_sandbox::{Presentation, SandboxConfig};
use kube_harness_service_kit::AuthConfig;
use kube_harness_tier1::{agent_http, reap, Agent, AgentConfig};
use kube_harness_workspace::{self as workspace, ApplyOptions, Snapshot, WorkspaceSpec};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

mod bound;
pub mod keeper_proc;
mod procs;
pub mod stand_in;
pub use bound::PidsBound;
#[allow(unused_imports)]
pub use procs::{process_gone, sleeping};

pub const AGENT_TOKEN: &str = "agent-token-0123456789";

/// The child's entry point (a no-op in an ordinary test run). The binary re-runs itself with
/// `--exact` on this test's full name, which depends on where this module sits in the suite.
#[test]
#[ignore = "entry point of the agent child process"]
fn tier1_agent_child() {
    agent_child_main();
}

/// `tier1_agent_child`'s name as libtest knows it: the module path without the crate's root.
fn child_test() -> String {
    let module = module_path!();
    let within = module.split_once("::").map_or("", |(_, rest)| rest);
    format!("{within}::tier1_agent_child")
}

/// A running agent process.
pub struct AgentProcess {
    pub child: Child,
    pub url: String,
    pub root: PathBuf,
    /// The agent when it is PID 1 of a PID namespace under `child` (`unshare --pid`).
    ns_init: Option<i32>,
}

impl AgentProcess {
    /// SIGKILL, as when a pod dies. An agent that is PID 1 of its own PID namespace is killed
    /// first, which ends every process of that namespace (its `unshare`'s `--kill-child` does
    /// not reach it: the parent-death signal goes with the agent's change of uid).
    pub fn kill(&mut self) {
        if let Some(pid) = self.ns_init.take() {
            // Still the child of our unshare (not yet reaped), so the pid is not reused.
            let parent = format!("PPid:\t{}", self.child.id());
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"));
            if status.is_ok_and(|s| s.lines().any(|l| l == parent)) {
                // SAFETY: kill(2) on a pid checked to be our child's child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The host pid of a pod-like agent ([`spawn_agent_pod_like_with`]): PID 1 of its own PID
    /// namespace.
    pub fn agent_pid(&self) -> i32 {
        self.ns_init.expect("a pod-like agent")
    }

    /// The host path of a harness path (`/session/a` → `<root>/session/a`).
    pub fn host(&self, harness: &str) -> PathBuf {
        self.root.join(harness.trim_start_matches('/'))
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts an agent over `root` with extra environment variables, and waits for its address.
pub fn spawn_agent(root: &Path, env: &[(&str, &str)]) -> AgentProcess {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        child_test().as_str(),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("KH_TEST_AGENT_ROOT", root);
    for (k, v) in env {
        cmd.env(k, v);
    }
    wait_for_address(cmd, root)
}

fn wait_for_address(mut cmd: Command, root: &Path) -> AgentProcess {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints "test tier1_agent_child ... " before it on the same line.
            if let Some((_, addr)) = line.split_once("KH-AGENT-LISTENING ") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    let Ok(addr) = rx.recv_timeout(Duration::from_secs(30)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the agent child did not print its address within 30 s");
    };
    AgentProcess {
        child,
        url: format!("http://{addr}"),
        root: root.to_path_buf(),
        ns_init: None,
    }
}

/// The body of the child process (a no-op when run without the parent's environment).
pub fn agent_child_main() {
    let Some(root) = std::env::var_os("KH_TEST_AGENT_ROOT") else {
        return;
    };
    reap::become_subreaper().unwrap();
    let mut config = AgentConfig::new(PathBuf::from(root));
    config.reap_orphans = true;
    if let Ok(max) = std::env::var("KH_TEST_AGENT_MAX_ARCHIVE") {
        config.max_archive_bytes = max.parse().unwrap();
    }
    if let Ok(ms) = std::env::var("KH_TEST_AGENT_REAP_BOUND_MS") {
        config.reap_bound = Duration::from_millis(ms.parse().unwrap());
    }
    if let Ok(addr) = std::env::var("KH_TEST_AGENT_KEEPER") {
        config.skills_keeper = Some(addr.parse().unwrap());
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let agent = Arc::new(Agent::new(config).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("KH-AGENT-LISTENING {}", listener.local_addr().unwrap());
        agent_http::serve(
            listener,
            agent,
            AuthConfig::with_token(AGENT_TOKEN).unwrap(),
            std::future::pending(),
        )
        .await
        .unwrap();
    });
}

/// A fresh directory laid out as a workspace root (`session/`, `artifacts/`, `persistent/`).
pub fn workspace_root() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for dir in ["session", "artifacts", "persistent"] {
        std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
    }
    tmp
}

pub fn spec_of(root: &Path) -> WorkspaceSpec {
    let mut spec = WorkspaceSpec::canonical(root, RuntimeToggles::default(), Vec::new());
    spec.mounts
        .retain(|m| m.writable || m.backing_path.is_dir());
    spec
}

/// The text of the agent's base64 field `f` (`stdoutB64`, `stderrB64`, `stateB64`) in reply `v`.
pub fn b64_field(v: &serde_json::Value, f: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v[f].as_str().unwrap())
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

/// Merges a change archive into the workspace at `root` (handed off as `base`); returns each
/// applied change as "Kind /harness/path", in order.
pub fn apply_changes(root: &Path, changes: &[u8], base: &Snapshot) -> Vec<String> {
    let report = workspace::apply(&spec_of(root), changes, base, &ApplyOptions::default()).unwrap();
    report
        .applied
        .iter()
        .map(|c| format!("{:?} {}", c.change, c.harness_path.display()))
        .collect()
}

/// A turn on a fresh Tier-0 workspace (the real sandbox) with `next` as its higher tier.
pub struct TurnFixture {
    pub _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub turn: Turn,
    pub events: Arc<Collector>,
}

pub fn turn_with(next: Arc<dyn NextTier>) -> TurnFixture {
    let tmp = workspace_root();
    let root = tmp.path().to_path_buf();
    let events = Arc::new(Collector::default());
    let turn = turn_at(&root, next, events.clone());
    TurnFixture {
        _tmp: tmp,
        root,
        turn,
        events,
    }
}

/// A turn on the Tier-0 workspace at `root` (a later turn of a [`TurnFixture`]'s session), its
/// events into `events`.
pub fn turn_at(root: &Path, next: Arc<dyn NextTier>, events: Arc<Collector>) -> Turn {
    let spec = spec_of(root);
    let tier0 = Tier0Executor::new(SandboxConfig::new(spec.clone(), Presentation::Namespace))
        .expect("the Tier-0 sandbox is available on this machine (root or user namespaces)");
    Turn::new(
        TurnConfig {
            workspace: spec.clone(),
            classify: ClassifyOptions::default(),
            inline_output_limit: 4096,
        },
        Emitter::new("s1", "t1", vec![events]),
        Arc::new(tier0),
        Some(next),
        Some(Arc::new(WorkspaceTracker::new(spec))),
        PathBuf::from("/session"),
        BTreeMap::new(),
    )
}

/// [`sleeping`] after up to two seconds for the kernel to finish killing them.
pub fn sleeping_after_grace(seconds: &str) -> Vec<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let left = sleeping(&[seconds]);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Builds a pod's view by hand (root only): a private mount namespace, a read-only root of
/// read-only system directories, `/session`, `/artifacts`, `/persistent` as three separate
/// volumes (bind mounts of `$POD/pvc/*`, as three emptyDirs), a tmpfs `/tmp`, uid 65532, an
/// empty environment (plus `$AGENT_ENV`), and the agent with `--workspace-root /`, as PID 1 of a
/// PID namespace of its own (the caller's `unshare --pid`) with that namespace's `/proc`. With
/// `$AGENTS` and `$KEEPER`, the skills volume too: `$AGENTS` bound read-only at `/.agents` (as the
/// kubelet mounts it in the agent's container) and the agent told its keeper's address.
const POD_SETUP: &str = r#"
set -e
R="$POD/root"
mkdir -p "$R"
mount -t tmpfs tmpfs "$R"
for d in usr bin lib lib64 lib32 libx32 etc sbin; do
  [ -e "/$d" ] || continue
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$R/$d"
  else mkdir -p "$R/$d"; mount --bind "/$d" "$R/$d"; mount -o remount,bind,ro "$R/$d"; fi
done
mkdir -p "$R/proc" "$R/dev" "$R/tmp" "$R/app"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
for d in session artifacts persistent; do
  mkdir -p "$R/$d" "$POD/pvc/$d"
  chown 65532:65532 "$POD/pvc/$d"
  mount --bind "$POD/pvc/$d" "$R/$d"
done
if [ -n "$AGENTS" ]; then
  mkdir -p "$R/.agents"
  mount --bind "$AGENTS" "$R/.agents"
  mount -o remount,bind,ro "$R/.agents"
fi
cp "$BIN" "$R/app/agent"
mount -o remount,ro "$R"
exec chroot "$R" setpriv --reuid 65532 --regid 65532 --clear-groups \
  env -i TMPDIR=/tmp PATH=/usr/local/bin:/usr/bin:/bin KH_TEST_AGENT_ROOT=/ $AGENT_ENV \
  ${KEEPER:+KH_TEST_AGENT_KEEPER=$KEEPER} \
  /app/agent "$CHILD" --exact --ignored --nocapture --test-threads=1
"#;

/// The agent as in a Tier-1 pod (see `POD_SETUP`); `root` of the result is `$POD/pvc`.
pub fn spawn_agent_pod_like(pod: &Path) -> AgentProcess {
    spawn_pod_like(pod, None, &[], None)
}

/// [`spawn_agent_pod_like`] inside `bound` (when given), with `env` (`NAME=value` words) added
/// to the agent's environment. Killing the result kills the agent's whole PID namespace
/// (`--kill-child`).
pub fn spawn_agent_pod_like_with(
    pod: &Path,
    bound: Option<&PidsBound>,
    env: &[&str],
) -> AgentProcess {
    spawn_pod_like(pod, bound, env, None)
}

/// [`spawn_agent_pod_like`] with the skills volume `agents`, written by the keeper at `keeper`.
pub fn spawn_agent_pod_like_with_skills(
    pod: &Path,
    agents: &Path,
    keeper: std::net::SocketAddr,
) -> AgentProcess {
    spawn_pod_like(pod, None, &[], Some((agents, keeper)))
}

fn spawn_pod_like(
    pod: &Path,
    bound: Option<&PidsBound>,
    env: &[&str],
    skills: Option<(&Path, std::net::SocketAddr)>,
) -> AgentProcess {
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-m",
        "--propagation",
        "private",
        "--pid",
        "--kill-child",
        "bash",
        "-c",
        POD_SETUP,
    ])
    .env("POD", pod)
    .env("CHILD", child_test())
    .env("AGENT_ENV", env.join(" "))
    .env("BIN", std::env::current_exe().unwrap())
    .env_remove("AGENTS")
    .env_remove("KEEPER");
    if let Some((agents, keeper)) = skills {
        cmd.env("AGENTS", agents).env("KEEPER", keeper.to_string());
    }
    if let Some(bound) = bound {
        bound.hold(&mut cmd);
    }
    let mut agent = wait_for_address(cmd, &pod.join("pvc"));
    // The only child of `unshare`: the agent, listening by now.
    let pid = agent.child.id();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    agent.ns_init = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok());
    assert!(agent.ns_init.is_some(), "unshare has its child, the agent");
    agent
}

/// Tries every way to change the skill `/.agents/review/SKILL.md` and its directory, then prints
/// the skill: one line per attempt, `NAME: CHANGED` or `NAME: <the error's last part>`.
pub const CHANGE_SKILLS: &str = r#"try() { if err=$( { eval "$2"; } 2>&1 >/dev/null ); then echo "$1: CHANGED"; else echo "$1: ${err##*: }"; fi; }
f=/.agents/review/SKILL.md
try write "echo x > $f"
try append "echo x >> $f"
try truncate "truncate -s 0 $f"
try chmod "chmod 600 $f"
try delete "rm -f $f"
try rename "mv /.agents/review /.agents/moved"
try create "touch /.agents/new.md"
try mkdir "mkdir /.agents/new"
try link "ln -s /etc/passwd /.agents/review/evil"
cat $f"#;

/// What [`CHANGE_SKILLS`] prints when every attempt is refused by a read-only mount and the skill
/// says `content`.
pub fn all_refused(content: &str) -> String {
    let ops = [
        "write", "append", "truncate", "chmod", "delete", "rename", "create", "mkdir", "link",
    ];
    let mut out: String = ops
        .iter()
        .map(|op| format!("{op}: Read-only file system\n"))
        .collect();
    out.push_str(content);
    out
}

/// A skills directory as Tier-0 shows it: `review/SKILL.md` (mode 0644: writable by its owner,
/// so only a read-only mount stops a write) saying `content`.
pub fn skills_dir(content: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("review")).unwrap();
    std::fs::write(dir.path().join("review/SKILL.md"), content).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.path().join("review/SKILL.md"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    dir
}

/// The skills at `dir` as the worker sends them, with what was packed.
pub fn skills_archive(dir: &Path) -> (Vec<u8>, workspace::PackReport) {
    let mut archive = Vec::new();
    let report = kube_harness_tier1::skills::pack(Some(dir), &mut archive).unwrap();
    (archive, report)
}
