//! An outside attack on the sandbox's forker (issue 16; docs/security-model.md section 16),
//! written from the docs and the real binary only: `kube-harness local exec` as root and as an
//! unprivileged uid (65533), hostile scripts in python and bash. Every test asserts a guarantee
//! the docs make, and most carry a control that runs the same attack *outside* the sandbox to
//! show the attack itself works there (so the test can fail). Everything that forks runs inside
//! a pids cgroup of this test with a low limit. Root only (the bound needs a cgroup, switching
//! uid needs root); CI runs the attack files as root.
//!
//! Shown to fail against a weakened sandbox (2026-12-02, by hand, not committed): with the
//! `.scope(Scope::from_all(ABI_KNOWN))` of both landlock rulesets (`landlock_rules::build` and
//! `nested`) removed and `CLONE_NEWIPC` left out of `namespace::prepare`'s command flags,
//! `no_signal_route_…` failed (the command's F_SETOWN/kill SIGKILL killed its own forker: 126),
//! `ipc_objects_…` failed (another session saw the shm, msg and sem of the first) and
//! `abstract_sockets_…` failed (the other session's listener accepted the sandboxed connect).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::support::bound::Bound;
use super::support::{home, local_exec, show, text};

fn root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// The unprivileged uid of the docs' second mode (the one `attack_local` uses too).
const NOBODY: u32 = 65533;

/// `local exec` of SCRIPT in SESSION as `uid`, in `bound` (support::local_exec).
fn local(bound: &Bound, dir: &Path, uid: Option<u32>, session: &str, script: &str) -> Command {
    let mut cmd = local_exec(dir, session, script);
    bound.hold(&mut cmd, uid);
    cmd
}

fn run(bound: &Bound, dir: &Path, uid: Option<u32>, session: &str, script: &str) -> Output {
    local(bound, dir, uid, session, script).output().unwrap()
}

