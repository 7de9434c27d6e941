//! Timeouts and cleanup kill the whole process tree (also processes that left the process group
//! or the session), output caps keep the pipes drained, rlimits hold, faults become exit 126.

use super::util::*;
use kube_harness_sandbox::{Limits, Presentation, SandboxConfig, Tier0Sandbox};
use std::time::{Duration, Instant};

fn sandbox(data: &Data, limits: Limits) -> Tier0Sandbox {
    let spec =
        kube_harness_workspace::WorkspaceSpec::canonical(data.root(), toggles(false), vec![]);
    let mut config = SandboxConfig::new(spec, Presentation::Namespace);
    config.limits = limits;
    Tier0Sandbox::new(config).unwrap()
}

/// Pids the script wrote to fd 3, one per line.
fn pids(state: &[u8]) -> Vec<i32> {
    text(state)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// True when /proc/PID is gone or belongs to another process now (a reused pid would not be
/// running `sleep 1000`).
fn gone(pid: i32) -> bool {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Err(_) => true,
        Ok(cmd) => !String::from_utf8_lossy(&cmd).contains("1000"),
    }
}

#[test]
fn timeout_kills_the_whole_tree_quickly() {
    let data = Data::new();
    let sb = sandbox(
        &data,
        Limits {
            timeout: Duration::from_secs(1),
            ..Limits::default()
        },
    );
    let started = Instant::now();
    let o = rt().block_on(sb.run(&inv(
        "sleep 1000 & echo $! >&3; disown; sleep 30",
        "/session",
    )));
    let took = started.elapsed();
    assert!(o.timed_out, "{}", show(&o));
    assert_eq!(o.exit_code, 124, "{}", show(&o));
    assert!(took < Duration::from_secs(4), "took {took:?}");
    let bg = pids(&o.state);
    assert_eq!(bg.len(), 1, "{}", text(&o.state));
    // The supervisor reaps before it reports, so the process is gone by now.
    assert!(gone(bg[0]), "background sleep {} survived", bg[0]);
}

#[test]
fn leftovers_are_killed_after_a_normal_exit_even_outside_the_group() {
    let data = Data::new();
    let sb = sandbox(&data, Limits::default());
    // A background child, one in its own process group (job control), one that tried to make a
    // new session (refused to commands since issue 29) and left its process group instead.
    let script = r#"
sleep 1000 & echo $! >&3
set -m; sleep 1000 & echo $! >&3; set +m
python3 -c '
import os, sys, time
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
    except PermissionError:
        os.setpgid(0, 0)
    time.sleep(1000)
else:
    print(pid, file=os.fdopen(3, "w"))
'
echo done
"#;
    let started = Instant::now();
    let o = rt().block_on(sb.run(&inv(script, "/session")));
    assert_eq!(o.exit_code, 0, "{}", show(&o));
    assert!(!o.timed_out);
    assert!(started.elapsed() < Duration::from_secs(10));
    let bg = pids(&o.state);
    assert_eq!(bg.len(), 3, "{}", show(&o));
    for pid in bg {
        assert!(gone(pid), "leftover {pid} survived");
    }
}

#[test]
fn a_dropped_run_kills_its_tree() {
    let data = Data::new();
    let sb = sandbox(&data, Limits::default());
    let rt = rt();
    let i = inv("echo $$ > /session/pid; sleep 1000", "/session");
    let r =
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(500), sb.run(&i)).await });
    assert!(r.is_err(), "the run was cancelled");
    let pid: i32 = std::fs::read_to_string(data.path("session/pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone_any(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone_any(pid), "bash {pid} survived the cancellation");
}

fn gone_any(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.contains(") Z "),
    }
}

