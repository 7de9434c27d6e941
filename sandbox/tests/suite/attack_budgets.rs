//! Issue 29, items 3 and 7: kernel budgets one command could take whole from the host, and
//! CPU. An outside attack took every AIO context of the machine (`io_setup`), every inotify
//! instance of uid 0, 96,367 pending realtime signals of uid 0 (the host's `sigqueue` then
//! failed), held `flock(LOCK_EX)` on `/etc/hostname` against the host's processes, and burnt two
//! thirds of the machine's CPU with 250 processes, each in a session (an autogroup) of its own.
//! Each assertion below failed on main at fce0842. Both presentations, as root (the hardest
//! case: root owns the host's system files, and its budgets are the host's).

use super::util::*;

/// Python probing syscalls from inside the command; one `name:RESULT` line each.
const PROBE: &str = r#"
import ctypes, errno, fcntl, functools, os, platform, signal
print = functools.partial(print, flush=True)
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": {"io_setup": 206, "inotify_init1": 294},
      "aarch64": {"io_setup": 0, "inotify_init1": 26}}[platform.machine()]
def syscall(name, *args):
    r = libc.syscall(ctypes.c_long(nr[name]), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    print(f"{name}:" + ("ok" if r >= 0 else errno.errorcode.get(e, str(e))))
ctx = ctypes.c_ulong(0)
syscall("io_setup", 64, ctypes.addressof(ctx))
syscall("inotify_init1", 0)
def attempt(name, f):
    try:
        f()
        print(f"{name}:ok")
    except OSError as e:
        print(f"{name}:{errno.errorcode.get(e.errno, e.errno)}")
host = open("/etc/hostname")
mine = open("lockme", "w")
attempt("flock-host", lambda: fcntl.flock(host, fcntl.LOCK_EX | fcntl.LOCK_NB))
attempt("lease-host", lambda: fcntl.fcntl(host, 1024, fcntl.F_RDLCK))
attempt("lockf-own", lambda: fcntl.lockf(mine, fcntl.LOCK_EX | fcntl.LOCK_NB))
# Realtime signals queued to itself, blocked so that they stay pending.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
queued = 0
while queued < 5000 and libc.sigqueue(os.getpid(), signal.SIGRTMIN, None) == 0:
    queued += 1
print("queued:" + ("bounded" if 0 < queued <= 1024 else str(queued)))
# A new session, from a child (the command itself leads its process group, where setsid fails
# for every process anyway).
pid = os.fork()
if pid == 0:
    attempt("setsid", os.setsid)
    os._exit(0)
os.waitpid(pid, 0)
"#;

#[test]
fn no_command_takes_a_host_wide_kernel_budget() {
    let data = Data::new();
    std::fs::write(data.path("session/probe.py"), PROBE).unwrap();
    for (mode, sb, cwd) in both(&data) {
        let o = run(&sb, &cwd, "python3 probe.py");
        assert_eq!(o.exit_code, 0, "{mode}: {}", show(&o));
        assert_eq!(
            text(&o.stdout),
            "io_setup:ENOSYS\ninotify_init1:ENOSYS\nflock-host:EPERM\nlease-host:EPERM\n\
             lockf-own:ok\nqueued:bounded\nsetsid:EPERM\n",
            "{mode}: {}",
            show(&o)
        );
        // The per-user budgets as rlimits: pending signals, message queue bytes, CPU seconds
        // (the sandbox's 60 s limit and one), and no raising of the nice value.
        let o = run(&sb, &cwd, "ulimit -i -q -t -e");
        let values: Vec<String> = text(&o.stdout)
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
            .collect();
        assert_eq!(values, ["1024", "0", "61", "0"], "{mode}: {}", show(&o));
        // Tools that lock keep working: sqlite3 takes fcntl locks on its database.
        let o = run(
            &sb,
            &cwd,
            "sqlite3 db.sqlite 'create table t(x); insert into t values (7); select x from t;'",
        );
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (0, "7\n".into()),
            "{mode}: {}",
            show(&o)
        );
        std::fs::remove_file(data.path("session/db.sqlite")).unwrap();
    }
}

/// As root each command has a cpu cgroup: its whole tree gets at most one core
/// (`Limits::max_cpu_millicores`), however many processes burn. Four busy loops for two seconds
/// used about four CPU seconds on this two-core machine before; at most about two now.
#[test]
fn a_root_commands_tree_gets_at_most_its_cpu_quota() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        assert!(sb.cpu_bounded(), "{mode}: no cpu cgroup on this host");
        let o = run(
            &sb,
            &cwd,
            "grep -c 'cpu.*kube-harness-' /proc/self/cgroup; \
             for i in 1 2 3 4; do ( while :; do :; done ) & done; sleep 2; kill $(jobs -p); wait; times",
        );
        let out = text(&o.stdout);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("1"), "{mode}: {}", show(&o));
        // `times`: the shell's user and system time, then its children's.
        let children = lines.nth(1).unwrap_or_default();
        let seconds: f64 = children
            .split_whitespace()
            .map(|t| {
                let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
                m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
            })
            .sum();
        assert!(
            seconds < 2.6,
            "{mode}: the tree used {seconds:.2} CPU seconds in 2 s: {}",
            show(&o)
        );
    }
}
