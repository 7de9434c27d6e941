//! The agent as the reaper of everything its commands leave behind. Between commands the agent
//! runs no process of its own, so any other process there is a leftover of a command (`setsid`,
//! a daemon, a fork loop): ended, and the pod given up when that cannot be done in time.
//!
//! In a pod the agent is PID 1 of the container's PID namespace, and the commands run as its
//! own uid: `kill(-1, SIGKILL)` then reaches every other process of the namespace in one call
//! that a fork cannot outrun (the kernel signals them under the task list lock, and a fork in
//! progress in a process being killed fails), and nothing can hide from it by leaving the
//! command's process group or session or by re-parenting. Elsewhere (tests, development) the
//! agent is made a child subreaper instead, so an orphan is re-parented to it; there it kills
//! its children generation by generation (never a pid it does not own, which cannot be reused
//! before it is reaped). Either way it repeats until `/proc` shows nothing left, within a time
//! bound: what outlasts the bound (a process of another uid, one stuck in the kernel, a fork
//! loop faster than the subreaper's rounds) makes the agent refuse every later turn.

use std::time::{Duration, Instant};

/// The default of `AgentConfig::reap_bound`: far beyond what ending a tree takes (milliseconds
/// in a pod), short enough not to hold a command's answer long when it fails.
pub const REAP_BOUND: Duration = Duration::from_secs(10);

/// Why what a command left could not all be ended.
#[derive(Debug, thiserror::Error)]
pub enum ReapError {
    #[error(
        "{} process(es) the command left were still running after {bound:?} (pids {pids:?})",
        pids.len()
    )]
    Survivors {
        pids: Vec<libc::pid_t>,
        bound: Duration,
    },
    #[error("listing the processes in /proc: {0}")]
    Proc(#[source] std::io::Error),
}

/// Marks this process as the reaper of its orphaned descendants (a no-op for PID 1).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// SIGKILLs and reaps every process this agent can see but itself (as PID 1 of its namespace),
/// or every descendant (as a subreaper), until none is left or `bound` has passed. Call only
/// when no process of the agent's own is meant to be running (the agent's queue is held and the
/// command has been waited for).
pub fn end_leftovers(bound: Duration) -> Result<(), ReapError> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let started = Instant::now();
    loop {
        reap_exited();
        let left = match me {
            1 => others(me)?,
            _ => children_of(me)?,
        };
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= bound {
            return Err(ReapError::Survivors { pids: left, bound });
        }
        match me {
            // SAFETY: kill(2); -1 is every process of this PID namespace that this uid may
            // signal, except the caller (PID 1).
            1 => unsafe {
                libc::kill(-1, libc::SIGKILL);
            },
            _ => {
                for pid in &left {
                    // SAFETY: signalling a process whose parent is us (it cannot be reused
                    // before we reap it).
                    unsafe { libc::kill(*pid, libc::SIGKILL) };
                }
            }
        }
        reap_exited();
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Reaps every child that has exited (orphans re-parented to the agent included).
fn reap_exited() {
    loop {
        let mut status = 0;
        // SAFETY: reaping our own children.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if r <= 0 {
            return;
        }
    }
}

/// Every pid in `/proc` but `me`.
fn others(me: libc::pid_t) -> Result<Vec<libc::pid_t>, ReapError> {
    Ok(pids()?.into_iter().filter(|p| *p != me).collect())
}

/// Pids whose parent is `parent`, from `/proc/<pid>/stat` (one that is gone meanwhile is not).
fn children_of(parent: libc::pid_t) -> Result<Vec<libc::pid_t>, ReapError> {
    Ok(pids()?
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parent_of(&stat))
                == Some(parent)
        })
        .collect())
}

/// Every process (thread group) in `/proc`.
fn pids() -> Result<Vec<libc::pid_t>, ReapError> {
    let dir = std::fs::read_dir("/proc").map_err(ReapError::Proc)?;
    let mut pids = Vec::new();
    for entry in dir {
        let entry = entry.map_err(ReapError::Proc)?;
        if let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            pids.push(pid);
        }
    }
    Ok(pids)
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