#[test]
fn output_is_capped_and_drained() {
    let data = Data::new();
    let sb = sandbox(&data, Limits::default());
    let started = Instant::now();
    // 100 MiB on stdout and 8 MiB on stderr at the same time; the producer must not block.
    let o = rt().block_on(sb.run(&inv(
        "head -c 8388608 /dev/zero >&2 & head -c 104857600 /dev/zero; wait; echo tail >&2",
        "/session",
    )));
    assert_eq!(
        o.exit_code,
        0,
        "exit {} stderr len {}",
        o.exit_code,
        o.stderr.len()
    );
    assert!(!o.timed_out);
    assert_eq!(o.stdout.len(), 1 << 20);
    assert_eq!(o.stderr.len(), 1 << 20);
    assert!(o.stdout_truncated && o.stderr_truncated);
    assert!(started.elapsed() < Duration::from_secs(30));
    let o = rt().block_on(sb.run(&inv("echo small", "/session")));
    assert!(!o.stdout_truncated && !o.stderr_truncated && !o.state_truncated);
    // The state channel has its own cap.
    let sb = sandbox(
        &data,
        Limits {
            max_state_bytes: 10,
            ..Limits::default()
        },
    );
    let o = rt().block_on(sb.run(&inv("printf 0123456789abcdef >&3", "/session")));
    assert_eq!(text(&o.state), "0123456789");
    assert!(o.state_truncated);
}

#[test]
fn rlimits_hold() {
    let data = Data::new();
    let sb = sandbox(
        &data,
        Limits {
            max_file_size: 1 << 20,
            max_open_files: 64,
            max_memory: 512 << 20,
            max_processes: 100,
            ..Limits::default()
        },
    );
    let script = r#"
echo "nofile=$(ulimit -n) hard=$(ulimit -Hn) as=$(ulimit -v) fsize=$(ulimit -f) nproc=$(ulimit -u)"
( ulimit -n 4096 ) 2>/dev/null && echo RAISED || echo "cannot raise"
head -c 2000000 /dev/zero > /session/big; echo "head=$?"
python3 -c 'x = bytearray(1 << 30)' 2>/dev/null; echo "alloc=$?"
python3 -c '
import os
fds = []
try:
    while True: fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e: print("opened", len(fds), "errno", e.errno)
'
"#;
    let o = rt().block_on(sb.run(&inv(script, "/session")));
    let out = text(&o.stdout);
    assert!(
        out.contains("nofile=64 hard=64 as=524288 fsize=1024 nproc=100"),
        "{}",
        show(&o)
    );
    assert!(out.contains("cannot raise"), "{}", show(&o));
    assert!(out.contains("head=153"), "SIGXFSZ (128+25): {}", show(&o));
    assert_eq!(
        std::fs::metadata(data.path("session/big")).unwrap().len(),
        1 << 20
    );
    assert!(out.contains("alloc=1"), "MemoryError: {}", show(&o));
    let opened: usize = out
        .split("opened ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("python counted fds");
    assert!(opened < 64, "{}", show(&o));
    assert!(out.contains("errno 24"), "EMFILE: {}", show(&o));
}

#[test]
fn faults_are_exit_126_with_one_line() {
    let data = Data::new();
    let sb = sandbox(&data, Limits::default());
    let rt = rt();
    // A working directory that cannot be entered is not a fault: the command starts in HOME
    // with a note (attack_sandbox.rs, a_working_directory_that_cannot_be_entered_…).
    let o = rt.block_on(sb.run(&inv("echo hi", "/no/such/dir")));
    assert_eq!(
        (o.exit_code, text(&o.stdout)),
        (0, "hi\n".into()),
        "{}",
        show(&o)
    );
    assert!(text(&o.stderr).contains("working directory /no/such/dir cannot be entered"));
    let cases = [
        (inv("echo hi", "relative"), "not absolute"),
        (
            inv(&"x".repeat(200_000), "/session"),
            "script is 200000 bytes",
        ),
        (inv("echo \0", "/session"), "NUL"),
    ];
    for (i, want) in cases {
        let o = rt.block_on(sb.run(&i));
        assert_eq!(o.exit_code, 126, "{}", show(&o));
        let err = text(&o.stderr);
        assert!(
            err.starts_with("kube-harness: ") && err.contains(want),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let mut i = inv("echo hi", "/session");
    i.env.insert("BAD=NAME".into(), "x".into());
    let o = rt.block_on(sb.run(&i));
    assert_eq!(o.exit_code, 126);
    // Exit codes and signals pass through as bash reports them.
    let o = rt.block_on(sb.run(&inv("exit 7", "/session")));
    assert_eq!((o.exit_code, o.timed_out), (7, false));
    let o = rt.block_on(sb.run(&inv("kill -9 $$", "/session")));
    assert_eq!(o.exit_code, 137, "{}", show(&o));
}
