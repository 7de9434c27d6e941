//! The parent side of one run: pipes, spawn, capped draining of stdout/stderr/state, the
//! supervisor's status record, and a backstop for a supervisor that stops answering.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::child::{self, KIND_TIMED_OUT};
use super::config::MAX_SCRIPT_ARG;
use super::forker::{self, Forker, Request, StartError};
use super::{Invocation, Limits, Outcome, OutputChunk, OutputStream, OutputTap};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

/// How long past the timeout the parent waits for the supervisor before killing it itself.
const BACKSTOP: Duration = Duration::from_secs(5);
/// How long the pipes may stay open once the supervisor has reported.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// What the worker keeps per sandbox to start commands.
pub struct Plan {
    pub forker: Forker,
    /// Per-command pids cgroups (uid 0 only: see [`super::cgroup`]).
    pub pids: Option<super::cgroup::Pids>,
}

pub async fn run(
    plan: &Arc<Plan>,
    limits: &Limits,
    base_env: &BTreeMap<String, String>,
    inv: &Invocation,
) -> Outcome {
    let start = Instant::now();
    match run_inner(plan, limits, base_env, inv, start).await {
        Ok(o) => o,
        Err(reason) => Outcome::fault(reason, start.elapsed()),
    }
}

async fn run_inner(
    plan: &Arc<Plan>,
    limits: &Limits,
    base_env: &BTreeMap<String, String>,
    inv: &Invocation,
    start: Instant,
) -> Result<Outcome, String> {
    if inv.script.len() > MAX_SCRIPT_ARG {
        return Err(format!(
            "script is {} bytes; the Tier-0 sandbox takes at most {MAX_SCRIPT_ARG}",
            inv.script.len()
        ));
    }
    if inv.script.contains('\0') {
        return Err("script contains a NUL byte".into());
    }
    if !inv.cwd.is_absolute() {
        return Err(format!(
            "working directory {} is not absolute",
            inv.cwd.display()
        ));
    }
    let cwd = child::cwd_cstring(&inv.cwd)
        .ok_or_else(|| "working directory contains a NUL byte".to_string())?;
    for (k, v) in &inv.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(format!("invalid environment variable {k:?}"));
        }
    }

    // The command's pids cgroup (uid 0): returned to the pool once the supervisor has reported.
    let slot = match &plan.pids {
        Some(pids) => Some(pids.take().map_err(|e| e.to_string())?),
        None => None,
    };
    let slot = SlotGuard { plan, slot };

    // bash -c SCRIPT with this environment, in this directory (or HOME).
    let mut env = base_env.clone();
    env.extend(inv.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let home = env.get("HOME").cloned().unwrap_or_default();
    let size = env.iter().fold(inv.script.len(), |n, (k, v)| {
        n.saturating_add(k.len())
            .saturating_add(v.len())
            .saturating_add(2)
    });
    let mut payload = Vec::with_capacity(
        size.saturating_add(cwd.as_bytes().len())
            .saturating_add(home.len())
            .saturating_add(3),
    );
    payload.extend_from_slice(inv.script.as_bytes());
    payload.push(0);
    for (k, v) in &env {
        payload.extend_from_slice(k.as_bytes());
        payload.push(b'=');
        payload.extend_from_slice(v.as_bytes());
        payload.push(0);
    }
    payload.extend_from_slice(cwd.as_bytes_with_nul());
    payload.extend_from_slice(home.as_bytes());
    payload.push(0);

    // Sent once more (to a new forker) only when the status pipe says nothing was started: a
    // forker that dies while its spare takes the request, say.
    let mut sent_before = false;
    let (stdout, stderr, state, mut status, guard, never_started, head) = loop {
        let (stdout_r, stdout_w) = pipe().map_err(|e| format!("creating a pipe: {e}"))?;
        let (stderr_r, stderr_w) = pipe().map_err(|e| format!("creating a pipe: {e}"))?;
        let (state_r, state_w) = pipe().map_err(|e| format!("creating a pipe: {e}"))?;
        let (status_r, status_w) = pipe().map_err(|e| format!("creating a pipe: {e}"))?;
        let request = Request {
            payload: &payload,
            env_count: env.len() as u32,
            pipes: [
                stdout_w.as_raw_fd(),
                stderr_w.as_raw_fd(),
                state_w.as_raw_fd(),
                status_w.as_raw_fd(),
            ],
            cgroup: slot.slot.as_ref().map(|s| {
                let kill = s.kill_fd();
                (s.procs_w(), s.procs_r(), (kill >= 0).then_some(kill))
            }),
            cpu: slot.slot.as_ref().and_then(|s| s.cpu_w()),
        };
        let started = plan.forker.start(&request).await;
        // The supervisor has its copies (or none was made): ours go, so the pipes end with it.
        drop((stdout_w, stderr_w, state_w, status_w));
        let pidfd = match started {
            Ok(s) => Some(s.pidfd),
            Err(StartError::Lost) => None,
            Err(StartError::Fault(why)) => return Err(why),
        };
        let mut guard = CancelGuard { pidfd, armed: true };
        let stdout = receiver(stdout_r)?;
        let stderr = receiver(stderr_r)?;
        let state = receiver(state_r)?;
        let mut status = receiver(status_r)?;
        // The supervisor writes STARTING and its pid before it starts the command, the
        // command's pid once it has (before the command can produce output), then the result
        // once every process of the tree is gone.
        let mut head = [0u8; child::HEAD];
        let got = tokio::time::timeout(BACKSTOP, read_up_to(&mut status, &mut head)).await;
        let head_len = match got {
            Ok(Ok(n)) => n,
            _ => 0,
        };
        let never_started = matches!(got, Ok(Ok(0)));
        if never_started && !sent_before {
            guard.armed = false;
            sent_before = true;
            continue;
        }
        let head = head.get(..head_len).unwrap_or_default().to_vec();
        break (stdout, stderr, state, status, guard, never_started, head);
    };
    // The supervisor's and the command's pids (0 while unknown: the supervisor was slow).
    let pid_at = |head: &[u8], at: usize| match head.get(at..at.saturating_add(4)) {
        Some(&[a, b, c, d]) => i32::from_le_bytes([a, b, c, d]),
        _ => 0,
    };
    let (supervisor_pid, cmd_pid) = (pid_at(&head, 1), pid_at(&head, 5));
    let out_cap = limits.max_output_bytes;
    let mut rest = Vec::with_capacity(5);
    let mut backstop_fired = false;
    let tap = inv.output.as_ref();
    let (out, err, st) = {
        let all = async {
            let (out, err, st, _) = tokio::join!(
                read_capped(stdout, out_cap, tap.map(|t| (t, OutputStream::Stdout))),
                read_capped(stderr, out_cap, tap.map(|t| (t, OutputStream::Stderr))),
                read_capped(state, limits.max_state_bytes, None),
                status.read_to_end(&mut rest),
            );
            (out, err, st)
        };
        tokio::pin!(all);
        // A streaming caller that goes away cancels the command: SIGTERM to the supervisor,
        // which kills the whole tree and reports it cancelled; the pipes are drained as usual.
        let watched = async {
            let gone = async {
                match tap {
                    Some(tap) => tap.closed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                done = &mut all => done,
                () = gone => {
                    guard.signal(libc::SIGTERM);
                    (&mut all).await
                }
            }
        };
        tokio::pin!(watched);
        match tokio::time::timeout(limits.timeout.saturating_add(BACKSTOP), &mut watched).await {
            Ok(r) => r,
            Err(_) => {
                backstop_fired = true;
                guard.signal(libc::SIGKILL);
                kill_group(cmd_pid);
                tokio::time::timeout(DRAIN_GRACE, &mut watched)
                    .await
                    .unwrap_or_default()
            }
        }
    };
    // Whatever of the head came late is in front of the record.
    let mut status_bytes = head;
    status_bytes.extend_from_slice(&rest);
    let record = status_bytes.get(child::HEAD..).unwrap_or_default();
    // The supervisor has reported (or was killed): the forker's kernel-side reaping takes it.
    let mut guard = guard;
    guard.armed = false;
    drop(slot);

    let mut outcome = Outcome {
        stdout: out.0,
        stdout_truncated: out.1,
        stderr: err.0,
        stderr_truncated: err.1,
        state: st.0,
        state_truncated: st.1,
        ..Outcome::default()
    };
    // A supervisor whose forker is gone (it reported so, or the forker never answered) may be
    // the worker's child now (where it adopts orphans): waited for. Without the forker's answer
    // there is no pidfd: by pid then, only to wait for it, which fails unless it is the worker's
    // own child, so a reused pid cannot matter.
    let orphaned = record.len() == 5 && record[0] == child::KIND_ORPHANED;
    if orphaned || guard.pidfd.is_none() {
        if let Some(pidfd) = guard
            .pidfd
            .take()
            .or_else(|| forker::pidfd_open(supervisor_pid))
        {
            forker::reap_orphan(pidfd);
        }
    }
    if orphaned {
        outcome.exit_code = 126;
        note(
            &mut outcome.stderr,
            "the sandbox's forker process ended while the command ran, and the command was killed; the next command starts a new forker",
        );
    } else if record.len() == 5 {
        let code = i32::from_le_bytes(record[1..5].try_into().unwrap_or_default());
        outcome.exit_code = code;
        outcome.timed_out = record[0] == KIND_TIMED_OUT;
        if record[0] == child::KIND_CANCELLED {
            note(&mut outcome.stderr, "the command was cancelled");
        }
    } else if backstop_fired {
        outcome.exit_code = child::TIMEOUT_EXIT;
        outcome.timed_out = true;
        note(
            &mut outcome.stderr,
            "the sandbox supervisor did not finish in time and was killed",
        );
    } else {
        // The supervisor died early (its own failure line, if any, is already on stderr).
        outcome.exit_code = 126;
        if !String::from_utf8_lossy(&outcome.stderr).contains("kube-harness:") {
            let how = if never_started {
                "the sandbox's forker process ended before it started the command; the next command starts a new forker"
            } else {
                "the sandbox supervisor ended without a report"
            };
            note(&mut outcome.stderr, how);
        }
    }
    outcome.duration = start.elapsed();
    Ok(outcome)
}

fn note(stderr: &mut Vec<u8>, text: &str) {
    if !stderr.is_empty() && !stderr.ends_with(b"\n") {
        stderr.push(b'\n');
    }
    stderr.extend_from_slice(format!("kube-harness: {text}\n").as_bytes());
}

/// Last resort when the supervisor is stuck: SIGKILL the command's group (the supervisor itself
/// is killed through its pidfd).
fn kill_group(cmd: libc::pid_t) {
    if cmd > 0 {
        // SAFETY: a signal to the group of a command whose supervisor has not reported: its
        // members are alive or the group is empty.
        unsafe { libc::kill(cmd.wrapping_neg(), libc::SIGKILL) };
    }
}

/// A close-on-exec pipe (the forker gets the write ends as SCM_RIGHTS).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Hands the command's cgroup back to the pool when the run ends (also when it is dropped: the
/// pool keeps only cgroups it finds empty).
struct SlotGuard<'a> {
    plan: &'a Plan,
    slot: Option<super::cgroup::Slot>,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if let (Some(pids), Some(slot)) = (&self.plan.pids, self.slot.take()) {
            pids.give_back(slot);
        }
    }
}

