//! Running one command with real bash, as every Tier-1 does it (the local host's and a pod's
//! agent): its own process group, stdout/stderr captured with caps, the runtime's state report
//! read from file descriptor 3, a wall-clock limit, and nothing of the command's process group
//! left running once it ends (the same rule as Tier-0, where the supervisor kills the tree). On
//! the local host the command runs in a PID namespace of its own that dies with it, and with the
//! host process.
//!
//! There is no sandbox here: Tier-1 is the real toolchain, isolated by the pod (or the host's
//! mount namespace) around it.

use crate::error::Tier1Error;
use kube_harness_runtime::ExecResult;
use kube_harness_sandbox::fd::pipe_high;
use kube_harness_workspace::Mount;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Exit code of a command stopped by its time limit (as on Tier-0).
pub const TIMEOUT_EXIT: i32 = 124;
/// How long the output pipes may stay open once the command's process group is killed (a
/// descendant that left the group may hold them; it does not get to hold the caller).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Caps of one command.
#[derive(Debug, Clone)]
pub struct ShellLimits {
    pub timeout: Duration,
    /// Cap on captured stdout and on captured stderr, each; the rest is drained and dropped.
    pub max_output_bytes: usize,
    /// Cap on the state report (fd 3).
    pub max_state_bytes: usize,
    /// RLIMIT_NPROC (soft and hard) of the command: counted per uid, so in a Tier-1 pod, whose
    /// uid is its own, it bounds every process the pod's commands start (a fork bomb gets
    /// EAGAIN). Never raised above what the agent has. `None`: inherited.
    pub max_processes: Option<u64>,
}

impl Default for ShellLimits {
    fn default() -> Self {
        ShellLimits {
            timeout: Duration::from_secs(600),
            max_output_bytes: 1 << 20,
            max_state_bytes: 256 << 10,
            max_processes: None,
        }
    }
}

/// How the workspace appears at its canonical paths.
#[derive(Debug, Clone)]
pub enum View {
    /// The backing paths are the canonical paths (a Tier-1 pod): bash runs as it is.
    Direct,
    /// A private mount namespace binds `mounts` at their harness paths over the host's own
    /// top-level directories (needs root and util-linux `unshare`). `scratch` holds the script
    /// and the mount table of the command being run (one command at a time per scratch dir).
    Namespace {
        scratch: PathBuf,
        mounts: Vec<Mount>,
    },
}

/// One command to run.
pub struct ShellCommand<'a> {
    pub script: &'a str,
    /// Harness path to start in (falls back to `/session`, then `/`, when it is gone).
    pub cwd: &'a Path,
    /// The command's whole environment.
    pub env: &'a BTreeMap<String, String>,
}

