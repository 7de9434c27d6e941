//! The attacker's suite against the sandbox's forker (issue 16): the long-lived, confined process
//! per sandbox that forks every command's supervisor. A command must not reach it (signals,
//! /proc, ptrace, its socket), and its death must cost at most the commands in flight, each
//! with a 126 fault, never the next command. Both presentations; as root here.

use super::util::*;
use kube_harness_sandbox::probe;
use std::path::Path;
use std::time::{Duration, Instant};

/// Landlock's signal scope (ABI 6) is what keeps a command's signals off the forker; without
/// it the forker can be killed (and is replaced).
fn signals_scoped() -> bool {
    probe().landlock_abi.unwrap_or(0) >= 6
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|st| !st.contains(") Z ") && !st.contains(") X "))
}

/// The forker is confined before it forks anything: seccomp filter, no_new_privs, and (as
/// root) no capabilities, as its /proc status shows from outside.
#[test]
fn the_forker_itself_runs_confined() {
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        // The forker confines itself when it reads its setup: after the first command at latest.
        let o = run(&sb, &cwd, "true");
        assert_eq!(o.exit_code, 0, "{mode}: {}", show(&o));
        let pid = sb.forker_pid().expect("a forker runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        assert_eq!(field("Seccomp"), "2", "{mode}: {status}");
        assert_eq!(field("NoNewPrivs"), "1", "{mode}: {status}");
        if unsafe { libc::geteuid() } == 0 {
            for caps in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
                assert_eq!(field(caps), "0000000000000000", "{mode} {caps}: {status}");
            }
        }
        // Its name says what it is; none of the worker's memory came along (a fresh exec).
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
        assert_eq!(cmdline, "kube-harness-sandbox-forker\0", "{mode}");
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(comm, "kh-sandbox-fork\n", "{mode}");
    }
}

#[test]
fn a_command_cannot_signal_the_forker_or_its_supervisor() {
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        run(&sb, &cwd, "true");
        let forker = sb.forker_pid().expect("a forker runs");
        let o = run(
            &sb,
            &cwd,
            &format!(
                "kill -STOP {forker} 2>/dev/null; echo stop:$?; kill -9 $PPID 2>/dev/null; \
                 echo supervisor:$?; kill -9 {forker}; echo kill:$?"
            ),
        );
        if signals_scoped() {
            assert_eq!(
                (o.exit_code, text(&o.stdout)),
                (0, "stop:1\nsupervisor:1\nkill:1\n".to_string()),
                "{mode}: {}",
                show(&o)
            );
            assert!(
                text(&o.stderr).contains("Operation not permitted"),
                "{mode}: {}",
                show(&o)
            );
            assert!(alive(forker), "{mode}: the forker died");
            assert_eq!(sb.forker_pid(), Some(forker), "{mode}");
        }
        // Whatever the kernel allowed, the next command runs (on a new forker if need be).
        let o = run(&sb, &cwd, "echo next");
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (0, "next\n".to_string()),
            "{mode}: {}",
            show(&o)
        );
    }
}

/// Python that tries every way into another process's memory and descriptors on the pids it
/// is given, and prints `what:result` per line.
const INTO_ANOTHER: &str = r#"
import ctypes, errno, os, sys
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
def descriptors(pid):
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError as e:
        return errno.errorcode[e.errno]
    seen = set()
    for n in names:
        for how, fn in [("link", os.readlink), ("open", lambda p: os.close(os.open(p, os.O_RDONLY)))]:
            try:
                fn(f"/proc/{pid}/fd/{n}")
                seen.add(f"{how}-ok")
            except OSError as e:
                seen.add(f"{how}-{errno.errorcode[e.errno]}")
    return ",".join(sorted(seen)) or "none"
for who, pid in zip(["forker", "supervisor"], map(int, sys.argv[1:])):
    attempt(f"{who}-mem", lambda: os.read(os.open(f"/proc/{pid}/mem", os.O_RDONLY), 1))
    attempt(f"{who}-environ", lambda: os.read(os.open(f"/proc/{pid}/environ", os.O_RDONLY), 1))
    attempt(f"{who}-maps", lambda: os.read(os.open(f"/proc/{pid}/maps", os.O_RDONLY), 1))
    print(f"{who}-fds:{descriptors(pid)}")
    attempt(f"{who}-ptrace", sc(101, 16, pid, 0, 0))
    attempt(f"{who}-vm-read", sc(310, pid, 0, 0, 0, 0, 0))
    attempt(f"{who}-pidfd-getfd", sc(438, 3, 10, 0))
"#;

