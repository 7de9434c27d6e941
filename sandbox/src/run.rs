//! The parent side of one run: pipes, spawn, capped draining of stdout/stderr/state, the
//! supervisor's status record, and a backstop for a supervisor that stops answering.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::child::{self, ChildPlan, RunFds, KIND_TIMED_OUT};
use super::config::MAX_SCRIPT_ARG;
use super::fd::pipe_high;
use super::{Invocation, Limits, Outcome, OutputChunk, OutputStream, OutputTap};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

/// How long past the timeout the parent waits for the supervisor before killing it itself.
const BACKSTOP: Duration = Duration::from_secs(5);
/// How long the pipes may stay open once the supervisor has reported.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

pub async fn run(
    plan: &Arc<ChildPlan>,
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
    plan: &Arc<ChildPlan>,
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

    let (state_r, state_w) = pipe_high().map_err(|e| format!("creating a pipe: {e}"))?;
    let (status_r, status_w) = pipe_high().map_err(|e| format!("creating a pipe: {e}"))?;

    // The command's pids cgroup (uid 0): returned to the pool once the supervisor has reported.
    let slot = match &plan.pids {
        Some(pids) => Some(pids.take().map_err(|e| e.to_string())?),
        None => None,
    };
    let slot = SlotGuard { plan, slot };
    let fd_of = |f: fn(&super::cgroup::Slot) -> i32| slot.slot.as_ref().map_or(-1, f);

    let mut env = base_env.clone();
    env.extend(inv.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let exec = child::ExecArgs::new(&inv.script, &env)
        .ok_or_else(|| "script or environment contains a NUL byte".to_string())?;
    // std forks the supervisor and wires its stdio; its pre_exec never returns, so the program
    // named here is never exec'd by std (the supervisor's child execs bash with `exec`).
    let mut cmd = Command::new(&plan.bash);
    cmd.env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let home = env
        .get("HOME")
        .and_then(|h| child::cwd_cstring(std::path::Path::new(h)))
        .unwrap_or_default();
    let fds = RunFds {
        cwd,
        home,
        state_w: state_w.as_raw_fd(),
        status_w: status_w.as_raw_fd(),
        exec,
        cgroup_w: fd_of(super::cgroup::Slot::procs_w),
        cgroup_r: fd_of(super::cgroup::Slot::procs_r),
        cgroup_kill: fd_of(super::cgroup::Slot::kill_fd),
    };
    let child_plan = Arc::clone(plan);
    // SAFETY: the closure only makes async-signal-safe syscalls over prepared data (child.rs).
    unsafe {
        cmd.pre_exec(move || child::pre_exec(&child_plan, &fds));
    }
    let spawned = cmd.spawn();
    drop(state_w);
    drop(status_w);
    let mut proc = spawned.map_err(|e| format!("cannot start bash: {e}"))?;
    let mut guard = CancelGuard {
        pid: proc.id() as libc::pid_t,
        armed: true,
    };

    let stdout = receiver(proc.stdout.take().map(OwnedFd::from))?;
    let stderr = receiver(proc.stderr.take().map(OwnedFd::from))?;
    let state = receiver(Some(state_r))?;
    let mut status = receiver(Some(status_r))?;

    // The supervisor writes the command's pid at once (before the command can produce output),
    // then the result once every process of the tree is gone.
    let mut pid_bytes = [0u8; 4];
    let cmd_pid = match tokio::time::timeout(BACKSTOP, status.read_exact(&mut pid_bytes)).await {
        Ok(Ok(_)) => i32::from_le_bytes(pid_bytes),
        _ => 0,
    };
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
        let pid = guard.pid;
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
                    // SAFETY: the supervisor is our unreaped child.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                    (&mut all).await
                }
            }
        };
        tokio::pin!(watched);
        match tokio::time::timeout(limits.timeout.saturating_add(BACKSTOP), &mut watched).await {
            Ok(r) => r,
            Err(_) => {
                backstop_fired = true;
                kill_everything(guard.pid, cmd_pid);
                tokio::time::timeout(DRAIN_GRACE, &mut watched)
                    .await
                    .unwrap_or_default()
            }
        }
    };
    let record = rest;
    // The supervisor has reported (or was killed): it is exiting. Reap it now if it is done,
    // otherwise in the background (its address-space teardown is not the caller's latency).
    guard.armed = false;
    let waited = match proc.try_wait() {
        Ok(Some(status)) => Ok(status),
        Ok(None) if record.len() == 5 => {
            reap_later(proc);
            Ok(std::process::ExitStatus::default())
        }
        _ => proc.wait(),
    };

    let mut outcome = Outcome {
        stdout: out.0,
        stdout_truncated: out.1,
        stderr: err.0,
        stderr_truncated: err.1,
        state: st.0,
        state_truncated: st.1,
        ..Outcome::default()
    };
    if record.len() == 5 {
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
        let how = match waited {
            Ok(s) => format!("sandbox supervisor ended early ({s})"),
            Err(e) => format!("sandbox supervisor could not be waited for: {e}"),
        };
        if !outcome.stderr.ends_with(b"\n") && !outcome.stderr.is_empty() {
            outcome.stderr.push(b'\n');
        }
        if !String::from_utf8_lossy(&outcome.stderr).contains("kube-harness:") {
            note(&mut outcome.stderr, &how);
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

/// Last resort when the supervisor is stuck: SIGKILL it and the command's group.
fn kill_everything(supervisor: libc::pid_t, cmd: libc::pid_t) {
    // SAFETY: signals to pids we started; the supervisor is not reaped yet, so the command's
    // group (whose members are its descendants) cannot have been recycled.
    unsafe {
        if cmd > 0 {
            libc::kill(cmd.wrapping_neg(), libc::SIGKILL);
        }
        libc::kill(supervisor, libc::SIGKILL);
    }
}

/// Hands a finished supervisor to one background thread that waits for it.
fn reap_later(child: std::process::Child) {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Mutex, OnceLock};
    static REAPER: OnceLock<Mutex<Sender<std::process::Child>>> = OnceLock::new();
    let sender = REAPER.get_or_init(|| {
        let (tx, rx) = channel::<std::process::Child>();
        std::thread::Builder::new()
            .name("kube-harness-reaper".into())
            .spawn(move || {
                for mut c in rx {
                    let _ = c.wait();
                }
            })
            .ok();
        Mutex::new(tx)
    });
    let send = sender.lock().map(|s| s.send(child));
    if let Ok(Err(std::sync::mpsc::SendError(mut c))) = send {
        let _ = c.wait();
    }
}

/// Hands the command's cgroup back to the pool when the run ends (also when it is dropped: the
/// pool keeps only cgroups it finds empty).
struct SlotGuard<'a> {
    plan: &'a ChildPlan,
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
/// tree (SIGTERM is its cancel signal) and reap it on a thread.
struct CancelGuard {
    pid: libc::pid_t,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            let pid = self.pid;
            // SAFETY: the supervisor is our unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
            std::thread::spawn(move || {
                let mut st = 0;
                // SAFETY: reaping our own child.
                unsafe { libc::waitpid(pid, &mut st, 0) };
            });
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

fn receiver(fd: Option<OwnedFd>) -> Result<pipe::Receiver, String> {
    let fd = fd.ok_or_else(|| "a child pipe is missing".to_string())?;
    pipe::Receiver::from_owned_fd(fd).map_err(|e| format!("watching a child pipe: {e}"))
}
