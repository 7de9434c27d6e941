//! What `kube-harness worker` configures: one session's runtime, its policy, where its workspace
//! is, and the session log.

use kube_harness_classify::RuntimeToggles;
use kube_harness_sandbox::{probe, Limits, Presentation, SandboxConfig};
use kube_harness_service_kit::ConnectionLimits;
use kube_harness_workspace::WorkspaceSpec;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::persistent::PersistentConfig;
use kube_harness_protocol::worker_args::{self, PersistentDirArg};
/// A second exec for a busy session waits (`Queue`) or is answered 409 `session-busy` (`Reject`).
pub use kube_harness_protocol::SameSession;

/// The session log the worker appends to.
#[derive(Debug, Clone)]
pub struct SessionLogConfig {
    pub url: String,
    pub token: Option<String>,
    /// Prefix of every run this worker writes: a request's run `R` becomes `SCOPE:R`, and a
    /// request without one goes to run `SCOPE`. The operator sets it to the session's namespace
    /// and UID, so that two sessions never share a run (the same name in two namespaces, or a
    /// session deleted and created again under its old name would otherwise replay the old
    /// one's steps). `None`: runs as requested, the session name by default.
    pub run_scope: Option<String>,
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The session's name: the default run id, and what `/v1/status` reports.
    pub session: String,
    pub runtime: RuntimeToggles,
    pub deny_commands: Vec<String>,
    pub same_session: SameSession,
    /// `/` in a pod (the volumes are mounted at the canonical paths); elsewhere a directory whose
    /// `session/`, `artifacts/`, `persistent/` and `.agents/` back them.
    pub workspace_root: PathBuf,
    pub session_log: Option<SessionLogConfig>,
    /// Default per-command limit, and the most a request's `timeoutMs` may ask for.
    pub command_timeout: Duration,
    pub max_timeout: Duration,
    /// Largest accepted request body (413 beyond).
    pub max_body_bytes: usize,
    /// Largest file `PUT /v1/files` accepts (413 beyond, nothing written).
    pub max_file_bytes: u64,
    /// Largest tar `PUT /v1/archive` accepts (413 beyond, nothing written).
    pub max_archive_bytes: u64,
    /// stdout/stderr beyond this go to `/artifacts/trace/…` (see `TurnConfig`).
    pub inline_output_limit: usize,
    /// At most this many `harness.file.*` events per command and per merge-back (then one
    /// `harness.file.truncated` with the counts), and at most this many paths in the end-turn
    /// answer's file list.
    pub max_file_events: usize,
    /// At most this many bytes of paths in one command's (or one merge-back's) file events, and
    /// in the end-turn answer's file list (`Emitter::with_file_event_bytes`).
    pub max_file_event_bytes: usize,
    /// How long a SIGTERM waits for a running command before ending the turn anyway.
    pub shutdown_grace: Duration,
    /// A client's turn (`POST /v1/turns`) idle this long is ended by the worker.
    pub turn_idle_timeout: Duration,
    /// How long a client may take to send a request head, how long an idle connection stays
    /// open, how many connections may be open at once, and the pace every request body must keep
    /// (docs/worker-api.md "Connections", "Bodies").
    pub connections: ConnectionLimits,
    /// Persistent Dirs (`--persistent-dir`): loaded at each turn's start, committed by policy.
    pub persistent_dirs: Vec<PersistentDirArg>,
    /// Where their source volumes are mounted (`worker_args::SOURCES_ROOT` in a pod).
    pub sources_root: PathBuf,
    /// Where kept (manual or conflicting) versions go (`worker_args::MANUAL_COMMITS_ROOT`).
    pub manual_root: PathBuf,
    /// The group commits give source trees to, so other sessions' workers can replace them
    /// (`worker_args::SOURCES_GID` when this process is in it).
    pub share_gid: Option<u32>,
    /// Harness paths commands may read but not change (`--read-only-prefix`), besides the
    /// read-only Persistent Dirs themselves.
    pub read_only_prefixes: Vec<PathBuf>,
    /// Set on a worker adopted from a warm pool: the digest of what the adoption bound
    /// (`worker_api::adoption_settings`), reported by `/v1/status` for the operator to check.
    pub adoption: Option<String>,
}

