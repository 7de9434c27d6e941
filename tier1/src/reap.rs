//! The agent as the reaper of its commands' descendants. It is PID 1 of its container (or made a
//! child subreaper), so a process that left the command's process group (`setsid`, a daemon)
//! is re-parented to it when its parent exits. Between commands the agent has no children of
//! its own, so any child it has then is such a leftover: killed and reaped, never accumulated.

use std::time::Duration;

/// Marks this process as the reaper of its orphaned descendants (a no-op for PID 1).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// SIGKILLs and reaps every child of this process. Call only when no child is meant to be
/// running (the agent's queue is held and the command has been waited for).
pub fn kill_all_children() {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    for _ in 0..200 {
        let children = children_of(me);
        if children.is_empty() {
            return;
        }
        for pid in &children {
            // SAFETY: signalling a process whose parent is us (it cannot be reused before we
            // reap it).
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        loop {
            let mut status = 0;
            // SAFETY: reaping our own children.
            let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if r <= 0 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Pids whose parent is `parent`, from `/proc/<pid>/stat`.
fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parent_of(&stat))
                == Some(parent)
        })
        .collect()
}

/// The ppid field of a `/proc/<pid>/stat` line (the command name may contain spaces and
/// parentheses, so fields are counted after the last `)`).
fn parent_of(stat: &str) -> Option<libc::pid_t> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_parent_after_an_odd_command_name() {
        assert_eq!(parent_of("42 (a) b (c)) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of("garbage"), None);
    }
}
