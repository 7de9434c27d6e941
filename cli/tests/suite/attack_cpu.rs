//! Issue 29, item 7, from outside: a command's CPU priority through the real binary, as root and
//! as uid 65533. A worker started under `chrt -f 10` passed its real-time policy on to every
//! command, where a busy loop would hold a CPU at real-time priority (and, as root, the command's
//! cpu cgroup refused it: every command failed with 126). Now every command runs under the
//! normal policy, 10 nice levels below its worker, and cannot go back.

use super::support::bound::Bound;
use super::support::{kh, show, text};

#[test]
fn a_command_never_inherits_a_real_time_policy_or_its_workers_priority() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let bound = Bound::new("cpu", 200);
    for uid in [None, Some(65533)] {
        let dir = tempfile::tempdir().unwrap();
        if let Some(uid) = uid {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid)).unwrap();
        }
        // Real-time first, as root; then, for the unprivileged run, the uid (a plain uid could
        // not take a real-time policy itself).
        let mut cmd = std::process::Command::new("chrt");
        cmd.args(["-f", "10"]);
        if let Some(uid) = uid {
            let id = uid.to_string();
            cmd.args(["setpriv", "--reuid", &id, "--regid", &id, "--clear-groups"]);
        }
        cmd.arg(kh(dir.path()).get_program())
            .args(["local", "exec", "--session", "c", "--tier1", "none", "--"])
            // Fields 19 and 41 of /proc/PID/stat: the nice value and the scheduling policy.
            .arg("awk '{print $19, $41}' /proc/self/stat; ulimit -r; ulimit -e")
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .env("KUBE_HARNESS_LOG", "error");
        bound.hold(&mut cmd, None);
        let o = cmd.output().unwrap();
        assert_eq!(
            (o.status.code(), text(&o.stdout)),
            (Some(0), "10 0\n0\n0\n".to_string()),
            "uid {uid:?}: {}",
            show(&o)
        );
    }
}