impl WorkerConfig {
    /// Defaults for everything but the session and where its workspace is.
    pub fn new(session: impl Into<String>, workspace_root: impl Into<PathBuf>) -> Self {
        WorkerConfig {
            session: session.into(),
            runtime: RuntimeToggles::default(),
            deny_commands: Vec::new(),
            same_session: SameSession::default(),
            workspace_root: workspace_root.into(),
            session_log: None,
            command_timeout: Duration::from_secs(worker_args::DEFAULT_COMMAND_TIMEOUT_SECS),
            max_timeout: Duration::from_secs(worker_args::DEFAULT_MAX_TIMEOUT_SECS),
            max_body_bytes: 256 * 1024,
            max_file_bytes: worker_args::DEFAULT_MAX_FILE_BYTES,
            max_archive_bytes: worker_args::DEFAULT_MAX_ARCHIVE_BYTES,
            inline_output_limit: 16 * 1024,
            max_file_events: worker_args::DEFAULT_MAX_FILE_EVENTS,
            max_file_event_bytes: worker_args::DEFAULT_MAX_FILE_EVENT_BYTES,
            shutdown_grace: Duration::from_secs(worker_args::DEFAULT_SHUTDOWN_GRACE_SECS),
            turn_idle_timeout: Duration::from_secs(worker_args::DEFAULT_TURN_IDLE_TIMEOUT_SECS),
            connections: ConnectionLimits::default(),
            adoption: None,
            persistent_dirs: Vec::new(),
            sources_root: PathBuf::from(worker_args::SOURCES_ROOT),
            manual_root: PathBuf::from(worker_args::MANUAL_COMMITS_ROOT),
            share_gid: None,
            read_only_prefixes: Vec::new(),
        }
    }

    /// The Persistent Dirs' settings, `None` without any.
    pub fn persistent(&self) -> Option<PersistentConfig> {
        (!self.persistent_dirs.is_empty()).then(|| PersistentConfig {
            dirs: self.persistent_dirs.clone(),
            sources_root: self.sources_root.clone(),
            manual_root: self.manual_root.clone(),
            checkout_root: self.workspace_root.join("persistent"),
            share_gid: self.share_gid,
        })
    }

    /// The mount table: the canonical layout, backed by the root's subfolders (`/` in a pod, so
    /// backing paths are the canonical paths).
    /// A session without skills may have no `/.agents` volume: that read-only mount is left out
    /// rather than failing the sandbox.
    pub fn workspace(&self) -> WorkspaceSpec {
        let mut read_only = self.read_only_prefixes.clone();
        read_only.extend(
            self.persistent_dirs
                .iter()
                .filter(|d| d.policy.read_only())
                .map(|d| Path::new(kube_harness_workspace::spec::PERSISTENT).join(&d.name)),
        );
        let mut spec = WorkspaceSpec::canonical(&self.workspace_root, self.runtime, read_only);
        spec.mounts
            .retain(|m| m.writable || m.backing_path.is_dir());
        spec
    }

    /// The default Tier-0 sandbox this worker builds (its limits are the default `timeoutMs`).
    pub fn sandbox(&self) -> Result<SandboxConfig, NoMountNamespace> {
        Ok(SandboxConfig {
            workspace: self.workspace(),
            limits: Limits {
                timeout: self.command_timeout,
                ..Default::default()
            },
            presentation: self.presentation()?,
            denied: self.deny_commands.clone(),
        })
    }

    /// How the sandbox presents the workspace: `Direct` when backing paths are the canonical
    /// paths (the pod: no mount namespaces there); otherwise a private mount namespace, which
    /// needs root or user namespaces (the local host's way).
    pub fn presentation(&self) -> Result<Presentation, NoMountNamespace> {
        if self.workspace_root == Path::new("/") {
            return Ok(Presentation::Direct);
        }
        let caps = probe();
        if caps.mount_namespace {
            Ok(Presentation::Namespace)
        } else {
            Err(NoMountNamespace {
                root: self.workspace_root.clone(),
                detail: caps.namespace_detail,
            })
        }
    }
}

/// The workspace must be presented in a private mount namespace, and this host refuses one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("workspace root {} is not /, so the sandbox must present it in a private mount namespace, which this host refuses: {detail}", root.display())]
pub struct NoMountNamespace {
    pub root: PathBuf,
    pub detail: String,
}
