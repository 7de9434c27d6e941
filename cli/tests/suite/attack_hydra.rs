//! Issue 29, item 1: a process tree that outlives its command. The hydra is a chain whose tail
//! is hungry: every process forks one child, leaves its session (or, where `setsid` is refused,
//! its process group) and idles, rewriting `/session/heartbeat` now and then; the tail retries
//! its fork until the process limit lets it through. Whoever kills the chain from the top (the
//! only process that is a direct child of its killer) frees one slot, which the tail takes at
//! once: killed one generation at a time, the chain never gets shorter. The rewrites matter: 256
//! processes truncating one file wait on its inode lock, where SIGKILL takes effect only once
//! they have it (with appends instead, the old supervisor won).
//!
//! On main at fce0842 (by hand, with the same script through the old binary): unprivileged, the
//! supervisor never finished (126 "did not finish in time and was killed" after the 60 s limit
//! and the worker's 5 s backstop) and 256 processes were left in the test's bound, the whole
//! `RLIMIT_NPROC`; as root the pids cgroup's list caught them (the outside attack saw it fail
//! once in four runs under load). Now every supervisor has a landlock domain of its own, which
//! the tree inherits and cannot leave, and kills it with one scoped `kill(-1, SIGKILL)`.
//!
//! Every mode: the local host as root and as an unprivileged uid (namespace presentation), and
//! the worker pod's (direct presentation, unprivileged, through the worker API, ended by its
//! time limit). Each inside a pids bound of this test. Root only (the bound needs a cgroup).

use super::support::bound::Bound;
use super::support::pod_like::PodLike;
use super::support::{home, local_exec, show, text};
use kube_harness_worker::api::model::ExecRequest;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// `python3 - SECONDS`: starts the hydra, and returns after SECONDS (0: never).
const HYDRA: &str = include_str!("../../../tests/attacks/hydra.py");

/// The next command of the same session sees no heartbeat: the file is no longer written.
const STILL: &str = include_str!("../../../tests/attacks/still.sh");

/// Uids of this file's own (unprivileged local host, pod-like worker): see the loop below.
const HYDRA_UID: u32 = 65531;
const HYDRA_POD_UID: u32 = 65530;

fn root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn hydra(seconds: &str) -> String {
    format!("python3 - {seconds} <<'KH_PY'\n{HYDRA}\nKH_PY\n")
}

fn local(bound: &Bound, dir: &Path, uid: Option<u32>, script: &str) -> Output {
    let mut cmd = local_exec(dir, "h", script);
    bound.hold(&mut cmd, uid);
    cmd.output().unwrap()
}

#[test]
fn a_hydra_dies_whole_with_its_command_on_the_local_host_as_root_and_unprivileged() {
    if !root() {
        return;
    }
    // Its own uid: the hydra holds every process RLIMIT_NPROC gives a uid (counted host-wide), so
    // other tests' commands of 65533 would fail while it runs.
    for uid in [None, Some(HYDRA_UID)] {
        let bound = Bound::new(&format!("hydra-{}", uid.unwrap_or(0)), 700);
        let dir = home(uid);
        let started = Instant::now();
        let o = local(&bound, dir.path(), uid, &hydra("2"));
        let took = started.elapsed();
        assert_eq!(
            (o.status.code(), text(&o.stdout)),
            (Some(0), "started\n".to_string()),
            "uid {uid:?}: {}",
            show(&o)
        );
        // The command's own process returned after 2 s; its tree goes with it, at once.
        assert!(took < Duration::from_secs(20), "uid {uid:?}: took {took:?}");
        // `local exec` has exited: nothing it started may be left in the bound.
        let left = bound.drained(Duration::from_secs(3));
        bound.kill_all();
        assert!(
            left.is_empty(),
            "uid {uid:?}: {} processes left",
            left.len()
        );
        let o = local(&bound, dir.path(), uid, STILL);
        assert_eq!(text(&o.stdout), "still\n", "uid {uid:?}: {}", show(&o));
        assert!(bound.drained(Duration::from_secs(3)).is_empty());
    }
}

/// The worker pod's mode: unprivileged, no namespaces (landlock, seccomp and rlimits only), the
/// command ended by its time limit while the hydra runs. Its tree is gone before the session's
/// next command, and a second session on the same host runs commands the whole time.
#[test]
fn a_hydra_dies_whole_at_its_time_limit_in_the_worker_pods_mode() {
    if !root() {
        return;
    }
    let bound = Bound::new("hydra-pod", 700);
    let mut pod = PodLike::start(HYDRA_POD_UID, "", Some(&bound), &[]);
    let client = pod.client();
    let other = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            pod.ready().await;
            let mut req = ExecRequest::new(hydra("0"));
            req.timeout_ms = Some(4000);
            let hydra = tokio::spawn({
                let client = client.clone();
                async move { client.exec(&req).await }
            });
            // Another session on the host keeps working while the hydra fills its own limit.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let started = Instant::now();
            let o = local_exec(other.path(), "o", "echo alive")
                .output()
                .unwrap();
            assert_eq!(text(&o.stdout), "alive\n", "{}", show(&o));
            assert!(started.elapsed() < Duration::from_secs(15));

            let r = hydra.await.unwrap().unwrap();
            assert_eq!(r.outcome.exit_code, 124, "{}", r.outcome.stderr);
            assert!(r.outcome.timed_out);
            assert!(
                !r.outcome.stderr.contains("did not finish in time"),
                "{}",
                r.outcome.stderr
            );
            // Nothing of the hydra is left: only the worker, its forker and its spare run as
            // the session's uid (python3 processes are the hydra's).
            let pythons = pythons_of(HYDRA_POD_UID);
            assert!(pythons.is_empty(), "{} hydra processes left", pythons.len());
            let r = client.exec(&ExecRequest::new(STILL)).await.unwrap();
            assert_eq!(r.outcome.stdout, "still\n", "{}", r.outcome.stderr);
        });
    }));
    pod.stop();
    bound.kill_all();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Pids of the `python3` processes of `uid` on the host.
fn pythons_of(uid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let ours = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            == Some(&uid.to_string());
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if ours && comm.trim() == "python3" {
            found.push(pid);
        }
    }
    found
}