/// Builds the namespace (a tmpfs root that binds every top-level host directory, then the
/// workspace at the canonical paths) and runs the script there; fd 3 is inherited throughout.
const NAMESPACE_SETUP: &str = r#"set -e
new="$KH_ROOT/newroot"
mkdir -p "$new"
mount -t tmpfs kh-tier1 "$new"
for d in /*; do
  name="${d#/}"
  case "$name" in proc|sys|dev|session|artifacts|persistent|.agents) continue ;; esac
  if [ -L "$d" ]; then ln -s "$(readlink "$d")" "$new/$name"
  elif [ -d "$d" ]; then mkdir "$new/$name"; mount --rbind "$d" "$new/$name"; fi
done
for d in sys dev; do mkdir "$new/$d"; mount --rbind "/$d" "$new/$d"; done
mkdir "$new/proc"; mount -t proc proc "$new/proc"
while IFS='|' read -r harness backing mode; do
  [ -n "$harness" ] || continue
  mkdir -p "$new$harness"
  mount --bind "$backing" "$new$harness"
  if [ "$mode" = ro ]; then mount -o remount,bind,ro "$new$harness"; fi
done < "$KH_ROOT/mounts"
touch "$new/.kh-script"
mount --bind "$KH_ROOT/script" "$new/.kh-script"
exec chroot "$new" /bin/bash -c 'cd -- "$KH_CWD" 2>/dev/null || cd /session 2>/dev/null || cd /; unset KH_ROOT KH_CWD; exec /bin/bash -c "$(cat "$0")"' "/.kh-script"
"#;

/// Runs `cmd` under `view`. `Err` only when the command could not be started; everything that
/// happens to a started command (exit, signal, time limit) is an [`ExecResult`].
pub async fn run(
    cmd: &ShellCommand<'_>,
    view: &View,
    limits: &ShellLimits,
) -> Result<ExecResult, Tier1Error> {
    if cmd.script.contains('\0') {
        return Err(Tier1Error::NulInScript);
    }
    let mut command = match view {
        View::Direct => {
            let mut c = tokio::process::Command::new("bash");
            c.arg("-c").arg(cmd.script).current_dir(start_dir(cmd.cwd));
            c.env_clear().envs(cmd.env);
            c
        }
        View::Namespace { scratch, mounts } => {
            tokio::fs::write(scratch.join("script"), cmd.script)
                .await
                .map_err(|e| Tier1Error::local("writing the script", e))?;
            tokio::fs::write(scratch.join("mounts"), mount_table(mounts))
                .await
                .map_err(|e| Tier1Error::local("writing the mount table", e))?;
            // A PID namespace too: its first process is the command's shell, and when it ends
            // (or `unshare` dies, `--kill-child`) the kernel kills everything left in it,
            // `setsid` daemons included. `unshare` itself dies with this process (PDEATHSIG
            // below), so a host killed by Ctrl-C leaves nothing of the command running.
            let mut c = tokio::process::Command::new("unshare");
            c.args([
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--kill-child=SIGKILL",
                "/bin/sh",
                "-c",
                NAMESPACE_SETUP,
            ]);
            c.env_clear()
                .envs(cmd.env)
                .env("KH_ROOT", scratch)
                .env("KH_CWD", cmd.cwd);
            c
        }
    };
    let (state_r, state_w) = pipe_high().map_err(|e| Tier1Error::local("creating a pipe", e))?;
    let state_fd = state_w.as_raw_fd();
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let die_with_us = matches!(view, View::Namespace { .. });
    let host_pid = std::process::id() as libc::pid_t;
    let nproc = limits.max_processes;
    // SAFETY: dup2, prctl, getrlimit and setrlimit are async-signal-safe; `state_fd` stays open
    // until spawn returns.
    unsafe {
        command.pre_exec(move || {
            if libc::dup2(state_fd, 3) != 3 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(max) = nproc {
                let mut now = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NPROC, &mut now) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let max = (max as libc::rlim_t).min(now.rlim_max);
                let limit = libc::rlimit {
                    rlim_cur: max,
                    rlim_max: max,
                };
                if libc::setrlimit(libc::RLIMIT_NPROC, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // The local host's `unshare` is killed when the thread that started it exits (the
            // host process's runtime threads live as long as it does): a host stopped by a
            // signal takes the command's PID namespace with it.
            if die_with_us {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The host may have died between fork and prctl: then nobody would kill us.
                if libc::getppid() != host_pid {
                    return Err(std::io::Error::other("the host process is gone"));
                }
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let spawned = command.spawn();
    drop(state_w);
    let mut child = spawned.map_err(|e| match view {
        View::Direct => Tier1Error::local("cannot start bash", e),
        View::Namespace { .. } => Tier1Error::local("cannot start unshare (util-linux)", e),
    })?;
    let pgid = child.id().map(|p| p as libc::pid_t);
    let mut out = Capture::spawn(child.stdout.take(), limits.max_output_bytes);
    let mut err = Capture::spawn(child.stderr.take(), limits.max_output_bytes);
    let mut state = Capture::spawn(
        tokio::net::unix::pipe::Receiver::from_owned_fd(state_r).ok(),
        limits.max_state_bytes,
    );
    let waited = tokio::time::timeout(limits.timeout, child.wait()).await;
    // Whatever happened, nothing of the command's process group outlives it.
    if let Some(pgid) = pgid {
        // SAFETY: kill(2) on the process group of our own child.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
    let (status, timed_out) = match waited {
        Ok(status) => (
            status.map_err(|e| Tier1Error::local("waiting for the command", e))?,
            false,
        ),
        Err(_) => (
            child
                .wait()
                .await
                .map_err(|e| Tier1Error::local("waiting for the killed command", e))?,
            true,
        ),
    };
    let drained = async {
        let _ = tokio::join!(out.done(), err.done(), state.done());
    };
    let _ = tokio::time::timeout(DRAIN_GRACE, drained).await;
    let (stdout, t1) = out.take();
    let (mut stderr, t2) = err.take();
    let (state, state_truncated) = state.take();
    use std::os::unix::process::ExitStatusExt;
    let exit_code = if timed_out {
        if !stderr.is_empty() && !stderr.ends_with(b"\n") {
            stderr.push(b'\n');
        }
        stderr.extend_from_slice(
            format!(
                "kube-harness: the command timed out after {:?}\n",
                limits.timeout
            )
            .as_bytes(),
        );
        TIMEOUT_EXIT
    } else {
        status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
    };
    Ok(ExecResult {
        stdout,
        stderr,
        exit_code,
        timed_out,
        stdout_truncated: t1,
        stderr_truncated: t2,
        duration: started.elapsed(),
        state,
        state_truncated,
    })
}

/// The directory a directly-run command starts in: its cwd if it still exists.
fn start_dir(cwd: &Path) -> PathBuf {
    [cwd, Path::new(kube_harness_workspace::spec::SESSION)]
        .into_iter()
        .find(|d| d.is_absolute() && d.is_dir())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

fn mount_table(mounts: &[Mount]) -> String {
    let mut lines = String::new();
    for m in mounts {
        let mode = if m.writable { "rw" } else { "ro" };
        lines.push_str(&format!(
            "{}|{}|{mode}\n",
            m.harness_path.display(),
            m.backing_path.display()
        ));
    }
    lines
}

/// The process's own environment without the harness's settings (`KH_*`) and the cluster's
/// service variables (`KUBERNETES_*`): what an image sets (`PATH`, `CARGO_HOME`, …) stays.
pub fn own_environment() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !k.starts_with("KH_") && !k.starts_with("KUBERNETES_"))
        .collect()
}

/// One output stream read to EOF in its own task, at most `cap` bytes kept, so what was read
/// is still there when the caller stops waiting for EOF.
struct Capture {
    kept: Arc<Mutex<(Vec<u8>, bool)>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Capture {
    fn spawn<R: AsyncRead + Unpin + Send + 'static>(reader: Option<R>, cap: usize) -> Self {
        let kept = Arc::new(Mutex::new((Vec::new(), false)));
        let task = reader.map(|mut r| {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match r.read(&mut buf).await {
                        Ok(0) => break,
                        Ok(n) => {
                            let mut k = kept.lock().expect("capture lock");
                            let room = cap.saturating_sub(k.0.len());
                            k.1 |= n > room;
                            k.0.extend_from_slice(&buf[..n.min(room)]);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            })
        });
        Capture { kept, task }
    }

    /// Completes when the stream reached EOF (cancel-safe: the task keeps its bytes).
    async fn done(&mut self) {
        if let Some(task) = &mut self.task {
            let _ = task.await;
        }
    }

    fn take(self) -> (Vec<u8>, bool) {
        if let Some(task) = &self.task {
            task.abort();
        }
        std::mem::take(&mut *self.kept.lock().expect("capture lock"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> BTreeMap<String, String> {
        BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())])
    }

    /// Runs `script` from `/` with no sandbox view, under `limits`.
    async fn run_direct(script: &str, limits: ShellLimits) -> ExecResult {
        let command = ShellCommand {
            script,
            cwd: Path::new("/"),
            env: &env(),
        };
        run(&command, &View::Direct, &limits).await.unwrap()
    }

    #[tokio::test]
    async fn captures_output_state_and_exit_code() {
        let tmp = tempfile::tempdir().unwrap();
        let script = format!(
            "cd {} && echo out && echo err >&2 && printf 'state' >&3 && exit 7",
            tmp.path().display()
        );
        let r = run_direct(&script, ShellLimits::default()).await;
        assert_eq!(
            (r.stdout.as_slice(), r.stderr.as_slice(), r.exit_code),
            (&b"out\n"[..], &b"err\n"[..], 7)
        );
        assert_eq!(r.state, b"state");
        assert!(!r.timed_out);
    }

    /// Issue 30: a Tier-1 pod's commands had no process bound (`ulimit -u` 96,367, 1,504
    /// processes ran). The agent now sets RLIMIT_NPROC on each command (`--max-processes`).
    #[tokio::test]
    async fn a_process_limit_is_the_commands_rlimit_nproc() {
        let limits = ShellLimits {
            max_processes: Some(57),
            ..ShellLimits::default()
        };
        let r = run_direct("ulimit -u; ulimit -Hu", limits).await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "57\n57\n");
        let r = run_direct("ulimit -u", ShellLimits::default()).await;
        assert_ne!(
            String::from_utf8_lossy(&r.stdout),
            "57\n",
            "unset: inherited"
        );
    }

    #[tokio::test]
    async fn caps_output_and_kills_on_timeout() {
        let limits = ShellLimits {
            timeout: Duration::from_millis(300),
            max_output_bytes: 10,
            ..ShellLimits::default()
        };
        let r = run_direct("echo 0123456789abcdef; sleep 30", limits).await;
        assert_eq!(r.stdout, b"0123456789");
        assert!(r.truncated() && r.timed_out);
        assert_eq!(r.exit_code, TIMEOUT_EXIT);
        assert!(r.duration < Duration::from_secs(5), "{:?}", r.duration);
        assert!(String::from_utf8_lossy(&r.stderr).contains("kube-harness: the command timed out"));
    }

    #[tokio::test]
    async fn a_background_job_holding_stdout_does_not_hold_the_caller() {
        let started = Instant::now();
        let r = run_direct("sleep 30 & echo started", ShellLimits::default()).await;
        assert_eq!((r.stdout.as_slice(), r.exit_code), (&b"started\n"[..], 0));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
