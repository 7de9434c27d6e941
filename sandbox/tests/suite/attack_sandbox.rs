//! The attacker's suite against the Tier-0 sandbox (issue 12): what a hostile script tries from
//! inside, each with its exact outcome, in both presentations (the local host's namespace and the
//! worker pod's direct mode). Runs as root here, which is the hardest case: uid 0 in the sandbox
//! keeps its uid and must still be confined.

use super::util::*;
use std::path::{Path, PathBuf};

/// A process of the same uid outside the sandbox (the worker, another session's command, PID 1
/// are all like it), killed when dropped.
struct Victim(std::process::Child);

impl Victim {
    fn start() -> Victim {
        Victim(
            std::process::Command::new("sleep")
                .arg("300")
                .spawn()
                .expect("sleep"),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn limit(&self, name: &str) -> String {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.pid())).unwrap();
        limits
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Python that calls each cross-process syscall on `PID` and prints `name:result` per line.
const CROSS_PROCESS: &str = r#"
import ctypes, errno, os, resource, sys
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        r = fn()
        if isinstance(r, int) and r < 0:
            print(f"{name}:{errno.errorcode[ctypes.get_errno()]}")
        else:
            print(f"{name}:ok")
    except OSError as e:
        print(f"{name}:{errno.errorcode[e.errno]}")
def sc(nr, *args):
    return lambda: libc.syscall(nr, *[ctypes.c_long(a) for a in args])
attempt("prlimit64", lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1)))
attempt("prlimit64-nofile", lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (8, 8)))
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
attempt("setpriority-user", lambda: os.setpriority(os.PRIO_USER, 0, 19))
attempt("setpriority-pgrp", lambda: os.setpriority(os.PRIO_PGRP, 0, 19))
attempt("sched_setaffinity", lambda: os.sched_setaffinity(pid, {0}))
attempt("sched_setscheduler", lambda: os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0)))
attempt("sched_setparam", lambda: os.sched_setparam(pid, os.sched_param(0)))
attempt("ioprio_set", sc(251, 1, pid, (2 << 13) | 7))
attempt("migrate_pages", sc(256, pid, 0, 0, 0))
attempt("move_pages", sc(279, pid, 0, 0, 0, 0, 0))
attempt("kcmp", sc(312, pid, os.getpid(), 0, 0, 0))
attempt("pidfd_open", sc(434, pid, 0))
attempt("process_madvise", sc(440, 3, 0, 0, 0, 0))
attempt("pidfd_send_signal", sc(424, 3, 9, 0, 0))
attempt("kill", lambda: os.kill(pid, 9))
# The same calls on itself still work.
attempt("self-prlimit", lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, (64, 64)))
attempt("self-setpriority", lambda: os.setpriority(os.PRIO_PROCESS, 0, 15))
attempt("self-sched_setaffinity", lambda: os.sched_setaffinity(0, {0}))
attempt("self-ioprio_set", sc(251, 1, 0, (2 << 13) | 7))
"#;

#[test]
fn no_syscall_acts_on_a_process_outside_the_command() {
    let data = Data::new();
    std::fs::write(data.path("session/x.py"), CROSS_PROCESS).unwrap();
    for (mode, sb, cwd) in both(&data) {
        let mut victim = Victim::start();
        let before = (victim.limit("Max cpu time"), victim.limit("Max open files"));
        let o = run(&sb, &cwd, &format!("python3 x.py {}", victim.pid()));
        assert_eq!(o.exit_code, 0, "{mode}: {}", show(&o));
        let want = "\
prlimit64:EPERM
prlimit64-nofile:EPERM
setpriority:EPERM
setpriority-user:EPERM
setpriority-pgrp:EPERM
sched_setaffinity:EPERM
sched_setscheduler:EPERM
sched_setparam:EPERM
ioprio_set:EPERM
migrate_pages:EPERM
move_pages:EPERM
kcmp:EPERM
pidfd_open:ENOSYS
process_madvise:EPERM
pidfd_send_signal:EPERM
kill:EPERM
self-prlimit:ok
self-setpriority:ok
self-sched_setaffinity:ok
self-ioprio_set:ok
";
        assert_eq!(text(&o.stdout), want, "{mode}: {}", show(&o));
        assert!(victim.alive(), "{mode}: the victim was killed");
        assert_eq!(
            (victim.limit("Max cpu time"), victim.limit("Max open files")),
            before,
            "{mode}: the victim's limits changed"
        );
    }
}

