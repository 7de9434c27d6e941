//! Issue 29, item 7, from outside: a command's CPU priority through the real binary, as root and
//! as uid 65533. A worker started under `chrt -f 10` passed its real-time policy on to every
//! command, where a busy loop would hold a CPU at real-time priority (and, as root, the command's
//! cpu cgroup refused it: every command failed with 126). Now every command runs under the
//! normal policy, 10 nice levels below its worker, and cannot go back.

use super::support::bound::Bound;
use super::support::{home, local_exec, show, text};
use std::os::unix::process::CommandExt;

#[test]
fn a_command_never_inherits_a_real_time_policy_or_its_workers_priority() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let bound = Bound::new("cpu", 200);
    for uid in [None, Some(65533)] {
        let dir = home(uid);
        let mut cmd = local_exec(
            dir.path(),
            "c",
            // Fields 19 and 41 of /proc/PID/stat: the nice value and the scheduling policy.
            "awk '{print $19, $41}' /proc/self/stat; ulimit -r; ulimit -e",
        );
        // Real-time first, as root (`chrt -f 10`); the bound then drops to the uid (a plain uid
        // could not take a real-time policy itself).
        // SAFETY: sched_setscheduler is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                let param = libc::sched_param { sched_priority: 10 };
                if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        bound.hold(&mut cmd, uid);
        let o = cmd.output().unwrap();
        assert_eq!(
            (o.status.code(), text(&o.stdout)),
            (Some(0), "10 0\n0\n0\n".to_string()),
            "uid {uid:?}: {}",
            show(&o)
        );
    }
}
