//! The local host's Tier-1: the host's real toolchain, one command at a time, in a private mount
//! namespace where the handed-over workspace appears at the canonical paths. The workspace goes
//! over as an archive (the same protocol Tier-1 pods use) and the changes come back at dispose.
//!
//! Needs `unshare` (util-linux) and the right to make a mount namespace (root, as on CI and in the
//! worker pod's own tests). Without it, provisioning fails and the command is refused with 126.

use crate::error::Tier1Error;
use crate::shell::{self, ShellCommand, ShellLimits, View};
use crate::skills;
use async_trait::async_trait;
use kube_harness_protocol::trace::{HigherTierUsage, LocalUsage};
use kube_harness_runtime::executor::{
    CommandExecutor, DisposeReport, ExecRequest, ExecResult, NextTier, TierError,
};
use kube_harness_workspace::{
    self as workspace, ApplyOptions, PackOptions, Snapshot, UnpackOptions, WorkspaceSpec,
};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Provisions [`HostShell`]s lazily, on a turn's first escalation.
pub struct LocalTier1 {
    /// Where workspace copies are made (default: the system temp dir).
    pub scratch_parent: PathBuf,
    /// Per-command wall-clock limit.
    pub timeout: Duration,
    /// Cap on captured stdout and stderr, each.
    pub max_output_bytes: usize,
}

impl Default for LocalTier1 {
    fn default() -> Self {
        LocalTier1 {
            scratch_parent: std::env::temp_dir(),
            timeout: Duration::from_secs(600),
            max_output_bytes: 1 << 20,
        }
    }
}

#[async_trait]
impl NextTier for LocalTier1 {
    async fn provision(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, TierError> {
        Ok(self.open(spec).await?)
    }
}

impl LocalTier1 {
    async fn open(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, Tier1Error> {
        let probe = tokio::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .await
            .map_err(|e| Tier1Error::local("local Tier-1 needs util-linux `unshare`", e))?;
        if !probe.status.success() {
            return Err(Tier1Error::Unfit(format!(
                "local Tier-1 needs a private mount namespace (run as root): {}",
                String::from_utf8_lossy(&probe.stderr).trim()
            )));
        }
        let started = Instant::now();
        workspace::leftovers::sweep_dead(&self.scratch_parent, SCRATCH_PREFIX);
        let scratch = tempfile::Builder::new()
            .prefix(&workspace::leftovers::own_prefix(SCRATCH_PREFIX))
            .tempdir_in(&self.scratch_parent)
            .map_err(|e| Tier1Error::local("making the Tier-1 scratch dir", e))?;
        let spec = spec.clone();
        let ws = scratch.path().join("ws");
        let agents = scratch.path().join("agents");
        // Handoff: pack the tracked mounts, unpack into the copy (with the archive's checks).
        let handoff = tokio::task::spawn_blocking(move || {
            let mut archive = Vec::new();
            let packed = workspace::pack(&spec, &PackOptions::default(), &mut archive)
                .map_err(Tier1Error::workspace("packing the workspace"))?;
            let unpacked = workspace::unpack(&archive[..], &ws, &UnpackOptions::for_spec(&spec))
                .map_err(Tier1Error::workspace("unpacking the workspace"))?;
            let tier1_spec = workspace::rehome(&spec, &ws);
            // The skills as on a Tier-1 pod: a copy made by the same archive and install,
            // bound read-only at /.agents, so no command reaches the session's own.
            let tier1_spec = match skills::agents_dir(&spec) {
                None => tier1_spec,
                Some(dir) => {
                    copy_skills(dir, &agents)?;
                    skills::shown_from(&tier1_spec, &agents)
                }
            };
            Ok::<_, Tier1Error>((
                spec,
                tier1_spec,
                packed.snapshot,
                unpacked.snapshot,
                archive.len(),
            ))
        })
        .await
        .map_err(Tier1Error::task("handoff task"))??;
        let (worker_spec, tier1_spec, worker_base, tier1_base, handed_over) = handoff;
        Ok(Arc::new(HostShell {
            scratch,
            worker_spec,
            tier1_spec,
            worker_base,
            tier1_base,
            timeout: self.timeout,
            max_output_bytes: self.max_output_bytes,
            queue: tokio::sync::Mutex::new(()),
            provisioned: started.elapsed(),
            handed_over_bytes: handed_over as u64,
            commands: AtomicU64::new(0),
            busy_ms: AtomicU64::new(0),
        }))
    }
}

/// Packs the skills at `from` and installs them into a new directory `to`, bounded as a pod's.
fn copy_skills(from: &std::path::Path, to: &std::path::Path) -> Result<(), Tier1Error> {
    let limit = skills::MAX_SKILLS_ARCHIVE_BYTES;
    let mut out = kube_harness_service_kit::body::Capped::new(Vec::new(), limit);
    let packed = skills::pack(Some(from), &mut out);
    if out.over {
        return Err(Tier1Error::OverSkillsLimit { limit });
    }
    packed.map_err(Tier1Error::workspace("packing the skills under /.agents"))?;
    std::fs::create_dir(to).map_err(|e| Tier1Error::local("making the skills copy", e))?;
    skills::install(&out.inner[..], to).map_err(|e| {
        Tier1Error::local("copying the skills", std::io::Error::other(e.to_string()))
    })?;
    Ok(())
}

/// Scratch directories are `<parent>/kube-harness-tier1-<pid>-<random>`: those of a host that
/// was killed are removed by the next provisioning.
const SCRATCH_PREFIX: &str = "kube-harness-tier1-";

/// One turn's Tier-1: a copy of the workspace and the host's shell.
pub struct HostShell {
    scratch: tempfile::TempDir,
    worker_spec: WorkspaceSpec,
    tier1_spec: WorkspaceSpec,
    worker_base: Snapshot,
    tier1_base: Snapshot,
    timeout: Duration,
    max_output_bytes: usize,
    /// Commands from parallel calls run one at a time, as in one persistent shell.
    queue: tokio::sync::Mutex<()>,
    provisioned: Duration,
    handed_over_bytes: u64,
    commands: AtomicU64,
    busy_ms: AtomicU64,
}

impl HostShell {
    async fn run(&self, req: &ExecRequest) -> Result<ExecResult, Tier1Error> {
        let mut env = req.env.clone();
        env.insert("PATH".into(), host_path());
        env.insert(
            "HOME".into(),
            std::env::var("HOME").unwrap_or_else(|_| "/root".into()),
        );
        let view = View::Namespace {
            scratch: self.scratch.path().to_path_buf(),
            mounts: self.tier1_spec.mounts.clone(),
        };
        let limits = ShellLimits {
            timeout: req.timeout.unwrap_or(self.timeout),
            max_output_bytes: self.max_output_bytes,
            ..ShellLimits::default()
        };
        let cmd = ShellCommand {
            script: &req.script,
            cwd: &req.cwd,
            env: &env,
        };
        shell::run(&cmd, &view, &limits).await
    }
}

/// The host's PATH: Tier-1 is the real toolchain.
fn host_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}

#[async_trait]
impl CommandExecutor for HostShell {
    fn tier(&self) -> u8 {
        1
    }