fn spawn(bound: &Bound, dir: &Path, uid: Option<u32>, session: &str, script: &str) -> Child {
    local(bound, dir, uid, session, script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A python program run by bash from a here-document, with arguments.
fn python(program: &str, args: &str) -> String {
    format!("python3 - {args} <<'KH_PY'\n{program}\nKH_PY\n")
}

/// Every pid whose command line contains `marker`.
fn with_marker(marker: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid as u32 == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // Only the marked programs, not the `local exec` and `bash -c` whose script names them.
        if cmdline.starts_with("python3") && cmdline.contains(marker) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Children of every thread of `pid` (the worker starts forkers from its runtime's threads).
fn children(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        all.extend(
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    all
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The forker of a running `local exec` (its child named `kh-sandbox-fork`), waiting for it.
fn forker_of(worker: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(f) = children(worker)
            .into_iter()
            .find(|c| comm(*c) == "kh-sandbox-fork")
        {
            return f;
        }
        assert!(
            Instant::now() < deadline,
            "no forker under {worker}: {:?}",
            children(worker)
                .into_iter()
                .map(|c| (c, comm(c)))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The live (not zombie) forkers of a worker.
fn forkers(worker: u32) -> Vec<u32> {
    children(worker)
        .into_iter()
        .filter(|c| comm(*c) == "kh-sandbox-fork")
        .filter(|c| {
            let stat = std::fs::read_to_string(format!("/proc/{c}/stat")).unwrap_or_default();
            !stat.contains(") Z ")
        })
        .collect()
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Signals by every route
// ---------------------------------------------------------------------------------------------

/// A process outside the sandbox that logs every catchable signal it gets (one number a line).
const VICTIM: &str = r#"
import os, signal, sys, time
log = sys.argv[1]
def h(sig, frame):
    with open(log, "a") as f:
        f.write(f"{sig}\n")
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGIO, signal.SIGURG, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, h)
open(log + ".ready", "w").close()
end = time.time() + 30
while time.time() < end:
    time.sleep(0.05)
"#;

/// Every way one process can make the kernel signal another, for each `PID:PGID:SIG` argument:
/// kill, killpg, sigqueue, and the ones that go through a file owner (F_SETOWN on a pid or a
/// process group, with F_SETSIG choosing the signal: SIGIO and SIGURG are delivered by the
/// kernel at I/O time, not by kill(2)). Prints `route:errno|ok` (ok only means the call did not
/// fail; whether a signal arrived is for the target to tell).
const SIGNALS: &str = r#"
import ctypes, fcntl, os, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
F_SETSIG = 10
out = []
def t(name, f):
    try:
        f(); out.append(f"{name}:ok")
    except OSError as e:
        out.append(f"{name}:{e.errno}")
def q(pid, sig):
    if libc.sigqueue(pid, sig, ctypes.c_void_p(0)) != 0:
        raise OSError(ctypes.get_errno(), "sigqueue")
def owner(target, sig):
    r, w = os.pipe()
    fcntl.fcntl(r, fcntl.F_SETOWN, target)
    if sig:
        fcntl.fcntl(r, F_SETSIG, sig)
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
    os.write(w, b"x")
def urg(target):
    a, b = socket.socketpair()
    fcntl.fcntl(a, fcntl.F_SETOWN, target)
    fcntl.fcntl(a, F_SETSIG, signal.SIGURG)
    fcntl.fcntl(a, fcntl.F_SETFL, fcntl.fcntl(a, fcntl.F_GETFL) | os.O_ASYNC)
    b.send(b"y")
for arg in sys.argv[1:]:
    pid, pgid, sig = map(int, arg.split(":"))
    t(f"kill{pid}", lambda: os.kill(pid, sig))
    t(f"killpg{pgid}", lambda: os.killpg(pgid, sig))
    t(f"sigqueue{pid}", lambda: q(pid, sig))
    t(f"owner{pid}", lambda: owner(pid, sig))
    t(f"owner-group{pgid}", lambda: owner(-pgid, sig))
    t(f"owner-sigio{pid}", lambda: owner(pid, 0))
    t(f"owner-urg{pid}", lambda: urg(pid))
time.sleep(0.3)
print(" ".join(out))
"#;

fn victim(bound: &Bound, log: &Path, uid: Option<u32>) -> Child {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", VICTIM]).arg(log).stdout(Stdio::null());
    bound.hold(&mut cmd, uid);
    let child = cmd.spawn().unwrap();
    wait_for(&log.with_extension("log.ready"));
    child
}

/// A command can make the kernel signal nothing outside itself: not a process of the same uid
/// outside the sandbox (signals by kill, killpg, sigqueue, and the file-owner routes F_SETOWN +
/// SIGIO/SIGURG/F_SETSIG, which kill(2)'s checks never see), not its forker or the forker's
/// process group (the spare), not the worker (`local exec`) or its group, even with SIGKILL.
/// As root and as uid 65533. Control: the same program run outside the sandbox against a
/// second victim does deliver (every route but the group one logs a signal), so a sandbox
/// without landlock's signal scope (ABI < 6, or the forker's/command's scope layer left out)
/// fails this test: the victim's log fills, the forker dies (126), or `local exec` is killed.
#[test]
fn no_signal_route_reaches_the_forker_the_worker_or_another_process() {
    if !root() {
        return;
    }
    let bound = Bound::new("signals", 200);
    for uid in [None, Some(NOBODY)] {
        let dir = home(uid);
        let logs = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            logs.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let log = logs.path().join("victim.log");
        let mut v = victim(&bound, &log, uid);
        let vpid = v.id();
        // The forker is the supervisor's parent, the worker the forker's: the command reads
        // both from /proc (world-readable `stat`) and aims at them with SIGKILL.
        let script = format!(
            "S=$PPID; F=$(cut -d' ' -f4 /proc/$S/stat); W=$(cut -d' ' -f4 /proc/$F/stat)\n\
             WG=$(cut -d' ' -f5 /proc/$W/stat)\n\
             echo \"targets $F $W\" >&2\n\
             {}echo forker-alive-after",
            python(
                SIGNALS,
                &format!("{vpid}:{vpid}:10 $F:$F:9 $S:$S:9 $W:$WG:9")
            )
        );
        let started = Instant::now();
        let o = run(&bound, dir.path(), uid, "sig", &script);
        assert_eq!(
            (
                o.status.code(),
                text(&o.stdout).ends_with("forker-alive-after\n")
            ),
            (Some(0), true),
            "uid {uid:?}: the command, its forker or the worker was signalled: {}",
            show(&o)
        );
        assert!(started.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(300));
        let got = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            got,
            "",
            "uid {uid:?}: a signal reached a process outside the sandbox: {}",
            show(&o)
        );
        let _ = v.kill();
        let _ = v.wait();

        // Control: outside the sandbox the same routes deliver.
        let log2 = logs.path().join("control.log");
        let mut v2 = victim(&bound, &log2, uid);
        let mut probe = Command::new("python3");
        probe
            .args(["-c", SIGNALS])
            .arg(format!("{0}:{0}:10", v2.id()));
        bound.hold(&mut probe, uid);
        let p = probe.output().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let got = std::fs::read_to_string(&log2).unwrap_or_default();
        let _ = v2.kill();
        let _ = v2.wait();
        assert!(
            ["10", "29", "23"]
                .iter()
                .all(|s| got.lines().any(|l| l == *s)),
            "uid {uid:?}: the control probe should have signalled its victim by every route: \
             {got:?} {}",
            show(&p)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. IPC: SysV and POSIX message queues, abstract unix sockets
// ---------------------------------------------------------------------------------------------

/// `make`: create a SysV shared memory segment, message queue and semaphore set under one key,
/// and a POSIX message queue; `look`: open them. Prints `shm:yes|errno msg:… sem:… mq:…`.
const IPC: &str = r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
K = 0x6b6861 + int(sys.argv[2])
flags = (0o1000 | 0o600) if sys.argv[1] == "make" else 0
res = []
def r(name, v):
    res.append(f"{name}:{'yes' if v >= 0 else ctypes.get_errno()}")
r("shm", libc.shmget(K, 4096, flags))
r("msg", libc.msgget(K, flags))
r("sem", libc.semget(K, 1, flags))
name = f"/khatk{sys.argv[2]}".encode()
r("mq", libc.mq_open(name, 2 | (0o100 if sys.argv[1] == "make" else 0), 0o600, None))
print(" ".join(res))
"#;

/// System V IPC objects (and POSIX message queues) a command leaves behind reach neither the
/// host, nor another session running at the same time, nor the next turn of the same session
/// (the local host makes one sandbox, with its own IPC namespace, per turn: section 10). As
/// root and as uid 65533. Weakened (the forker not unsharing IPC, as it is in the worker pod's
/// `Direct` mode) the `look`s find the key: `make` then `look` in one command shows they do.
#[test]
fn ipc_objects_reach_neither_the_host_nor_another_session_nor_the_next_turn() {
    if !root() {
        return;
    }
    let bound = Bound::new("ipc", 100);
    let key = std::process::id() % 100_000;
    for uid in [None, Some(NOBODY)] {
        let dir = home(uid);
        let make = python(IPC, &format!("make {key}"));
        let look = python(IPC, &format!("look {key}"));
        let o = run(&bound, dir.path(), uid, "a", &format!("{make}{look}"));
        let out = text(&o.stdout);
        assert!(
            out.lines()
                .nth(1)
                .unwrap_or("")
                .starts_with("shm:yes msg:yes sem:yes"),
            "uid {uid:?}: the objects should exist within the command: {}",
            show(&o)
        );
        // Another session while the maker still holds its sandbox.
        let maker = spawn(&bound, dir.path(), uid, "b", &format!("{make}sleep 3"));
        std::thread::sleep(Duration::from_millis(1500));
        let other = run(&bound, dir.path(), uid, "c", &look);
        let next = run(&bound, dir.path(), uid, "a", &look);
        let made = maker.wait_with_output().unwrap();
        assert!(text(&made.stdout).starts_with("shm:yes"), "{}", show(&made));
        for (who, o) in [("another session", &other), ("the next turn", &next)] {
            assert_eq!(o.status.code(), Some(0), "{}", show(o));
            assert!(
                !text(&o.stdout).contains("yes"),
                "uid {uid:?}: {who} sees an IPC object of another sandbox: {}",
                show(o)
            );
        }
        // The host's IPC namespace holds none of them.
        let host = Command::new("python3")
            .args(["-c", IPC, "look", &key.to_string()])
            .output()
            .unwrap();
        assert!(
            !text(&host.stdout).contains("yes"),
            "uid {uid:?}: a sandbox created IPC objects on the host: {}",
            show(&host)
        );
    }
}

/// `listen NAME SECONDS` (stream and datagram on abstract addresses) or `connect NAME`.
const ABSTRACT: &str = r#"
import socket, sys, time
mode, name = sys.argv[1], b"\0" + sys.argv[2].encode()
if mode == "listen":
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.bind(name); s.listen(5)
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); d.bind(name + b"-d")
    print("listening", flush=True)
    end = time.time() + float(sys.argv[3])
    n = 0
    while time.time() < end:
        s.settimeout(max(end - time.time(), 0.01))
        try:
            s.accept(); n += 1
        except socket.timeout:
            break
    print(f"accepted {n}", flush=True)
else:
    out = []
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect(name); out.append("stream:ok")
    except OSError as e:
        out.append(f"stream:{e.errno}")
    try:
        d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); d.sendto(b"x", name + b"-d"); out.append("dgram:ok")
    except OSError as e:
        out.append(f"dgram:{e.errno}")
    print(" ".join(out))
"#;

/// Abstract unix sockets (which no file permission guards, and which on this kernel share the
/// host's network namespace: section 10 skips the empty one on ABI >= 6) reach neither a
/// listener of the host nor one of another session's command running at the same time. The
/// control is the test itself connecting to both (it succeeds), so a sandbox without the
/// abstract-socket scope fails here.
#[test]
fn abstract_sockets_reach_neither_the_host_nor_another_session() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener, UnixStream};
    if !root() {
        return;
    }
    let bound = Bound::new("abstract", 100);
    let host_name = format!("kh-attack-host-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(host_name.as_bytes()).unwrap();
    let _listener = UnixListener::bind_addr(&addr).unwrap();
    let daddr = SocketAddr::from_abstract_name(format!("{host_name}-d").as_bytes()).unwrap();
    let _dgram = UnixDatagram::bind_addr(&daddr).unwrap();
    // Control: reachable from outside a sandbox.
    UnixStream::connect_addr(&addr).expect("control: the host listener is reachable");
    for uid in [None, Some(NOBODY)] {
        let dir = home(uid);
        let session_name = format!("kh-attack-b-{}-{}", std::process::id(), uid.unwrap_or(0));
        let listener = spawn(
            &bound,
            dir.path(),
            uid,
            "b",
            &python(ABSTRACT, &format!("listen {session_name} 4")),
        );
        std::thread::sleep(Duration::from_millis(1500));
        // Control (after the sandboxed connect): the other session's listener is up and
        // accepts the test's connection.
        let script = format!(
            "{}{}",
            python(ABSTRACT, &format!("connect {host_name}")),
            python(ABSTRACT, &format!("connect {session_name}"))
        );
        let o = run(&bound, dir.path(), uid, "c", &script);
        let control = SocketAddr::from_abstract_name(session_name.as_bytes()).unwrap();
        let reached = UnixStream::connect_addr(&control).is_ok();
        let l = listener.wait_with_output().unwrap();
        assert!(
            reached,
            "control: the other session's listener was not up: {}",
            show(&l)
        );
        assert_eq!(
            text(&o.stdout),
            "stream:1 dgram:1\nstream:1 dgram:1\n",
            "uid {uid:?}: an abstract socket outside the command was reached: {}",
            show(&o)
        );
        assert_eq!(
            text(&l.stdout),
            "listening\naccepted 1\n",
            "uid {uid:?}: the other session's listener accepted more than the test's connection"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 3. The forker killed from outside; processes that try to outlive their command
// ---------------------------------------------------------------------------------------------

/// Daemons of every shape a script can make without `setsid`/`nohup` (which the classifier
/// escalates): a python double fork leaving its process group (`setsid()` is refused to commands
/// since issue 29, so `setpgid`), a subshell's orphan, a background job. Each carries MARK in its
/// command line and lives 60 s unless killed.
fn daemons(mark: &str) -> String {
    format!(
        "python3 -c 'import os,time\nif os.fork()==0:\n    os.setpgid(0, 0)\n    if os.fork()==0:\n        time.sleep(60)\n    os._exit(0)' {mark}-double\n\
         (python3 -c 'import time; time.sleep(60)' {mark}-orphan &)\n\
         python3 -c 'import time; time.sleep(60)' {mark}-job &\n"
    )
}

/// Section 16: a forker that dies (killed from outside here: commands cannot signal it) costs
/// the command in flight a 126 and its whole tree, however daemonised, and nothing else: another
/// session running at the same time finishes normally, and the next turn of the killed session
/// runs. As root (the command's pids cgroup) and as uid 65533 (the supervisors' parent-death
/// signal and subreaper loop). Weakened (a supervisor without the parent-death signal, or one
/// that kills only the process group) the `-double` daemon would be left: a test of the real
/// binary sees its marker in /proc.
#[test]
fn a_forker_killed_mid_command_costs_only_that_command_and_leaves_nothing() {
    if !root() {
        return;
    }
    let bound = Bound::new("kill", 200);
    for uid in [None, Some(NOBODY)] {
        let dir = home(uid);
        let mark = format!("khmark-kill-{}-{}", std::process::id(), uid.unwrap_or(0));
        let a = spawn(
            &bound,
            dir.path(),
            uid,
            "a",
            &format!("{}sleep 8; echo a-finished", daemons(&mark)),
        );
        let b = spawn(&bound, dir.path(), uid, "b", "sleep 3; echo b-finished");
        let forker = forker_of(a.id());
        // Wait until all three daemons run, then kill A's forker.
        let deadline = Instant::now() + Duration::from_secs(10);
        while with_marker(&mark).len() < 3 {
            assert!(Instant::now() < deadline, "the daemons never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(forker as i32, libc::SIGKILL) };
        let started = Instant::now();
        let ao = a.wait_with_output().unwrap();
        assert_eq!(ao.status.code(), Some(126), "uid {uid:?}: {}", show(&ao));
        assert!(
            text(&ao.stderr).contains("forker process ended while the command ran")
                && !text(&ao.stdout).contains("a-finished"),
            "uid {uid:?}: {}",
            show(&ao)
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let bo = b.wait_with_output().unwrap();
        assert_eq!(
            (bo.status.code(), text(&bo.stdout)),
            (Some(0), "b-finished\n".to_string()),
            "uid {uid:?}: another session was hurt: {}",
            show(&bo)
        );
        let deadline = Instant::now() + Duration::from_secs(3);
        while !with_marker(&mark).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            with_marker(&mark),
            vec![],
            "uid {uid:?}: the killed command's daemons outlived it"
        );
        let next = run(&bound, dir.path(), uid, "a", "echo next-ok");
        assert_eq!(
            (next.status.code(), text(&next.stdout)),
            (Some(0), "next-ok\n".to_string()),
            "{}",
            show(&next)
        );
    }
}

/// A process that is never one pid for long: it forks, the child leaves its process group (a
/// new one every time; `setsid()`, which it tried before issue 29, is refused to commands), the
/// parent exits. Each link stamps a heartbeat file every 100
/// links. It ends by itself after SECONDS (the bound if it escapes) and carries its marker.
const HOP: &str = r#"
import os, sys, time
beat, secs = sys.argv[1], float(sys.argv[2])
end = time.time() + secs
if os.fork() > 0:
    sys.exit(0)
n = 0
while time.time() < end:
    n += 1
    if n % 100 == 1:
        with open(beat, "w") as f: f.write(str(n))
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid > 0:
        os._exit(0)
    os.setpgid(0, 0)
os._exit(0)
"#;

fn beats(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("beat"))
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read_to_string(e.path()).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Six hopping chains (a new pid and process group every few hundred microseconds)
/// do not outlive their command: when `local exec` returns, no heartbeat moves any more and no
/// process of them is left. As root and as uid 65533. Control: one chain started outside the
/// sandbox and hit with a group SIGKILL (what a plain `kill -9 -PGID` does) keeps beating, so
/// a tree kill of the process group alone would fail this test.
#[test]
fn hopping_process_chains_do_not_outlive_their_command() {
    if !root() {
        return;
    }
    let bound = Bound::new("hop", 300);
    for uid in [None, Some(NOBODY)] {
        let dir = home(uid);
        let mark = format!("khmark-hop-{}-{}", std::process::id(), uid.unwrap_or(0));
        let script = format!(
            "cat > /tmp/hop.py <<'KH_PY'\n{HOP}\nKH_PY\n\
             for i in 1 2 3 4 5 6; do python3 /tmp/hop.py /session/beat$i 6 {mark} & done\n\
             wait; sleep 1; ls /session | grep -c beat"
        );
        let o = run(&bound, dir.path(), uid, "hop", &script);
        assert_eq!(
            (o.status.code(), text(&o.stdout)),
            (Some(0), "6\n".to_string()),
            "uid {uid:?}: the chains did not run: {}",
            show(&o)
        );
        let session = dir.path().join(".little-harness/sessions/hop/session");
        std::thread::sleep(Duration::from_millis(300));
        let first = beats(&session);
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(
            beats(&session),
            first,
            "uid {uid:?}: a hopping chain still runs after its command ended"
        );
        assert_eq!(with_marker(&mark), vec![], "uid {uid:?}");
    }
    // Control: outside, one group kill does not stop a chain.
    let scratch = tempfile::tempdir().unwrap();
    let beat = scratch.path().join("beat-control");
    // It runs 6 s: long enough to outlast the wait below on a loaded machine (CI builds on both
    // cores made 100 hops take longer than a fixed 500 ms once, and a 2.5 s chain had ended).
    let started = Instant::now();
    let mut c = Command::new("python3");
    c.args(["-c", HOP])
        .arg(&beat)
        .args(["6", "khmark-hop-control"]);
    bound.hold(&mut c, None);
    let child = c.spawn().unwrap();
    let pgid = child.id() as i32;
    // At least 100 hops: the live link has long left the first process group.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&beat)
        .ok()
        .and_then(|b| b.parse::<u64>().ok())
        .is_none_or(|n| n < 101)
    {
        assert!(Instant::now() < deadline, "control: the chain never hopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let before = std::fs::read_to_string(&beat).unwrap_or_default();
    // Another 100 hops after the kill, however slow the machine is (within the chain's life).
    let beat_again = Instant::now() + Duration::from_secs(4);
    let mut after = before.clone();
    while after == before && Instant::now() < beat_again {
        std::thread::sleep(Duration::from_millis(20));
        after = std::fs::read_to_string(&beat).unwrap_or_default();
    }
    let mut child = child;
    let _ = child.wait();
    assert_ne!(
        before, after,
        "control: a group kill should not stop a hopping chain"
    );
    // It ends by itself 6 s after it started (a scan of /proc can miss a chain mid-hop, so
    // wait for its own end before its directory goes).
    std::thread::sleep(
        (started + Duration::from_millis(6500)).saturating_duration_since(Instant::now()),
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Secrets in /proc, bounds
// ---------------------------------------------------------------------------------------------

/// Nothing secret is in reach through /proc: the forker's environment holds only its own flag
/// (none of the worker's variables, read from outside as root), and a command of another
/// session scanning every /proc/*/cmdline and environ it can read while a session runs with an
/// exported token (carried from its previous turn) and a secret in its worker's environment
/// finds neither. Weakened (exports replayed into the script text, or the forker exec'd with
/// the worker's environment) the scan or the outside check finds the value.
#[test]
fn no_secret_of_a_session_or_its_worker_is_readable_through_proc() {
    if !root() {
        return;
    }
    let bound = Bound::new("secrets", 100);
    let dir = home(None);
    let token = format!("sk-khattack{}x", std::process::id());
    let worker_secret = format!("ws-khattack{}y", std::process::id());
    let o = run(
        &bound,
        dir.path(),
        None,
        "v",
        &format!("export KH_TOKEN={token}"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let mut cmd = local(&bound, dir.path(), None, "v", "echo $KH_TOKEN; sleep 3");
    cmd.env("KH_ATTACK_WORKER_SECRET", &worker_secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let victim = cmd.spawn().unwrap();
    let forker = forker_of(victim.id());
    let environ = text(&std::fs::read(format!("/proc/{forker}/environ")).unwrap());
    assert!(
        !environ.contains(&worker_secret)
            && environ
                .split('\0')
                .filter(|v| !v.is_empty())
                .all(|v| v.starts_with("KUBE_HARNESS_")),
        "the forker's environment (read as root from outside): {environ:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    // One character in brackets: the pattern matches the secret, not the scanner's own argv.
    let pattern = |s: &str| format!("{}[{}]{}", &s[..6], &s[6..7], &s[7..]);
    let scan = format!(
        "for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do\n\
         tr '\\0' '\\n' < $f 2>/dev/null | grep -q -e '{}' -e '{}' && echo \"found $f\"\n\
         done; echo scanned",
        pattern(&token),
        pattern(&worker_secret)
    );
    let o = run(&bound, dir.path(), None, "scanner", &scan);
    let v = victim.wait_with_output().unwrap();
    assert_eq!(text(&v.stdout), format!("{token}\n"), "{}", show(&v));
    assert_eq!(
        text(&o.stdout),
        "scanned\n",
        "another session read a secret: {}",
        show(&o)
    );
}

/// The bounds still hold through the forker, within this test's own bound: a command's pids
/// limit (256 as root: a python fork loop gets at most that many, verified with a small count
/// first), and output floods on stdout, stderr and the state descriptor at once end promptly,
/// capped, and leave the next turn working. Weakened (no pids cgroup for root's commands) the
/// loop would stop at this test's bound (400) instead, and the assertion on the count fails.
#[test]
fn the_pids_limit_and_output_caps_hold_through_the_forker() {
    if !root() {
        return;
    }
    let bound = Bound::new("bounds", 400);
    let dir = home(None);
    let small = run(
        &bound,
        dir.path(),
        None,
        "b",
        "for i in 1 2 3 4 5; do sleep 1 & done; jobs -p | wc -l",
    );
    assert_eq!(text(&small.stdout), "5\n", "{}", show(&small));
    let forks = r#"
import os, time
n = 0
while n < 1000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2); os._exit(0)
    n += 1
print(n)
"#;
    let o = run(&bound, dir.path(), None, "b", &python(forks, ""));
    let n: u32 = text(&o.stdout).trim().parse().unwrap_or(0);
    assert!(
        (200..=256).contains(&n),
        "a command forked {n} processes (limit 256): {}",
        show(&o)
    );
    let started = Instant::now();
    let o = run(
        &bound,
        dir.path(),
        None,
        "b",
        "head -c 40000000 /dev/zero & head -c 40000000 /dev/zero >&2 & head -c 40000000 /dev/zero >&3 & wait; echo end",
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(o.status.code(), Some(0), "exit {:?}", o.status.code());
    assert!(
        o.stdout.len() <= 1024 * 1024 + 4096 && o.stderr.len() <= 1024 * 1024 + 4096,
        "uncapped: {} / {} bytes",
        o.stdout.len(),
        o.stderr.len()
    );
    let next = run(&bound, dir.path(), None, "b", "echo next-ok");
    assert_eq!(text(&next.stdout), "next-ok\n", "{}", show(&next));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !bound.procs().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        bound.procs(),
        Vec::<i32>::new(),
        "processes left in the bound"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. One long-lived forker: `kube-harness worker`, many commands on one sandbox
// ---------------------------------------------------------------------------------------------

struct Worker {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kube-harness worker` over a workspace in a temp directory (the namespace presentation), as
/// root, in `bound`: its default sandbox (one forker) serves every command without `timeoutMs`.
fn worker(bound: &Bound) -> Worker {
    worker_with(bound, None, None)
}

/// The same with `TMPDIR` and the open-file limit (soft = hard) of the worker chosen.
fn worker_with(bound: &Bound, tmpdir: Option<&Path>, nofile: Option<u64>) -> Worker {
    let dir = tempfile::tempdir().unwrap();
    for d in ["ws/session", "ws/artifacts", "ws/persistent"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    std::fs::write(dir.path().join("token"), "attack-forker-token\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-harness"));
    cmd.args(["worker", "--session", "attack-forker", "--token-file"])
        .arg(dir.path().join("token"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--workspace-root")
        .arg(dir.path().join("ws"))
        .env("KUBE_HARNESS_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(t) = tmpdir {
        cmd.env("TMPDIR", t);
    }
    // As a background job of a non-interactive shell starts it (CI does): SIGINT and SIGQUIT
    // ignored. The worker catches SIGINT once it serves, so a forker started before and one
    // started after saw different dispositions until the commands' were fixed
    // (`child::ALWAYS_DEFAULT`).
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
            Ok(())
        });
    }
    if let Some(n) = nofile {
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    bound.hold(&mut cmd, None);
    let child = cmd.spawn().unwrap();
    Worker {
        child,
        url: format!("http://127.0.0.1:{port}"),
        root: dir.path().join("ws"),
        _dir: dir,
    }
}

/// Through the real worker (one sandbox, one forker, many commands): nothing a command does to
/// its own process crosses to the next through the forker: rlimits lowered, umask, a descriptor
/// left open, ignored signals, a lower priority, the working directory in `/tmp` (carried by the
/// runtime by design, so it is checked separately); a time-out kills a hopping chain and a
/// stopped daemon; and the forker killed from outside mid-command costs that command only (126),
/// stopped from outside it costs the next one about 5 s, never a wrong result. Weakened (the
/// per-command settings made in the forker instead of between fork and exec) the second
/// command reports the first one's values.
#[test]
fn a_long_lived_forker_carries_nothing_from_one_command_to_the_next() {
    use kube_harness_worker::api::model::ExecRequest;
    use kube_harness_worker::api::WorkerClient;
    if !root() {
        return;
    }
    let bound = Bound::new("worker", 300);
    let w = worker(&bound);
    let client = WorkerClient::new(&w.url, "attack-forker-token").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let exec = |script: &str, timeout_ms: Option<u64>| {
        let mut req = ExecRequest::new(script);
        req.timeout_ms = timeout_ms;
        rt.block_on(client.exec(&req))
            .unwrap_or_else(|e| panic!("{script:?}: {e}"))
            .outcome
    };
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.readyz().await.is_err() {
            assert!(Instant::now() < deadline, "the worker never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let probe = "echo \"$(ulimit -n) $(ulimit -v) $(umask)\"; \
                 [ -e /proc/$$/fd/7 ] && echo fd7-open || echo fd7-closed; \
                 grep -E '^Sig(Ign|Blk)' /proc/self/status; cut -d' ' -f19 /proc/$$/stat";
    let before = exec(probe, None);
    assert_eq!(before.exit_code, 0, "{}", before.stderr);
    // The masks are read by grep of itself: what the command's children inherit. Reading bash's
    // own (/proc/$$) raced bash's fork bookkeeping, which blocks SIGCHLD around each fork (CI saw
    // SigBlk 0x10000 once). Signals blocked or ignored when bash starts stay so in its children,
    // so anything the forker carried still shows here.
    // SIGHUP, SIGINT and SIGTERM at their default action whatever the worker had: bits 0, 1 and
    // 14 of SigIgn clear.
    let ignored = before
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:\t"))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .expect("SigIgn in the probe");
    assert_eq!(ignored & (1 | 1 << 1 | 1 << 14), 0, "{}", before.stdout);
    let forker = forker_of(w.child.id());
    let hostile = exec(
        "ulimit -n 12; ulimit -v 300000; umask 077; exec 7>/session/fd7; \
         trap '' TERM INT HUP USR1 USR2 PIPE; python3 -c 'import os; os.nice(15)'; \
         python3 -c 'import os, signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})'; \
         echo hostile-done",
        None,
    );
    assert_eq!(hostile.stdout, "hostile-done\n", "{}", hostile.stderr);
    let after = exec(probe, None);
    assert_eq!(
        after.stdout, before.stdout,
        "a command's own settings reached the next command through the forker: {}",
        after.stderr
    );
    assert!(before.stdout.contains("fd7-closed"), "{}", before.stdout);
    assert_eq!(forker_of(w.child.id()), forker, "the forker was replaced");

    // A time-out kills a hopping chain and a stopped daemon in a process group of its own.
    let chains = format!(
        "cat > /tmp/hop.py <<'KH_PY'\n{HOP}\nKH_PY\n\
         for i in 1 2 3; do python3 /tmp/hop.py /session/beat$i 8 & done\n\
         python3 -c 'import os, signal\nif os.fork() == 0:\n    os.setpgid(0, 0); os.kill(os.getpid(), signal.SIGSTOP)' khmark-worker-{}\n\
         sleep 30",
        std::process::id()
    );
    let started = Instant::now();
    let o = exec(&chains, Some(1500));
    assert_eq!((o.exit_code, o.timed_out), (124, true), "{}", o.stderr);
    assert!(started.elapsed() < Duration::from_secs(8));
    std::thread::sleep(Duration::from_millis(300));
    let first = beats(&w.root.join("session"));
    assert_eq!(first.len(), 3, "the chains did not run");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        beats(&w.root.join("session")),
        first,
        "a chain outlived its time-out"
    );
    assert_eq!(
        with_marker(&format!("khmark-worker-{}", std::process::id())),
        vec![]
    );

    // The forker killed from outside mid-command: that command is a 126 fault, the next runs.
    // (The time-out above ran on a sandbox of its own, one per `timeoutMs`: its forker is not
    // the default one, which is still the first.)
    assert!(forkers(w.child.id()).contains(&forker));
    let timed: Vec<u32> = forkers(w.child.id())
        .into_iter()
        .filter(|f| *f != forker)
        .collect();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        unsafe { libc::kill(forker as i32, libc::SIGKILL) };
    });
    let o = exec("sleep 3; echo survived", None);
    killer.join().unwrap();
    assert_eq!(o.exit_code, 126, "{} / {}", o.stdout, o.stderr);
    assert!(!o.stdout.contains("survived"));
    let o = exec("echo next-ok", None);
    assert_eq!(o.stdout, "next-ok\n", "{}", o.stderr);

    // Stopped from outside between commands: the next command waits about 5 s, then runs.
    let fresh: Vec<u32> = forkers(w.child.id())
        .into_iter()
        .filter(|f| !timed.contains(f) && *f != forker)
        .collect();
    assert_eq!(fresh.len(), 1, "one new default forker: {fresh:?}");
    let forker = fresh[0];
    unsafe { libc::kill(forker as i32, libc::SIGSTOP) };
    let started = Instant::now();
    let o = exec("echo after-stop", None);
    assert_eq!(o.stdout, "after-stop\n", "{}", o.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(exec(probe, None).stdout, before.stdout);
}

// ---------------------------------------------------------------------------------------------
// 6. The sandbox's private /tmp after the session
// ---------------------------------------------------------------------------------------------

/// The runtime directories (`kube-harness-sandbox-<pid>-…`, which hold the commands' private
/// /tmp) in `tmpdir`.
fn runtime_dirs(tmpdir: &Path) -> Vec<String> {
    std::fs::read_dir(tmpdir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("kube-harness-sandbox-"))
        .collect()
}

/// Runs `hostile` as one turn (with `TMPDIR` = a directory of this test, and the open-file soft
/// limit `nofile` for `local exec`), then a harmless turn (the "next sandbox of the same user",
/// which sweeps what dead processes left, section 8), and returns the runtime directories left
/// after each. Removes everything afterwards (as root, with `rm -rf`, which neither permissions
/// nor depth stop).
fn private_tmp_left(uid: Option<u32>, nofile: u64, hostile: &str) -> (Vec<String>, Vec<String>) {
    let bound = Bound::new(&format!("tmp-{}", uid.unwrap_or(0)), 100);
    let dir = home(uid);
    let tmpdir = home(uid);
    let turn = |script: &str| {
        let mut cmd = local(&bound, dir.path(), uid, "tmp", script);
        cmd.env("TMPDIR", tmpdir.path());
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: nofile,
                    rlim_max: nofile,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.output().unwrap()
    };
    let o = turn(hostile);
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "made\n".to_string()),
        "{}",
        show(&o)
    );
    let after_session = runtime_dirs(tmpdir.path());
    let o = turn("echo next");
    assert_eq!(text(&o.stdout), "next\n", "{}", show(&o));
    let after_sweep = runtime_dirs(tmpdir.path());
    let _ = Command::new("rm").arg("-rf").arg(tmpdir.path()).status();
    (after_session, after_sweep)
}

/// Broke (found 2026-12-02; fixed by the iterative `safe_fs::remove_tree_at`, which the runtime directory and the sweep now use): as the unprivileged local host, a command that leaves a directory
/// it made read-only in its private /tmp (`chmod 500`, a plain `chmod` on a directory it owns;
/// seccomp only refuses the setuid/setgid bits) makes the sandbox's runtime directory
/// `$TMPDIR/kube-harness-sandbox-<pid>-…` survive the session, silently (exit 0, nothing on
/// stderr), and the next sandbox's sweep of dead processes' runtime directories (section 8: "in
/// every case it removes the dead process's runtime directory") cannot remove it either: the
/// worker has no CAP_DAC_OVERRIDE outside the user namespace, and the removal does not first
/// give itself write permission back. What is inside stays on the host's TMPDIR for good (any
/// size the disk allows, each file up to RLIMIT_FSIZE), one more per session. As root the same
/// script leaves nothing (root overrides the mode).
#[test]
fn a_read_only_directory_in_the_private_tmp_leaves_nothing_behind_unprivileged() {
    if !root() {
        return;
    }
    let (after_session, after_sweep) = private_tmp_left(
        Some(NOBODY),
        1024,
        "mkdir -p /tmp/k/d && head -c 100000 /dev/zero > /tmp/k/d/f && chmod 000 /tmp/k/d && chmod 500 /tmp/k && echo made",
    );
    assert_eq!(
        (after_session, after_sweep),
        (vec![], vec![]),
        "runtime directories left after the session, and after the next sandbox's sweep"
    );
}

/// The same script as root leaves nothing: the control that the two turns, the sweep and the
/// listing above work (a runtime directory removed after its session is not listed).
#[test]
fn a_read_only_directory_in_the_private_tmp_leaves_nothing_behind_as_root() {
    if !root() {
        return;
    }
    let (after_session, after_sweep) = private_tmp_left(
        None,
        1024,
        "mkdir -p /tmp/k/d && head -c 100000 /dev/zero > /tmp/k/d/f && chmod 000 /tmp/k/d && chmod 500 /tmp/k && echo made",
    );
    assert_eq!((after_session, after_sweep), (vec![], vec![]));
}

/// Broke (found 2026-12-02; fixed by the iterative `safe_fs::remove_tree_at`, which the runtime directory and the sweep now use): a directory tree in the private /tmp deeper than `local exec`'s
/// open-file soft limit (3,000 levels here, made by python in a fraction of a second; 1024 is
/// the usual default soft limit, and on this machine's 20,000 a 29,741-level tree did the same)
/// makes the sandbox's runtime directory survive the session, as root too, silently, and the
/// next sandbox's sweep does not remove it: the removal keeps a descriptor open per level. The
/// docs promise the runtime directory goes (section 8) and no leftovers after a session.
#[test]
fn a_deep_tree_in_the_private_tmp_leaves_nothing_behind() {
    if !root() {
        return;
    }
    let (after_session, after_sweep) = private_tmp_left(
        None,
        1024,
        "python3 -c 'import os\nos.chdir(\"/tmp\")\nfor i in range(3000):\n    os.mkdir(\"d\"); os.chdir(\"d\")' && echo made",
    );
    assert_eq!(
        (after_session, after_sweep),
        (vec![], vec![]),
        "runtime directories left after the session, and after the next sandbox's sweep"
    );
}

/// Broke (found 2026-12-02; fixed by the iterative `safe_fs::remove_tree_at`, which the runtime directory and the sweep now use): a runtime directory a sandbox could not remove (the two tests
/// above), holding a tree about 30,000 levels deep, kills every later `kube-harness worker` of the
/// same user and TMPDIR whose open-file limit is above that depth (this machine's is 20,000;
/// container runtimes commonly give 1,048,576): when the worker builds a sandbox for a
/// `timeoutMs` it has not seen (section 16's sandboxes are per time limit, built on a runtime
/// thread with a 2 MiB stack), the sandbox's sweep of dead processes' runtime directories
/// (`leftovers::sweep_dead`, `std::fs::remove_dir_all`, one stack frame per level) overflows the
/// stack: `thread 'tokio-rt-worker' has overflowed its stack`, the whole worker aborts (SIGABRT),
/// the request gets no answer, and every later worker does the same (the tree is never removed).
/// Found when a 40,000-level tree made by a Tier-0 command as root (`python3 -c 'import os …
/// os.mkdir("d"); os.chdir("d")'`, 29,741 levels when its 60 s time limit ended it) was left in
/// /tmp and this file's worker test then died. Here the tree is made outside (a command needs
/// about a minute for that depth: landlock walks the whole path on every mkdir).
#[test]
fn a_deep_leftover_runtime_directory_does_not_crash_the_next_worker() {
    use kube_harness_worker::api::model::ExecRequest;
    use kube_harness_worker::api::WorkerClient;
    if !root() {
        return;
    }
    let bound = Bound::new("deep-worker", 100);
    // Removed with `rm -rf` whatever happens: `TempDir`'s own removal would overflow this
    // thread's stack on the tree below, as the worker's does.
    struct RmRf(tempfile::TempDir);
    impl Drop for RmRf {
        fn drop(&mut self) {
            let _ = Command::new("rm").arg("-rf").arg(self.0.path()).status();
        }
    }
    let tmpdir = RmRf(tempfile::tempdir().unwrap());
    let tmpdir = &tmpdir.0;
    // A process that is gone: its runtime directory is the sweep's to remove.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let left = tmpdir
        .path()
        .join(format!("kube-harness-sandbox-{dead}-AAAAAA"));
    let made = Command::new("python3")
        .args([
            "-c",
            "import os, sys\nos.makedirs(sys.argv[1]); os.chdir(sys.argv[1])\n\
             for i in range(30000):\n    os.mkdir('d'); os.chdir('d')",
        ])
        .arg(left.join("tmp"))
        .status()
        .unwrap();
    assert!(made.success());
    // The worker's open-file limit as high as this process may give (soft = hard): the removal
    // must not run out of descriptors before it runs out of stack (with 20,000, this machine's,
    // it overflows at about 19,900 levels; with 1,024 it stops at EMFILE and only leaves the
    // tree, which the tests above cover).
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) };
    let mut w = worker_with(
        &bound,
        Some(tmpdir.path()),
        Some(hard.rlim_max.min(1 << 20)),
    );
    let client = WorkerClient::new(&w.url, "attack-forker-token").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.readyz().await.is_err() {
            assert!(Instant::now() < deadline, "the worker never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let first = client.exec(&ExecRequest::new("echo default")).await;
        let mut req = ExecRequest::new("echo timed");
        req.timeout_ms = Some(4000);
        let second = client.exec(&req).await;
        (
            first.map(|r| r.outcome.stdout),
            second.map(|r| r.outcome.stdout),
        )
    });
    let status = w.child.try_wait().unwrap();
    drop(w);
    assert_eq!(
        (
            outcome.0.ok(),
            outcome.1.ok(),
            status.map(|s| s.to_string())
        ),
        (Some("default\n".into()), Some("timed\n".into()), None),
        "the worker (its exit status last) did not survive a deep leftover in TMPDIR"
    );
}

/// Broke (found 2026-12-02; fixed by the iterative `safe_fs::remove_tree_at`, which the runtime directory and the sweep now use), the same crash from inside the sandbox, with no leftover needed:
/// a Tier-0 command (here with `timeoutMs` 120000) makes a 21,000-level tree in its private
/// /tmp (`os.mkdir("d"); os.chdir("d")` in python: about 45 s, landlock walks the whole path on
/// every mkdir); the client then runs commands with other `timeoutMs` values (one sandbox each,
/// eight kept): seven answer, and the eighth evicts the deep one, whose drop removes its runtime
/// directory with `remove_dir_all` on a runtime thread (2 MiB stack) and overflows it: the
/// worker aborts (SIGABRT), that request and every later one have no answer, the session's
/// worker is gone. In a pod the open-file limit (commonly 1,048,576) never stops the removal
/// first. About 60 s. (Run as it is, it also shows the cross-session form: the tree, left in
/// the aborted worker's runtime directory, crashed the next worker of this test the same way
/// until removed.)
#[test]
#[ignore = "slow (about 60 s; passes since safe_fs::remove_tree_at): run by hand with --ignored"]
fn a_deep_tree_in_a_commands_tmp_does_not_crash_the_worker_when_its_sandbox_goes() {
    use kube_harness_worker::api::model::ExecRequest;
    use kube_harness_worker::api::WorkerClient;
    if !root() {
        return;
    }
    let bound = Bound::new("deep-evict", 300);
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) };
    let mut w = worker_with(&bound, None, Some(hard.rlim_max.min(1 << 20)));
    let client = WorkerClient::new(&w.url, "attack-forker-token").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let answers = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.readyz().await.is_err() {
            assert!(Instant::now() < deadline, "the worker never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut req = ExecRequest::new(
            "python3 -c 'import os\nos.chdir(\"/tmp\")\nfor i in range(21000):\n    os.mkdir(\"d\"); os.chdir(\"d\")' && echo deep",
        );
        req.timeout_ms = Some(120_000);
        let mut answers = vec![client.exec(&req).await.map(|r| r.outcome.stdout)];
        for t in 0..9 {
            let mut req = ExecRequest::new("echo other");
            req.timeout_ms = Some(5_001 + t);
            answers.push(client.exec(&req).await.map(|r| r.outcome.stdout));
        }
        answers
    });
    let status = w.child.try_wait().unwrap();
    // The tree is in the worker's own runtime directory under /tmp: remove it whatever happened.
    let pid = w.child.id();
    drop(w);
    for e in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with(&format!("kube-harness-sandbox-{pid}-"))
        {
            let _ = Command::new("rm").arg("-rf").arg(e.path()).status();
        }
    }
    let answers: Vec<Option<String>> = answers.into_iter().map(|a| a.ok()).collect();
    let mut want = vec![Some("deep\n".to_string())];
    want.extend(std::iter::repeat_n(Some("other\n".to_string()), 9));
    assert_eq!(
        (answers, status.map(|s| s.to_string())),
        (want, None),
        "the worker (its exit status last) did not survive the eviction of a sandbox whose /tmp holds a deep tree"
    );
}