#[test]
fn the_worker_itself_cannot_be_reached_either() {
    // The host process (here: this test) is the one holding credentials: lowering its fd limit
    // or its priority from inside must fail too.
    let data = Data::new();
    let me = std::process::id();
    let nofile = || {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        (lim.rlim_cur, lim.rlim_max)
    };
    let before = nofile();
    for (mode, sb, cwd) in both(&data) {
        let o = run(
            &sb,
            &cwd,
            &format!("python3 -c 'import resource; resource.prlimit({me}, resource.RLIMIT_NOFILE, (16, 16))'"),
        );
        assert_eq!(o.exit_code, 1, "{mode}: {}", show(&o));
        assert!(
            text(&o.stderr).contains("PermissionError"),
            "{mode}: {}",
            show(&o)
        );
        assert_eq!(nofile(), before, "{mode}");
    }
}

/// A command starts 10 nice levels below the worker (this test, at 0) and may go lower still,
/// never higher (`RLIMIT_NICE` is 0): the worker and its supervisors outrank a busy command.
#[test]
fn ulimit_and_nice_still_work_on_the_command_itself() {
    let data = Data::new();
    // SAFETY: plain getter (this test's own nice value, 0 unless run under `nice`).
    let base = (unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) } + 10).min(19);
    let lower = (base + 7).min(19);
    for (mode, sb, cwd) in both(&data) {
        let o = run(
            &sb,
            &cwd,
            "ulimit -n 100; ulimit -n; nice; nice -n 7 nice; nice -n -5 nice; ulimit -e",
        );
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (0, format!("100\n{base}\n{lower}\n{base}\n0\n")),
            "{mode}: {}",
            show(&o)
        );
        assert!(
            text(&o.stderr).contains("nice: cannot set niceness: Permission denied"),
            "{mode}: {}",
            show(&o)
        );
    }
}

/// The ELF loader every dynamic tool needs, run directly on a program.
fn loader() -> &'static str {
    if cfg!(target_arch = "x86_64") {
        "/lib64/ld-linux-x86-64.so.2"
    } else {
        "/lib/ld-linux-aarch64.so.1"
    }
}

#[test]
fn memfds_cannot_be_created_so_no_binary_runs_from_one() {
    let data = Data::new();
    let script = r#"
import os
try:
    fd = os.memfd_create("x")
except OSError as e:
    print("memfd_create", e.errno == 1)
    raise SystemExit(3)
os.write(fd, open("/usr/bin/git", "rb").read())
os.execv(f"/proc/self/fd/{fd}", ["git", "--version"])
"#;
    std::fs::write(data.path("session/m.py"), script).unwrap();
    for (mode, sb, cwd) in both(&data) {
        let o = run(&sb, &cwd, "python3 m.py");
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (3, "memfd_create True\n".into()),
            "{mode}: {}",
            show(&o)
        );
    }
}

#[test]
fn the_loader_cannot_run_a_program_that_is_not_a_tool() {
    assert!(
        Path::new("/usr/bin/git").exists(),
        "git is needed (scripts/test.sh installs it)"
    );
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        // From the tool directories: not readable, so not mappable, in both presentations.
        let o = run(&sb, &cwd, &format!("{} /usr/bin/git --version", loader()));
        assert_ne!(o.exit_code, 0, "{mode}: {}", show(&o));
        assert!(
            !text(&o.stdout).contains("git version"),
            "{mode}: {}",
            show(&o)
        );
        assert!(
            text(&o.stderr).contains("Permission denied"),
            "{mode}: {}",
            show(&o)
        );
        let o = run(&sb, &cwd, "cat /usr/bin/git > /dev/null");
        assert_eq!(o.exit_code, 1, "{mode}: {}", show(&o));
        // Listing the directory and running the tools still work.
        let o = run(
            &sb,
            &cwd,
            "ls /usr/bin | grep -cx git; ls /usr/bin/jq; jq -n 1",
        );
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (0, "1\n/usr/bin/jq\n1\n".into()),
            "{mode}: {}",
            show(&o)
        );
    }
    // Elsewhere under /usr: in a namespace nothing outside the code directories may be mapped
    // as code (noexec). Direct mode has no mounts of its own (docs/security-model.md).
    let core = Path::new("/usr/lib/git-core/git");
    if core.exists() {
        let sb = ns_sandbox(&data, false, vec![]);
        let o = run(
            &sb,
            Path::new("/session"),
            &format!("{} {} --version", loader(), core.display()),
        );
        assert_ne!(o.exit_code, 0, "{}", show(&o));
        assert!(!text(&o.stdout).contains("git version"), "{}", show(&o));
        assert!(
            text(&o.stderr).contains("failed to map segment"),
            "{}",
            show(&o)
        );
    }
}