#[test]
fn a_command_cannot_read_the_forker_or_supervisor_memory_or_descriptors() {
    let data = Data::new();
    std::fs::write(data.path("session/into.py"), INTO_ANOTHER).unwrap();
    for (mode, sb, cwd) in both(&data) {
        run(&sb, &cwd, "true");
        let forker = sb.forker_pid().expect("a forker runs");
        let o = run(&sb, &cwd, &format!("python3 into.py {forker} $PPID"));
        assert_eq!(o.exit_code, 0, "{mode}: {}", show(&o));
        let mut want = String::new();
        let root = unsafe { libc::geteuid() } == 0;
        for who in ["forker", "supervisor"] {
            // /proc access checks are landlock's (another domain: EACCES); ptrace,
            // process_vm_readv and pidfd_getfd are refused by seccomp (EPERM). The descriptor
            // numbers may be listed (uid 0 owns the directory), none followed or opened. In the
            // namespace as root the sandbox's own procfs does not even list them (ENOENT).
            let (proc_file, fds) = match (mode, root) {
                ("namespace", true) => ("ENOENT", "ENOENT"),
                (_, true) => ("EACCES", "link-EACCES,open-EACCES"),
                (_, false) => ("EACCES", "EACCES"),
            };
            for (what, result) in [
                ("mem", proc_file),
                ("environ", proc_file),
                ("maps", proc_file),
                ("fds", fds),
                ("ptrace", "EPERM"),
                ("vm-read", "EPERM"),
                ("pidfd-getfd", "EPERM"),
            ] {
                want.push_str(&format!("{who}-{what}:{result}\n"));
            }
        }
        assert_eq!(text(&o.stdout), want, "{mode}: {}", show(&o));
    }
}

/// The forker's socket (and every other descriptor of the forker and the supervisor) stays out
/// of the command: bash has exactly stdin, stdout, stderr and the state descriptor.
#[test]
fn no_descriptor_of_the_forker_reaches_a_command() {
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        // `; true`: bash must not exec ls in its place.
        let o = run(&sb, &cwd, "ls -l /proc/$$/fd; true");
        assert_eq!(o.exit_code, 0, "{mode}: {}", show(&o));
        let listing = text(&o.stdout);
        let fds: Vec<(String, String)> = listing
            .lines()
            .filter_map(|l| l.split_once(" -> "))
            .map(|(left, target)| {
                let fd = left.split_whitespace().last().unwrap_or_default();
                (fd.to_string(), target.to_string())
            })
            .collect();
        let numbers: Vec<&str> = fds.iter().map(|(fd, _)| fd.as_str()).collect();
        assert_eq!(numbers, ["0", "1", "2", "3"], "{mode}: {listing}");
        assert_eq!(fds[0].1, "/dev/null", "{mode}: {listing}");
        for (fd, target) in &fds[1..] {
            assert!(target.starts_with("pipe:"), "{mode}: fd {fd} -> {target}");
        }
        assert!(!listing.contains("socket"), "{mode}: {listing}");
    }
}

/// Two commands at once: both run to the end in parallel, and neither can signal the other
/// (each has a landlock domain of its own, below the forker's).
#[test]
fn two_commands_at_once_run_side_by_side_and_cannot_reach_each_other() {
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        let _ = std::fs::remove_file(data.path("session/a.pid"));
        let a = inv("echo $$ > a.pid; sleep 1; echo A", &cwd);
        let b = inv(
            "while [ ! -s a.pid ]; do sleep 0.05; done; kill -0 $(cat a.pid) 2>/dev/null; \
             echo kill:$?; echo B",
            &cwd,
        );
        let started = Instant::now();
        let (oa, ob) = rt().block_on(async { tokio::join!(sb.run(&a), sb.run(&b)) });
        let took = started.elapsed();
        assert_eq!(
            (oa.exit_code, text(&oa.stdout)),
            (0, "A\n".to_string()),
            "{mode}: {}",
            show(&oa)
        );
        let kill = if signals_scoped() { "kill:1" } else { "kill:0" };
        assert_eq!(
            (ob.exit_code, text(&ob.stdout)),
            (0, format!("{kill}\nB\n")),
            "{mode}: {}",
            show(&ob)
        );
        assert!(took < Duration::from_millis(1900), "{mode}: took {took:?}");
    }
}