/// If `run` is dropped mid-flight (the caller was cancelled), tell the supervisor to kill the
/// tree (SIGTERM is its cancel signal); the kernel reaps it (the forker ignores SIGCHLD).
struct CancelGuard {
    pidfd: Option<OwnedFd>,
    armed: bool,
}

impl CancelGuard {
    fn signal(&self, sig: libc::c_int) {
        if let Some(pidfd) = &self.pidfd {
            forker::signal(pidfd, sig);
        }
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.signal(libc::SIGTERM);
        }
    }
}

/// Reads to EOF, keeping at most `cap` bytes; the rest is drained and dropped. With a tap, every
/// chunk also goes there as it is read (all of it: the cap bounds what is kept, not what streams),
/// until the tap's reader is gone.
async fn read_capped(
    mut r: pipe::Receiver,
    cap: usize,
    mut tap: Option<(&OutputTap, OutputStream)>,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => {
                if let Some((sender, stream)) = tap {
                    let data = chunk.get(..n).unwrap_or_default().to_vec();
                    if sender.send(OutputChunk { stream, data }).await.is_err() {
                        tap = None;
                    }
                }
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    (kept, truncated)
}

/// Reads until `buf` is full or the pipe ends; how many bytes came.
async fn read_up_to(r: &mut pipe::Receiver, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match r.read(buf.get_mut(at..).unwrap_or_default()).await {
            Ok(0) => break,
            Ok(n) => at = at.saturating_add(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

fn receiver(fd: OwnedFd) -> Result<pipe::Receiver, String> {
    pipe::Receiver::from_owned_fd(fd).map_err(|e| format!("watching a child pipe: {e}"))
}
