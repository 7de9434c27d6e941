//! The sandbox's public data types: configuration, one invocation, its outcome, setup errors.

use kube_harness_workspace::WorkspaceSpec;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Per-command resource limits. rlimits apply per process (memory, file size, open files) or per
/// user id (processes); see docs/security-model.md for what that means in practice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock limit; the whole process tree is killed with SIGKILL when it passes.
    pub timeout: Duration,
    /// Cap on captured stdout and on captured stderr (each); the rest is drained and dropped.
    pub max_output_bytes: usize,
    /// RLIMIT_NPROC. Counted per real user id by the kernel, and not enforced for uid 0.
    pub max_processes: u64,
    /// RLIMIT_FSIZE: the largest file a command may write.
    pub max_file_size: u64,
    /// RLIMIT_AS: address space per process (virtual, not resident memory).
    pub max_memory: u64,
    /// RLIMIT_NOFILE.
    pub max_open_files: u64,
    /// Cap on what the script writes to file descriptor 3 ([`Outcome::state`]). Added field.
    pub max_state_bytes: usize,
    /// CPU of the whole process tree, in thousandths of a core (cgroup quota; 0: no quota). Only
    /// where the worker is root and the host has a cpu cgroup controller; every command also
    /// runs 10 nice levels below the worker, whatever the host.
    pub max_cpu_millicores: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
            max_processes: 256,
            max_file_size: 1 << 30,
            max_memory: 4 << 30,
            max_open_files: 1024,
            max_state_bytes: 256 << 10,
            max_cpu_millicores: 1000,
        }
    }
}

/// How the workspace's harness paths (`/session`, …) become visible to the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presentation {
    /// Backing paths ARE the harness paths (the worker pod, where the PVC is mounted at
    /// `/session`). Every mount must have `backing_path == harness_path`.
    Direct,
    /// Local host: a private mount namespace whose root holds only the system directories, the
    /// tool directory, a private `/tmp` and the mounts, bound at their harness paths.
    Namespace,
}

/// What [`super::Tier0Sandbox::new`] needs.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    pub workspace: WorkspaceSpec,
    pub limits: Limits,
    pub presentation: Presentation,
    /// Command names of the deny policy (`denyCommands`): left out of the tool directory and not
    /// executable, so a denied tool cannot run on Tier-0 however a script reaches it (a command
    /// substitution in a variable's value, arithmetic, a tool running it). Shell builtins and
    /// bash itself stay; classification refuses scripts that name them.
    pub denied: Vec<String>,
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The full bash script, run as `bash -c SCRIPT` (at most [`MAX_SCRIPT_ARG`] bytes).
    pub script: String,
    /// Working directory, as a harness path.
    pub cwd: PathBuf,
    /// The command's environment on top of the sandbox's base (PATH, HOME, TMPDIR); entries here
    /// win. Nothing of the calling process's environment is passed.
    pub env: BTreeMap<String, String>,
    /// Where stdout and stderr also go while the command runs, if anywhere (see [`OutputTap`]).
    pub output: Option<OutputTap>,
}

/// Which stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// Bytes a command wrote, as they were read from its pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: OutputStream,
    pub data: Vec<u8>,
}

/// A command's output as it arrives, for a caller that streams it (the worker's NDJSON exec).
/// Bounded: a reader that falls behind slows the command down (its pipe fills, as on a
/// terminal) within its time limit. Dropping the receiver cancels the command: its whole tree is
/// killed, and the outcome says "the command was cancelled".
pub type OutputTap = tokio::sync::mpsc::Sender<OutputChunk>;

/// The kernel's limit on one argv string (MAX_ARG_STRLEN), minus the terminating NUL.
pub const MAX_SCRIPT_ARG: usize = 128 * 1024 - 1;

/// What happened: the raw result of one command, on Tier-0 and (as the runtime's `ExecResult`)
/// on every higher tier, so no tier copies it into a type of its own. Exit codes follow bash: 128+N when killed by signal N; 124 when the timeout
/// killed the command (as coreutils `timeout`); 126 for sandbox faults and refusals.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
    pub timed_out: bool,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration: Duration,
    /// Everything the script wrote to file descriptor 3, capped at `Limits::max_state_bytes`.
    pub state: Vec<u8>,
    /// `state` was cut at the cap. Added field.
    pub state_truncated: bool,
}

impl Outcome {
    /// Either stream was cut at its cap.
    pub fn truncated(&self) -> bool {
        self.stdout_truncated || self.stderr_truncated
    }

