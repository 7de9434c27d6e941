//! A fork bomb inside the sandbox (issue 12, failure 4): its processes are bounded, it dies whole
//! at its timeout, and another sandbox's command runs meanwhile.
//!
//! Safety of the machine: as root (where RLIMIT_NPROC does not apply), this test first moves its
//! own process into a pids cgroup with a low limit, so that even a broken sandbox cannot fork more
//! than `OUTER` tasks; the sandbox's per-command cgroups nest beneath it. It refuses to run the
//! bomb when it cannot build that bound. Its own file, so that the bound holds only this test.

#[path = "suite/util.rs"]
mod util;
use kube_harness_sandbox::{Limits, Presentation, SandboxConfig, Tier0Sandbox};
use kube_harness_workspace::WorkspaceSpec;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use util::*;

/// The bound on this whole test process (test threads, tokio threads, both sandboxes).
const OUTER: u64 = 400;
/// The sandbox's per-command process limit.
const INNER: u64 = 64;

/// This process inside `/sys/fs/cgroup/pids/kh-attack-<pid>` with `pids.max = OUTER`; moved back
/// and removed on drop.
struct Bound {
    dir: PathBuf,
    parent: PathBuf,
}

impl Bound {
    fn enter() -> Option<Bound> {
        if unsafe { libc::geteuid() } != 0 {
            return None; // RLIMIT_NPROC bounds a non-root sandbox and this test
        }
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let own = cgroup
            .lines()
            .find_map(|l| l.split_once(":pids:").map(|(_, p)| p.to_string()))
            .expect("as root this test needs a cgroup v1 pids hierarchy to bound itself");
        let parent = Path::new("/sys/fs/cgroup/pids").join(own.trim_start_matches('/'));
        let dir = parent.join(format!("kh-attack-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pids.max"), OUTER.to_string()).unwrap();
        std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).unwrap();
        Some(Bound { dir, parent })
    }

    /// How often the outer limit refused a fork.
    fn refusals(&self) -> u64 {
        let events = std::fs::read_to_string(self.dir.join("pids.events")).unwrap();
        events
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap()
    }

    /// Pids in the bound other than this process's own and those the `live` sandboxes keep
    /// (each its forker and the one spare supervisor the forker keeps ready), in any nested
    /// cgroup, once the supervisors of finished commands (reaped by the kernel after they
    /// report) have had 3 s to finish exiting. A process of the bomb would still be there, and
    /// so would a supervisor that never finished.
    fn strangers(&self, live: &[&Tier0Sandbox]) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let mut kept = Vec::new();
            for sb in live {
                let forker = sb.forker_pid().expect("a forker runs");
                let children =
                    std::fs::read_to_string(format!("/proc/{forker}/task/{forker}/children"))
                        .unwrap_or_default();
                kept.push(forker.to_string());
                if let [spare] = children.split_whitespace().collect::<Vec<_>>()[..] {
                    kept.push(spare.to_string());
                }
            }
            let mut left = self.census();
            left.retain(|p| !kept.iter().any(|k| p.starts_with(&format!("{k} in "))));
            if left.is_empty() || Instant::now() > deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn census(&self) -> Vec<String> {
        let me = std::process::id().to_string();
        let mut out = Vec::new();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            for pid in std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
            {
                if pid != me {
                    out.push(format!("{pid} in {}", d.display()));
                }
            }
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                }
            }
        }
        out
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.parent.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn sandbox(data: &Data, timeout: Duration) -> Tier0Sandbox {
    let spec = WorkspaceSpec::canonical(data.root(), toggles(false), vec![]);
    let mut config = SandboxConfig::new(spec, Presentation::Namespace);
    config.limits = Limits {
        timeout,
        max_processes: INNER,
        ..Limits::default()
    };
    Tier0Sandbox::new(config).unwrap()
}

/// One test function: the bound is per process, and a concurrent test's supervisors would be
/// counted as leftovers of this one.
#[test]
fn fork_bombs_are_bounded_and_die_whole() {
    let bound = Bound::enter();
    a_fork_bomb_is_bounded_dies_whole_at_its_timeout_and_stops_no_one_else(bound.as_ref());
    the_bare_bomb_is_killed_when_its_shell_exits(bound.as_ref());
}

fn a_fork_bomb_is_bounded_dies_whole_at_its_timeout_and_stops_no_one_else(bound: Option<&Bound>) {
    let data = Data::new();
    let other = Data::new();
    let bomb = sandbox(&data, Duration::from_secs(3));
    let neighbour = sandbox(&other, Duration::from_secs(10));
    let rt = rt();

    let started = Instant::now();
    // The bomb keeps its shell busy until the timeout (the bare bomb returns at once and leaves
    // its tree behind: `the_bare_bomb_is_killed_when_its_shell_exits`).
    let bomb_script = inv("b(){ b|b& }; b; sleep 100", "/session");
    let (outcome, neighbour_runs) = rt.block_on(async {
        let bomb_run = bomb.run(&bomb_script);
        let neighbour_runs = async {
            // While the bomb runs, another sandbox's commands go on.
            tokio::time::sleep(Duration::from_millis(800)).await;
            let mut results = Vec::new();
            for i in 0..3 {
                let t = Instant::now();
                let o = neighbour
                    .run(&inv(&format!("echo ok{i}"), "/session"))
                    .await;
                results.push((o, t.elapsed()));
            }
            results
        };
        tokio::join!(bomb_run, neighbour_runs)
    });
    let took = started.elapsed();

    assert!(outcome.timed_out, "{}", show(&outcome));
    assert_eq!(outcome.exit_code, 124, "{}", show(&outcome));
    assert!(
        took < Duration::from_secs(6),
        "the bomb returned after {took:?} (timeout 3 s)"
    );
    for (i, (o, t)) in neighbour_runs.iter().enumerate() {
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (0, format!("ok{i}\n")),
            "{}",
            show(o)
        );
        assert!(
            *t < Duration::from_secs(3),
            "neighbour command {i} took {t:?}"
        );
    }
    if let Some(bound) = bound {
        // Nothing of the bomb is left anywhere, and the sandbox's own limit held it: the outer
        // bound (OUTER tasks for this whole test) never had to refuse a fork.
        assert_eq!(bound.strangers(&[&bomb, &neighbour]), Vec::<String>::new());
        assert_eq!(
            bound.refusals(),
            0,
            "the bomb reached the test's outer bound"
        );
    }
    // The same sandbox is usable afterwards.
    let o = rt.block_on(bomb.run(&inv("echo after", "/session")));
    assert_eq!(
        (o.exit_code, text(&o.stdout)),
        (0, "after\n".into()),
        "{}",
        show(&o)
    );
}

fn the_bare_bomb_is_killed_when_its_shell_exits(bound: Option<&Bound>) {
    let data = Data::new();
    let bomb = sandbox(&data, Duration::from_secs(4));
    let started = Instant::now();
    let o = rt().block_on(bomb.run(&inv("b(){ b|b& }; b", "/session")));
    // The shell returns at once (0), or, when its own fork meets the limit first, bash retries
    // it until the timeout (124). Either way its tree is killed before the result is reported.
    assert!(
        o.exit_code == 0 || (o.exit_code == 124 && o.timed_out),
        "{}",
        show(&o)
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    if let Some(bound) = bound {
        assert_eq!(bound.strangers(&[&bomb]), Vec::<String>::new());
        assert_eq!(
            bound.refusals(),
            0,
            "the bomb reached the test's outer bound"
        );
    }
}
