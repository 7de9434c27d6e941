//! Issue 29's second outside attack (after the fixes): budgets every process of a uid shares
//! across the host. A command kept about 1,250 descriptors in flight in a socketpair of its own
//! (`SCM_RIGHTS`): the kernel counts them per uid and checks every sender against its own soft
//! `RLIMIT_NOFILE`, so with a worker started at the usual login default (1024) no other command
//! of that uid could start: the worker could not pass the pipes to the forker, nor the forker its
//! pidfd back (126 as root, exit 2 unprivileged, on the build before this test). Now the sandbox
//! raises its worker's soft limit to the hard one (the forker inherits it), above what any
//! command may hold in flight. What stays shared is in docs/security-model.md, "Host-wide kernel
//! budgets".

use super::support::bound::Bound;
use super::support::{home, local_exec, show, text};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const HOLD: &str = r#"
import array, os, socket, time
a, b = socket.socketpair()
fds = array.array("i", [os.open("/dev/null", os.O_RDONLY) for _ in range(250)])
n = 0
try:
    while True:
        a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        n += 250
except OSError:
    pass
open("/session/holding", "w").write(str(n))
time.sleep(8)
"#;

/// `kube-harness local exec` in `dir` as `uid`, started with a soft `RLIMIT_NOFILE` of 1024 (the
/// usual login default).
fn at_1024(bound: &Bound, dir: &Path, uid: Option<u32>, session: &str, script: &str) -> Command {
    let mut cmd = local_exec(dir, session, script);
    // SAFETY: getrlimit/setrlimit are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_cur = 1024;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    bound.hold(&mut cmd, uid);
    cmd
}

#[test]
fn descriptors_held_in_flight_by_one_command_stop_no_other_command() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let bound = Bound::new("inflight", 300);
    for uid in [None, Some(65533)] {
        let dir = home(uid);
        let script = format!("python3 - <<'KH_PY'\n{HOLD}\nKH_PY\n");
        let mut attacker = at_1024(&bound, dir.path(), uid, "attacker", &script)
            .spawn()
            .unwrap();
        let holding = dir
            .path()
            .join(".little-harness/sessions/attacker/session/holding");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !holding.exists() {
            assert!(
                Instant::now() < deadline,
                "uid {uid:?}: the attacker never held"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let held: u32 = std::fs::read_to_string(&holding)
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0);
        assert!(held >= 1000, "uid {uid:?}: only {held} in flight");
        let o = at_1024(&bound, dir.path(), uid, "victim", "echo ran")
            .output()
            .unwrap();
        assert_eq!(
            (o.status.code(), text(&o.stdout)),
            (Some(0), "ran\n".to_string()),
            "uid {uid:?}: another session's command while {held} descriptors are in flight: {}",
            show(&o)
        );
        let _ = attacker.kill();
        let _ = attacker.wait();
    }
}