#[test]
fn tools_that_map_code_of_their_own_still_run_in_a_namespace() {
    // The noexec system view must leave every code directory a tool needs: shared libraries,
    // Python's extension modules, stdbuf's preload library, node.
    let data = Data::new();
    let sb = ns_sandbox(&data, false, vec![]);
    let o = run(
        &sb,
        Path::new("/session"),
        "stdbuf -oL echo s && python3 -c 'import sqlite3, json, ssl; print(\"py\")' \
         && node -e 'console.log(\"js\")' && sqlite3 :memory: 'select 2' && awk 'BEGIN{print 3}'",
    );
    assert_eq!(
        (o.exit_code, text(&o.stdout)),
        (0, "s\npy\njs\n2\n3\n".into()),
        "{}",
        show(&o)
    );
}

#[test]
fn etc_secrets_cannot_even_be_listed() {
    let data = Data::new();
    // Every hidden directory this host has (e.g. /etc/ssh, /etc/security, /etc/sudoers.d).
    let hidden: Vec<String> = ["ssh", "security", "sudoers.d", "ssl/private", "kubernetes"]
        .iter()
        .filter(|n| {
            std::fs::read_dir(Path::new("/etc").join(n)).is_ok_and(|mut d| d.next().is_some())
        })
        .map(|n| n.to_string())
        .collect();
    assert!(
        !hidden.is_empty(),
        "this host has none of the hidden /etc directories"
    );
    let ns = ns_sandbox(&data, false, vec![]);
    let direct = direct_sandbox(&data, false, vec![]);
    for name in &hidden {
        let o = run(&ns, Path::new("/session"), &format!("ls -A /etc/{name}"));
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (0, String::new()),
            "/etc/{name}: {}",
            show(&o)
        );
        let o = run(
            &direct,
            &data.path("session"),
            &format!("ls -A /etc/{name}"),
        );
        assert_eq!(o.exit_code, 2, "/etc/{name}: {}", show(&o));
        assert!(
            text(&o.stderr).contains("Permission denied"),
            "{}",
            show(&o)
        );
    }
    // The rest of /etc is still there.
    let o = run(&ns, Path::new("/session"), "head -c 4 /etc/passwd");
    assert_eq!(text(&o.stdout), "root", "{}", show(&o));
}

#[test]
fn a_working_directory_that_cannot_be_entered_starts_the_command_in_home() {
    // An earlier command removed its cwd, or cd'd into a path longer than PATH_MAX: the next
    // command starts in HOME with a note, instead of every later command failing with 126.
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        let home = if mode == "namespace" {
            PathBuf::from("/session")
        } else {
            data.path("session")
        };
        let long = cwd.join("d/".repeat(3000));
        for gone in [cwd.join("removed"), long] {
            let o = run(&sb, &gone, "pwd");
            assert_eq!(o.exit_code, 0, "{mode}: {}", show(&o));
            assert_eq!(text(&o.stdout), format!("{}\n", home.display()), "{mode}");
            assert!(
                text(&o.stderr).starts_with("kube-harness: working directory ")
                    && text(&o.stderr).contains("cannot be entered"),
                "{mode}: {}",
                show(&o)
            );
        }
    }
}