    /// A fault: nothing ran (or it could not be observed); exit 126 and one stderr line.
    pub fn fault(reason: impl std::fmt::Display, duration: Duration) -> Outcome {
        Outcome {
            stderr: format!("kube-harness: {reason}\n").into_bytes(),
            exit_code: 126,
            duration,
            ..Outcome::default()
        }
    }
}

/// Why a sandbox could not be prepared. Messages name what is missing.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("landlock is not available: the kernel needs CONFIG_SECURITY_LANDLOCK (Linux >= 5.13) with `landlock` in the active LSM list (lsm= boot parameter)")]
    LandlockUnavailable,
    #[error("seccomp filters are not available: the kernel needs CONFIG_SECCOMP_FILTER")]
    SeccompUnavailable,
    #[error("Presentation::Namespace needs a private mount namespace, which this host refuses: {detail}. Run as root, enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0), or use Presentation::Direct with the mounts at their harness paths")]
    NamespaceUnavailable { detail: String },
    #[error("running as root, every command needs a pids cgroup to bound its processes (the kernel never applies RLIMIT_NPROC to uid 0), and this host has none usable: {0}. Mount the pids controller (cgroup v1) or enable it in /sys/fs/cgroup/cgroup.subtree_control (cgroup v2), or run as a non-root user")]
    PidsCgroup(String),
    #[error("mount {harness}: {reason}")]
    BadMount { harness: PathBuf, reason: String },
    #[error("invalid limits: {0}")]
    BadLimits(String),
    #[error("no bash found at /usr/bin/bash or /bin/bash: the Tier-0 sandbox runs real bash")]
    NoBash,
    #[error(
        "unsupported CPU architecture {0} for the seccomp filter (x86_64, aarch64, riscv64 are)"
    )]
    UnsupportedArch(String),
    #[error("building the landlock ruleset: {0}")]
    Landlock(String),
    #[error("building the seccomp filter: {0}")]
    Seccomp(String),
    #[error("starting the sandbox's forker process: {0}")]
    Forker(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        SandboxError::Io {
            what: what.into(),
            source,
        }
    }
}

impl SandboxConfig {
    /// A config with default limits.
    pub fn new(workspace: WorkspaceSpec, presentation: Presentation) -> Self {
        SandboxConfig {
            workspace,
            limits: Limits::default(),
            presentation,
            denied: Vec::new(),
        }
    }

    /// The same with the deny policy's command names left out of the tool set.
    pub fn with_denied(mut self, denied: &[String]) -> Self {
        self.denied = denied.to_vec();
        self
    }

    /// Checks the mount table before anything is built.
    pub(crate) fn validate(&self) -> Result<(), SandboxError> {
        let mut seen = std::collections::HashSet::new();
        for m in &self.workspace.mounts {
            let bad = |reason: String| SandboxError::BadMount {
                harness: m.harness_path.clone(),
                reason,
            };
            if !m.harness_path.is_absolute() || !m.backing_path.is_absolute() {
                return Err(bad("harness and backing paths must be absolute".into()));
            }
            if m.harness_path == std::path::Path::new("/") {
                return Err(bad("a mount cannot cover /".into()));
            }
            let clean = |p: &std::path::Path| {
                p.components().all(|c| {
                    matches!(
                        c,
                        std::path::Component::RootDir | std::path::Component::Normal(_)
                    )
                })
            };
            if !clean(&m.harness_path) || !clean(&m.backing_path) {
                return Err(bad("paths must not contain `.` or `..`".into()));
            }
            if !seen.insert(m.harness_path.clone()) {
                return Err(bad("listed twice".into()));
            }
            let meta = std::fs::metadata(&m.backing_path)
                .map_err(|e| bad(format!("backing path {}: {e}", m.backing_path.display())))?;
            if !meta.is_dir() {
                return Err(bad(format!(
                    "backing path {} is not a directory",
                    m.backing_path.display()
                )));
            }
            if self.presentation == Presentation::Direct && m.harness_path != m.backing_path {
                return Err(bad(format!(
                    "Presentation::Direct needs backing_path == harness_path (got {}); use Presentation::Namespace to present {} elsewhere",
                    m.backing_path.display(),
                    m.backing_path.display()
                )));
            }
            for p in &m.read_only_prefixes {
                if !p.starts_with(&m.harness_path) || !clean(p) {
                    return Err(bad(format!(
                        "read-only prefix {} is not a clean path under the mount",
                        p.display()
                    )));
                }
            }
        }
        if self.limits.timeout.is_zero() {
            return Err(SandboxError::BadLimits("timeout must be above zero".into()));
        }
        Ok(())
    }
}