    async fn execute(&self, req: ExecRequest) -> ExecResult {
        let _turn = self.queue.lock().await;
        let result = self
            .run(&req)
            .await
            .unwrap_or_else(|e| kube_harness_runtime::fault(&format!("local Tier-1: {e}")));
        self.commands.fetch_add(1, Ordering::Relaxed);
        self.busy_ms
            .fetch_add(result.duration.as_millis() as u64, Ordering::Relaxed);
        result
    }

    /// Merge: pack what changed on the copy since the handoff and apply it to the worker's tracked
    /// mounts (conflicts and read-only paths are rejected, never overwritten).
    async fn dispose(&self) -> Result<DisposeReport, TierError> {
        Ok(self.merge().await?)
    }
}

impl HostShell {
    async fn merge(&self) -> Result<DisposeReport, Tier1Error> {
        let _turn = self.queue.lock().await;
        let tier1_spec = self.tier1_spec.clone();
        let worker_spec = self.worker_spec.clone();
        let tier1_base = self.tier1_base.clone();
        let worker_base = self.worker_base.clone();
        let scratch = self.scratch.path().to_path_buf();
        let (report, returned) = tokio::task::spawn_blocking(move || {
            let mut archive = Vec::new();
            workspace::changes_since(
                &tier1_spec,
                &tier1_base,
                &PackOptions::default(),
                &mut archive,
            )
            .map_err(Tier1Error::workspace("packing Tier-1 changes"))?;
            let opts = ApplyOptions {
                scratch_dir: Some(scratch),
                ..ApplyOptions::default()
            };
            let report = workspace::apply(&worker_spec, &archive[..], &worker_base, &opts)
                .map_err(Tier1Error::workspace("merging Tier-1 changes"))?;
            Ok::<_, Tier1Error>((report, archive.len() as u64))
        })
        .await
        .map_err(Tier1Error::task("merge task"))??;
        let problems = crate::merge_report::problems(&report);
        Ok(DisposeReport {
            problems,
            file_changes: report.applied,
            usage: Some(HigherTierUsage::LocalHost(LocalUsage {
                commands: self.commands.load(Ordering::Relaxed),
                duration_ms: self.busy_ms.load(Ordering::Relaxed),
                provision_ms: self.provisioned.as_millis() as u64,
                bytes_handed_over: self.handed_over_bytes,
                bytes_returned: returned,
            })),
        })
    }
}