/// A setuid or setgid file left in the workspace would run as the command's uid (root on a local
/// host) for anyone on the host who reaches the workspace; no_new_privs only holds inside the
/// sandbox. Every way of setting those bits is refused: chmod, install, cp -p of a setuid
/// binary, open(O_CREAT) and mknod with the bits, python's os.chmod; the plain modes still work.
/// (Found by an outside attack on the files API, issue 14.)
#[test]
fn no_command_can_leave_a_setuid_or_setgid_file() {
    let data = Data::new();
    for (presentation, sb, cwd) in both(&data) {
        let o = run(
            &sb,
            &cwd,
            r#"cd /session 2>/dev/null || true
cat /usr/bin/id > f && chmod 755 f && echo plain-ok
chmod 4755 f; echo "chmod:$?"
chmod u+s f; echo "u+s:$?"
chmod g+s f; echo "g+s:$?"
install -m 4755 /usr/bin/id i 2>/dev/null; echo "install:$?"
cp -p /usr/bin/passwd p 2>/dev/null; echo "cp-p:$?"
python3 -c 'import os; os.chmod("f", 0o4755)' 2>/dev/null; echo "py-chmod:$?"
python3 -c 'import os; os.open("o", os.O_CREAT|os.O_WRONLY, 0o4755)' 2>/dev/null; echo "py-open:$?"
python3 -c 'import os, stat; os.mknod("n", 0o4755 | stat.S_IFREG)' 2>/dev/null; echo "py-mknod:$?"
chmod 1777 f; echo "sticky:$?"
"#,
        );
        let out = text(&o.stdout);
        assert!(out.contains("plain-ok"), "{presentation}: {}", show(&o));
        for refused in [
            "chmod:1",
            "u+s:1",
            "g+s:1",
            "py-chmod:1",
            "py-open:1",
            "py-mknod:1",
        ] {
            assert!(
                out.contains(refused),
                "{presentation}: {refused}: {}",
                show(&o)
            );
        }
        assert!(out.contains("sticky:0"), "{presentation}: {}", show(&o));
        // Whatever the tools reported, nothing in the workspace has a setuid or setgid bit.
        for entry in std::fs::read_dir(data.path("session")).unwrap() {
            let path = entry.unwrap().path();
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &path.symlink_metadata().unwrap().permissions(),
            );
            assert_eq!(
                mode & 0o6000,
                0,
                "{presentation}: {} has mode {mode:o}",
                path.display()
            );
        }
        // Emptied, not replaced: the other sandbox's landlock rules hold this directory.
        for entry in std::fs::read_dir(data.path("session")).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }
}

/// Issue 29, item 6: from a command on the local host as root, `/proc/<host pid>/fd` was
/// listable (root owns those directories; only their links are ptrace-checked) and every host
/// process's `mountinfo` readable. The sandbox now has a procfs of its own with
/// `hidepid=ptraceable`: a process is there only if the command could ptrace it, which landlock
/// limits to the command's own tree. Its own processes, `/proc/self` and `/dev/fd` still work.
#[test]
fn as_root_the_namespace_proc_shows_the_commands_own_processes_only() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let data = Data::new();
    let sb = ns_sandbox(&data, false, vec![]);
    let me = std::process::id();
    let o = run(
        &sb,
        Path::new("/session"),
        &format!(
            "echo pids=$(ls /proc | grep -c '^[0-9]'); ls /proc/1/fd; ls /proc/{me}/fd; \
             cat /proc/{me}/mountinfo; sleep 1 & test -r /proc/$!/status && echo child-visible; \
             kill $!; grep -c ^Pid /proc/self/status; cat <(echo via-dev-fd)"
        ),
    );
    let out = text(&o.stdout);
    let pids: u32 = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("pids="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX);
    assert!(pids <= 6, "{pids} processes listed: {}", show(&o));
    assert!(
        out.ends_with("child-visible\n1\nvia-dev-fd\n"),
        "{}",
        show(&o)
    );
    let err = text(&o.stderr);
    for hidden in [
        "/proc/1/fd".to_string(),
        format!("/proc/{me}/fd"),
        format!("/proc/{me}/mountinfo"),
    ] {
        assert!(
            err.contains(&format!("{hidden}': No such file or directory"))
                || err.contains(&format!("{hidden}: No such file or directory")),
            "{hidden} is visible: {}",
            show(&o)
        );
    }
}
