//! Where the worker adopts orphans (PID 1 of the worker pod's container; here this test process,
//! made a child subreaper), a forker that dies leaves nothing behind in the worker: its spare and
//! the supervisors it orphaned are reaped, no zombie stays. Its own binary: a subreaper adopts
//! every orphan of the process, and other tests' would be counted.

#[path = "suite/util.rs"]
mod util;
use std::time::{Duration, Instant};
use util::*;

/// This process's children: pid and state letter.
fn children() -> Vec<(u32, char)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in list.split_whitespace() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, r)| r.chars().next())
                .unwrap_or('?');
            out.push((pid.parse().unwrap(), state));
        }
    }
    out
}

/// SIGKILLs the sandbox's forker once its only child is its spare; its pid.
fn kill_with_only_its_spare_left(sb: &kube_harness_sandbox::Tier0Sandbox) -> u32 {
    let forker = sb.forker_pid().unwrap();
    let spare_only = || {
        std::fs::read_to_string(format!("/proc/{forker}/task/{forker}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .count()
            == 1
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while !spare_only() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    unsafe { libc::kill(forker as i32, libc::SIGKILL) };
    forker
}

#[test]
fn a_dead_forker_leaves_no_zombie_where_the_worker_adopts_orphans() {
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
    let data = Data::new();
    let sb = direct_sandbox(&data, false, vec![]);
    let cwd = data.path("session");
    let rt = rt();
    // Killed while a command runs: the command's supervisor and the spare are orphaned.
    rt.block_on(sb.run(&inv("true", &cwd)));
    let forker = sb.forker_pid().unwrap();
    let pid_file = data.path("session/started");
    let script = inv("touch started; sleep 3019", &cwd);
    let o = rt.block_on(async {
        let killer = async {
            while !pid_file.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            unsafe { libc::kill(forker as i32, libc::SIGKILL) };
        };
        tokio::join!(sb.run(&script), killer).0
    });
    assert_eq!(o.exit_code, 126, "{}", show(&o));
    // Killed between commands, once the last command's supervisor has exited (one that is still
    // exiting when its forker dies is not covered: docs/security-model.md section 16): its spare
    // is orphaned.
    let o = rt.block_on(sb.run(&inv("echo next", &cwd)));
    assert_eq!(
        (o.exit_code, text(&o.stdout)),
        (0, "next\n".into()),
        "{}",
        show(&o)
    );
    let forker2 = kill_with_only_its_spare_left(&sb);
    let deadline = Instant::now() + Duration::from_secs(2);
    while std::path::Path::new(&format!("/proc/{forker2}/stat")).exists()
        && std::fs::read_to_string(format!("/proc/{forker2}/stat"))
            .is_ok_and(|st| !st.contains(") Z "))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let o = rt.block_on(sb.run(&inv("echo again", &cwd)));
    assert_eq!(
        (o.exit_code, text(&o.stdout)),
        (0, "again\n".into()),
        "{}",
        show(&o)
    );
    // Killed and the next command sent at once: the spare may take it as the forker dies. Then
    // nothing was started (sent again to a new forker, and the spare reaped by its process
    // group), or it was (a command in flight: 126, and its supervisor reaped by the pid it
    // wrote, since the forker never answered).
    kill_with_only_its_spare_left(&sb);
    let o = rt.block_on(sb.run(&inv("echo once more", &cwd)));
    let in_flight = o.exit_code == 126
        && text(&o.stderr).contains("the sandbox's forker process ended while the command ran");
    assert!(
        (o.exit_code == 0 && text(&o.stdout) == "once more\n") || in_flight,
        "{}",
        show(&o)
    );
    let o = rt.block_on(sb.run(&inv("echo last", &cwd)));
    assert_eq!(
        (o.exit_code, text(&o.stdout)),
        (0, "last\n".into()),
        "{}",
        show(&o)
    );

    // What is left: the live forker, nothing else (no zombie, no stray process).
    let live = sb.forker_pid().unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut left = children();
    while left.iter().any(|(p, _)| *p != live) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = children();
    }
    let stats: Vec<String> = left
        .iter()
        .map(|(p, _)| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default())
        .collect();
    assert_eq!(
        left,
        vec![(live, 'S')],
        "children of this process: {stats:?}"
    );
}