/// The forker dies while a command runs (here killed from outside, as a command could on a
/// kernel without landlock's signal scope): that command ends with a 126 fault and its whole
/// tree is killed; the next command gets a new forker and runs.
#[test]
fn a_command_in_flight_when_the_forker_dies_is_a_126_fault_and_the_next_one_runs() {
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        let _ = std::fs::remove_file(data.path("session/sleep.pid"));
        run(&sb, &cwd, "true");
        let forker = sb.forker_pid().expect("a forker runs");
        let pid_file = data.path("session/sleep.pid");
        let started = Instant::now();
        let script = inv(
            "echo started; sleep 3017 & echo $! > sleep.pid; wait; echo never",
            &cwd,
        );
        let o = rt().block_on(async {
            let killer = async {
                while !pid_file.exists() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                unsafe { libc::kill(forker as i32, libc::SIGKILL) };
            };
            let (o, ()) = tokio::join!(sb.run(&script), killer);
            o
        });
        assert_eq!(o.exit_code, 126, "{mode}: {}", show(&o));
        assert_eq!(text(&o.stdout), "started\n", "{mode}: {}", show(&o));
        assert!(
            text(&o.stderr)
                .contains("kube-harness: the sandbox's forker process ended while the command ran"),
            "{mode}: {}",
            show(&o)
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{mode}: {:?}",
            started.elapsed()
        );
        let sleeper: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while alive(sleeper) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(sleeper), "{mode}: the command's tree survived");

        let o = run(&sb, &cwd, "echo next");
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (0, "next\n".to_string()),
            "{mode}: {}",
            show(&o)
        );
        let new = sb.forker_pid().expect("a new forker runs");
        assert_ne!(new, forker, "{mode}");
        assert!(alive(new), "{mode}");
    }
}

/// A forker that is gone between commands (killed, or stopped for good) is replaced before the
/// next command, which runs normally.
#[test]
fn a_forker_gone_between_commands_is_replaced() {
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        for sig in [libc::SIGKILL, libc::SIGTERM] {
            run(&sb, &cwd, "true");
            let forker = sb.forker_pid().expect("a forker runs");
            unsafe { libc::kill(forker as i32, sig) };
            let deadline = Instant::now() + Duration::from_secs(2);
            while alive(forker) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let o = run(&sb, &cwd, "echo again");
            assert_eq!(
                (o.exit_code, text(&o.stdout)),
                (0, "again\n".to_string()),
                "{mode} signal {sig}: {}",
                show(&o)
            );
            assert_ne!(sb.forker_pid(), Some(forker), "{mode}");
        }
    }
}

/// The forker ends with its sandbox, and so does the spare supervisor it keeps ready: nothing
/// is left running once the sandbox is dropped.
#[test]
fn dropping_the_sandbox_ends_its_forker_and_its_spare() {
    let data = Data::new();
    for (mode, sb, cwd) in both(&data) {
        run(&sb, &cwd, "true");
        let forker = sb.forker_pid().expect("a forker runs");
        // Its children: the spare, once the last command's supervisor has finished exiting.
        let children = || {
            std::fs::read_to_string(format!("/proc/{forker}/task/{forker}/children"))
                .unwrap()
                .split_whitespace()
                .map(|p| p.parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        while children().len() > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let spares = children();
        assert_eq!(spares.len(), 1, "{mode}: {spares:?}");
        drop(sb);
        assert!(
            !Path::new(&format!("/proc/{forker}")).exists(),
            "{mode}: the forker {forker} outlived its sandbox"
        );
        let deadline = Instant::now() + Duration::from_secs(2);
        while alive(spares[0]) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(spares[0]), "{mode}: the spare outlived its forker");
    }
}

/// A forker that stops answering (stopped here with SIGSTOP, with its spare, from outside) holds
/// a command 5 s: then the stopped forker and spare are killed, and the command, which nothing
/// had started, runs on a new forker.
#[test]
fn a_wedged_forker_delays_one_command_5_s_and_is_replaced() {
    let data = Data::new();
    let sb = direct_sandbox(&data, false, vec![]);
    let cwd = data.path("session");
    run(&sb, &cwd, "true");
    let forker = sb.forker_pid().expect("a forker runs");
    // Once the last command's supervisor has gone, the forker's one child is its spare.
    let children = || {
        std::fs::read_to_string(format!("/proc/{forker}/task/{forker}/children"))
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse::<u32>().unwrap())
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while children().len() != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let stopped: Vec<u32> = std::iter::once(forker).chain(children()).collect();
    assert_eq!(stopped.len(), 2, "{stopped:?}");
    for pid in &stopped {
        unsafe { libc::kill(*pid as i32, libc::SIGSTOP) };
    }
    let started = Instant::now();
    let o = run(&sb, &cwd, "echo ran");
    let took = started.elapsed();
    // Nothing was started by the stopped forker, so the command is sent again, to a new one.
    assert_eq!(
        (o.exit_code, text(&o.stdout), text(&o.stderr)),
        (0, "ran\n".to_string(), String::new()),
        "{}",
        show(&o)
    );
    assert_ne!(sb.forker_pid(), Some(forker));
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "took {took:?}"
    );
    // The stopped forker and its stopped spare are gone (a stopped process does not die of its
    // parent's death signal: the worker kills both as one process group).
    let deadline = Instant::now() + Duration::from_secs(2);
    while stopped.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left: Vec<&u32> = stopped.iter().filter(|p| alive(**p)).collect();
    assert!(left.is_empty(), "stopped processes left behind: {left:?}");
    let o = run(&sb, &cwd, "echo next");
    assert_eq!(
        (o.exit_code, text(&o.stdout)),
        (0, "next\n".to_string()),
        "{}",
        show(&o)
    );
}
