//! The Tier-1 agent (`kube-harness worker --tier 1`): one turn's workspace, bound once from the
//! worker's archive, commands run one at a time with real bash, and the changes since the bind
//! handed back as a change archive. Routes: `agent_http`; contract: docs/tier1.md.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::agent_skills::SkillsSink;
use super::bind::{self, BindError};
use super::error::Tier1Error;
use super::keeper::{self, Keeper};
use super::reap;
use super::shell::{self, ShellCommand, ShellLimits, View};
use super::skills::MAX_SKILLS_ARCHIVE_BYTES;
use axum::body::Body;
use base64::Engine;
use kube_harness_classify::RuntimeToggles;
use kube_harness_protocol::tier1::{AgentExec, AgentExecResult, BindReport};
use kube_harness_runtime::state;
use kube_harness_service_kit::body::{self, BodyError, BodyHead, Capped, Receiving};
use kube_harness_service_kit::ApiError;
use kube_harness_workspace::{self as workspace, PackOptions, Snapshot, WorkspaceSpec};
use std::io::{Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest script run directly: bash gets it as one argument, capped by the kernel at 128 KiB
/// (MAX_ARG_STRLEN, including the NUL).
pub const MAX_SCRIPT_BYTES: usize = 128 * 1024 - 1;

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// `/` in a pod (the volumes are at the canonical paths); elsewhere a directory holding
    /// `session/`, `artifacts/`, `persistent/`, presented at the canonical paths through a
    /// private mount namespace (needs root), as the local host's Tier-1 does.
    pub workspace_root: PathBuf,
    /// The limit of a command whose request names none.
    pub default_timeout: Duration,
    /// The most a request's `timeoutMs` may ask for.
    pub max_timeout: Duration,
    pub max_output_bytes: usize,
    /// Largest accepted workspace archive (413 beyond), and largest change archive packed.
    pub max_archive_bytes: u64,
    /// Largest accepted exec request body (413 beyond).
    pub max_exec_body_bytes: usize,
    /// Kill and reap every leftover child after each command (the agent as PID 1 / subreaper;
    /// never in a process that has children of its own, such as a test).
    pub reap_orphans: bool,
    /// How long the reaper may take to end what a command left before the agent gives the pod
    /// up (see [`super::reap::end_leftovers`]).
    pub reap_bound: Duration,
    /// The pod's skills keeper (`--skills-keeper`), connected before anything is served. Without
    /// one, a `/` root shows no `/.agents`; any other root shows its `.agents` read-only.
    pub skills_keeper: Option<SocketAddr>,
    /// RLIMIT_NPROC of every command (`--max-processes`): in a pod, whose uid is its own, the
    /// most processes the commands may have at once. `None`: the agent's own limit.
    pub max_processes: Option<u64>,
}

impl AgentConfig {
    pub fn new(workspace_root: impl Into<PathBuf>) -> Self {
        AgentConfig {
            workspace_root: workspace_root.into(),
            default_timeout: Duration::from_secs(60),
            max_timeout: Duration::from_secs(3600),
            max_output_bytes: 1 << 20,
            max_archive_bytes: super::pod_config::DEFAULT_MAX_ARCHIVE_BYTES,
            max_exec_body_bytes: 4 << 20,
            reap_orphans: false,
            reap_bound: super::reap::REAP_BOUND,
            skills_keeper: None,
            max_processes: None,
        }
    }
}

enum BindState {
    Unbound,
    Bound(Arc<Snapshot>),
    /// A bind failed after it had started placing files: never served.
    Broken(String),
}

pub struct Agent {
    config: AgentConfig,
    spec: WorkspaceSpec,
    view: View,
    /// The spool for incoming archives and, for a namespace view, the command's script.
    scratch: tempfile::TempDir,
    bind: tokio::sync::Mutex<BindState>,
    /// One command at a time, as in one persistent shell.
    queue: tokio::sync::Mutex<()>,
    /// Why the pod serves no later turn: a command left processes the reaper could not end
    /// within its bound. Set once; the current turn goes on, every later bind is refused.
    given_up: std::sync::OnceLock<String>,
    /// Where `PUT /v1/skills` installs the session's skills.
    skills: SkillsSink,
    /// A command ran since the last bind: skills are installed before a turn's first command
    /// only, so a process that outlived its command cannot have them replaced.
    ran: AtomicBool,
}

fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::conflict(code, message)
}

impl Agent {
    pub fn new(config: AgentConfig) -> Result<Self, Tier1Error> {
        let root = &config.workspace_root;
        if !root.is_absolute() {
            return Err(Tier1Error::Unfit(format!(
                "workspace root {} is not absolute",
                root.display()
            )));
        }
        let direct = root == Path::new("/");
        let agents = root.join(".agents");
        let skills = match (config.skills_keeper, direct) {
            (Some(addr), _) => SkillsSink::Keeper(Arc::new(
                Keeper::connect(addr, keeper::CONNECT_WAIT)
                    .map_err(|e| Tier1Error::local("connecting to the skills keeper", e))?,
            )),
            (None, true) => SkillsSink::None,
            // Its own namespace binds it read-only at /.agents, as the local host's Tier-1 does.
            (None, false) => {
                std::fs::create_dir_all(&agents)
                    .map_err(|e| Tier1Error::local(format!("creating {}", agents.display()), e))?;
                SkillsSink::Dir(agents)
            }
        };
        let mut spec = WorkspaceSpec::canonical(root, RuntimeToggles::default(), Vec::new());
        spec.mounts
            .retain(|m| m.writable || m.backing_path.is_dir());
        let scratch = scratch_dir()?;
        let view = if direct {
            View::Direct
        } else {
            View::Namespace {
                scratch: scratch.path().to_path_buf(),
                mounts: spec.mounts.clone(),
            }
        };
        Ok(Agent {
            config,
            spec,
            view,
            scratch,
            bind: tokio::sync::Mutex::new(BindState::Unbound),
            queue: tokio::sync::Mutex::new(()),
            given_up: std::sync::OnceLock::new(),
            skills,
            ran: AtomicBool::new(false),
        })
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// 409 `broken` once the reaper gave the pod up: no later turn's data reaches it.
    fn serves_later_turns(&self) -> Result<(), ApiError> {
        match self.given_up.get() {
            Some(why) => Err(conflict(
                "broken",
                format!("{why}; this Tier-1 pod serves no later turn"),
            )),
            None => Ok(()),
        }
    }

    /// `PUT /v1/workspace`: spools the archive (up to the limit), unpacks it with the archive
    /// checks and places it. One use, unless `replace` (`?replace=true`: a pod kept for its
    /// session's next turn), which first empties the tracked mounts of the last turn's workspace
    /// and binds anew; refused (409 `busy`) while a command runs. A refused archive leaves the
    /// agent unbound. Refused (409 `broken`) for good once the agent gave the pod up.
    pub async fn bind(
        &self,
        head: &BodyHead,
        body: Body,
        replace: bool,
    ) -> Result<BindReport, ApiError> {
        self.serves_later_turns()?;
        let mut state = self
            .bind
            .try_lock()
            .map_err(|_| conflict("bind-in-progress", "another workspace bind is in progress"))?;
        match &*state {
            BindState::Unbound => {}
            BindState::Bound(_) if replace => {}
            BindState::Bound(_) => {
                return Err(conflict(
                    "already-bound",
                    "a workspace is already bound to this agent (a bind is one use; a kept pod's next turn replaces it with ?replace=true)",
                ))
            }
            BindState::Broken(reason) => {
                return Err(conflict(
                    "broken",
                    format!(
                        "an earlier bind failed half-way ({reason}); this agent serves nothing"
                    ),
                ))
            }
        }
        // Held to the end of the bind: no command runs while the workspace is replaced (a
        // command waits for the bind lock before it queues).
        let _quiet = match replace {
            true => Some(self.queue.try_lock().map_err(|_| {
                conflict(
                    "busy",
                    "a command is running; the workspace cannot be replaced now",
                )
            })?),
            false => None,
        };
        let started = std::time::Instant::now();
        let limit = self.config.max_archive_bytes;
        let spool = self.spool(head, body, limit, "workspace").await?;
        if replace {
            let spec = self.spec.clone();
            let cleared = tokio::task::spawn_blocking(move || bind::clear(&spec)).await;
            let failed = match cleared {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(e) => Some(format!("the clearing task failed ({e})")),
            };
            if let Some(why) = failed {
                // Half of the last workspace may be left: never served.
                let reason = format!("replacing the workspace: {why}");
                *state = BindState::Broken(reason.clone());
                return Err(ApiError::internal("bind-failed", reason));
            }
            *state = BindState::Unbound;
            tracing::debug!(
                ms = started.elapsed().as_secs_f64() * 1e3,
                "bind: the last workspace cleared"
            );
        }
        tracing::debug!(
            ms = started.elapsed().as_secs_f64() * 1e3,
            "bind: archive spooled"
        );
        let spec = self.spec.clone();
        let path = spool.path().to_path_buf();
        let bound = match tokio::task::spawn_blocking(move || bind::bind(&path, &spec)).await {
            Ok(bound) => bound,
            // A panic half-way may have placed files: this agent serves nothing from now on
            // (every later bind is 409 `broken`, /readyz 503), rather than answering later
            // binds from a half-written workspace.
            Err(e) => {
                let reason = format!("the bind task failed ({e})");
                *state = BindState::Broken(reason.clone());
                return Err(ApiError::internal("bind-failed", reason));
            }
        };
        drop(spool);
        match bound {
            Ok(bound) => {
                tracing::info!(
                    files = bound.report.files,
                    bytes = bound.report.bytes,
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "workspace bound"
                );
                *state = BindState::Bound(Arc::new(bound.base));
                self.ran.store(false, Ordering::SeqCst);
                Ok(bound.report)
            }
            Err(BindError::BadArchive(m)) => Err(ApiError::bad_request("bad-archive", m)),
            Err(BindError::NotEmpty(m)) => Err(conflict("workspace-not-empty", m)),
            Err(BindError::Io(m)) => Err(ApiError::internal("bind-failed", m)),
            Err(BindError::HalfBound(m)) => {
                *state = BindState::Broken(m.clone());
                Err(ApiError::internal("bind-failed", m))
            }
        }
    }

    /// `PUT /v1/skills`: installs the session's skills (a skills archive, `skills.rs`),
    /// replacing what `/.agents` showed. Only while no command runs and none has run since the
    /// last bind (409 `busy`, `commands-ran`): the worker sends them after the bind, before the
    /// turn's first command.
    pub async fn put_skills(&self, head: &BodyHead, body: Body) -> Result<BindReport, ApiError> {
        let state = self
            .bind
            .try_lock()
            .map_err(|_| conflict("bind-in-progress", "a workspace bind is in progress"))?;
        if let BindState::Broken(reason) = &*state {
            return Err(conflict(
                "broken",
                format!("an earlier bind failed half-way ({reason}); this agent serves nothing"),
            ));
        }
        self.serves_later_turns()?;
        let _quiet = self.queue.try_lock().map_err(|_| {
            conflict(
                "busy",
                "a command is running; skills cannot be installed now",
            )
        })?;
        if self.ran.load(Ordering::SeqCst) {
            return Err(conflict(
                "commands-ran",
                "skills are installed before the turn's first command, and a command has run since the last bind",
            ));
        }
        let spool = self
            .spool(head, body, MAX_SKILLS_ARCHIVE_BYTES, "skills")
            .await?;
        let installed = self.skills.install(spool.reopen().map_err(|e| {
            ApiError::internal("skills-failed", format!("reading the spooled skills: {e}"))
        })?);
        let report = installed.await?;
        tracing::info!(
            files = report.files,
            bytes = report.bytes,
            "skills installed"
        );
        Ok(report)
    }

    /// Streams a request body into a spool file, refusing it past `limit` (413: at once when its
    /// Content-Length says so, else the moment the count passes the limit) or when it does not
    /// keep its pace (408 `body-timeout`, `ConnectionLimits::body`); the partial spool is removed
    /// with the error.
    async fn spool(
        &self,
        head: &BodyHead,
        body: Body,
        limit: u64,
        what: &str,
    ) -> Result<tempfile::NamedTempFile, ApiError> {
        let refused = |e: BodyError| match e {
            BodyError::TooLarge { .. } => ApiError::too_large(format!(
                "the {what} archive is over the limit of {limit} bytes"
            )),
            BodyError::TooSlow { .. } => body_timeout(&e),
            other => {
                ApiError::bad_request("bad-body", format!("reading the request body: {other}"))
            }
        };
        let mut receiving = Receiving::start(head, body, limit).await.map_err(refused)?;
        let io = |e: std::io::Error| {
            ApiError::internal("spool-failed", format!("spooling the archive: {e}"))
        };
        let mut file = tempfile::NamedTempFile::new_in(self.scratch.path()).map_err(io)?;
        while let Some(chunk) = receiving.next().await.map_err(refused)? {
            file.write_all(&chunk).map_err(io)?;
        }
        file.flush().map_err(io)?;
        Ok(file)
    }

    async fn base(&self) -> Result<Arc<Snapshot>, ApiError> {
        match &*self.bind.lock().await {
            BindState::Bound(base) => Ok(base.clone()),
            BindState::Unbound => Err(conflict(
                "not-bound",
                "no workspace is bound yet: PUT /v1/workspace first",
            )),
            BindState::Broken(reason) => Err(conflict(
                "broken",
                format!("the bind failed half-way ({reason}); this agent serves nothing"),
            )),
        }
    }

    /// `POST /v1/exec`: validates, then runs the command in its own task (a client that goes
    /// away does not cut it off half-way) after the commands queued before it.
    pub async fn exec(self: &Arc<Self>, req: AgentExec) -> Result<AgentExecResult, ApiError> {
        let timeout = self.validate(&req)?;
        self.base().await?;
        let agent = self.clone();
        let task = tokio::spawn(async move {
            let _turn = agent.queue.lock().await;
            agent.ran.store(true, Ordering::SeqCst);
            let mut env = shell::own_environment();
            for (k, v) in &req.env {
                if state::carried(k) {
                    env.insert(k.clone(), v.clone());
                }
            }
            let limits = ShellLimits {
                timeout,
                max_output_bytes: agent.config.max_output_bytes,
                max_processes: agent.config.max_processes,
                ..ShellLimits::default()
            };
            let cmd = ShellCommand {
                script: &req.script,
                cwd: Path::new(&req.cwd),
                env: &env,
            };
            let started = std::time::Instant::now();
            let mut result = shell::run(&cmd, &agent.view, &limits)
                .await
                .unwrap_or_else(|e| kube_harness_runtime::fault(&format!("Tier-1 agent: {e}")));
            tracing::debug!(
                ms = started.elapsed().as_secs_f64() * 1e3,
                exit_code = result.exit_code,
                "exec: command ran"
            );
            if agent.config.reap_orphans {
                if let Some(why) = agent.end_leftovers().await {
                    if !result.stderr.is_empty() && !result.stderr.ends_with(b"\n") {
                        result.stderr.push(b'\n');
                    }
                    result.stderr.extend_from_slice(
                        format!("kube-harness: {why}; this Tier-1 pod serves no later turn\n")
                            .as_bytes(),
                    );
                }
            }
            result
        });
        let result = task
            .await
            .map_err(|e| ApiError::internal("internal", format!("the exec task failed: {e}")))?;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        Ok(AgentExecResult {
            stdout_b64: b64(&result.stdout),
            stderr_b64: b64(&result.stderr),
            state_b64: b64(&result.state),
            exit_code: result.exit_code,
            timed_out: result.timed_out,
            truncated: result.truncated(),
            stdout_truncated: result.stdout_truncated,
            stderr_truncated: result.stderr_truncated,
            duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Ends every process the command left (see [`reap::end_leftovers`]). When that fails
    /// within the bound, the pod is given up (fail closed: the survivors may be waiting for the
    /// session's next turn) and the reason is returned.
    async fn end_leftovers(&self) -> Option<String> {
        let bound = self.config.reap_bound;
        let why = match tokio::task::spawn_blocking(move || reap::end_leftovers(bound)).await {
            Ok(Ok(())) => return None,
            Ok(Err(e)) => e.to_string(),
            Err(e) => format!("the reaping task failed ({e})"),
        };
        tracing::error!(%why, "giving this Tier-1 pod up: it serves no later turn");
        let _ = self.given_up.set(why.clone());
        Some(why)
    }

    fn validate(&self, req: &AgentExec) -> Result<Duration, ApiError> {
        let bad = |m: String| ApiError::bad_request("bad-request", m);
        if matches!(self.view, View::Direct) && req.script.len() > MAX_SCRIPT_BYTES {
            return Err(ApiError::too_large(format!(
                "script is {} bytes, over the limit of {MAX_SCRIPT_BYTES}",
                req.script.len()
            )));
        }
        if req.script.contains('\0') {
            return Err(bad("script contains a NUL byte".into()));
        }
        if !req.cwd.starts_with('/') || req.cwd.contains('\0') {
            return Err(bad(format!("cwd {:?} is not an absolute path", req.cwd)));
        }
        for (k, v) in &req.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(bad(format!("invalid environment variable {k:?}")));
            }
        }
        match req.timeout_ms {
            None => Ok(self.config.default_timeout),
            Some(ms) if ms == 0 || Duration::from_millis(ms) > self.config.max_timeout => {
                Err(bad(format!(
                    "timeoutMs must be 1..={}",
                    self.config.max_timeout.as_millis()
                )))
            }
            Some(ms) => Ok(Duration::from_millis(ms)),
        }
    }

    /// `GET /v1/changes`: a change archive of what differs from the bind (after the command
    /// running now, if any), packed into an unnamed spool file (never into memory) of at most
    /// `max_archive_bytes`. Returns the file, rewound, and its length.
    pub async fn changes(&self) -> Result<(std::fs::File, u64), ApiError> {
        let base = self.base().await?;
        let _turn = self.queue.lock().await;
        let spec = self.spec.clone();
        let dir = self.scratch.path().to_path_buf();
        let limit = self.config.max_archive_bytes;
        tokio::task::spawn_blocking(move || {
            let io = |e: std::io::Error| {
                ApiError::internal("changes-failed", format!("spooling the changes: {e}"))
            };
            let file = tempfile::tempfile_in(&dir).map_err(io)?;
            let mut out = Capped::new(
                std::io::BufWriter::with_capacity(body::SPOOL_BUFFER, file),
                limit,
            );
            let packed = workspace::changes_since(&spec, &base, &PackOptions::default(), &mut out);
            if out.over {
                return Err(ApiError::internal(
                    "changes-too-large",
                    format!("the change archive is over the limit of {limit} bytes"),
                ));
            }
            packed.map_err(|e| {
                ApiError::internal("changes-failed", format!("packing the changes: {e}"))
            })?;
            let length = out.written;
            let mut file = out.inner.into_inner().map_err(|e| io(e.into_error()))?;
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            Ok((file, length))
        })
        .await
        .map_err(|e| ApiError::internal("internal", format!("changes task: {e}")))?
    }

    /// Why this agent serves no later turn (`/readyz` answers 503 with it): a bind failed
    /// half-way, or a command left processes it could not end.
    pub fn broken(&self) -> Option<String> {
        if let Some(why) = self.given_up.get() {
            return Some(format!("{why}; this Tier-1 pod serves no later turn"));
        }
        match self.bind.try_lock().as_deref() {
            Ok(BindState::Broken(reason)) => Some(format!(
                "a workspace bind failed half-way ({reason}); this agent serves nothing"
            )),
            _ => None,
        }
    }

    /// Whether a workspace is bound (reported by `/readyz`).
    pub fn is_bound(&self) -> bool {
        self.bind
            .try_lock()
            .map(|s| matches!(&*s, BindState::Bound(_)))
            .unwrap_or(false)
    }
}

/// 408 `body-timeout`: a request body that did not keep its pace (or deadline); nothing was done
/// with the request.
pub(crate) fn body_timeout(e: &BodyError) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::REQUEST_TIMEOUT,
        "body-timeout",
        format!("{e}; nothing was done"),
    )
}

/// A private directory for spools and scripts: under the temp dir, else under `HOME` (a pod
/// with a read-only root filesystem still has a writable `HOME` volume).
fn scratch_dir() -> Result<tempfile::TempDir, Tier1Error> {
    let mut tried = Vec::new();
    let candidates = [
        Some(std::env::temp_dir()),
        std::env::var_os("HOME").map(PathBuf::from),
    ];
    for dir in candidates.into_iter().flatten() {
        match tempfile::Builder::new()
            .prefix("kube-harness-agent-")
            .tempdir_in(&dir)
        {
            Ok(t) => return Ok(t),
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(Tier1Error::Unfit(format!(
        "no writable scratch directory ({})",
        tried.join("; ")
    )))
}
