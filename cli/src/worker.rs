//! `kube-harness worker`: the Tier-0 worker of one session, serving the runtime over HTTP (the
//! operator runs it in the session's pod), or with `--tier 1` the agent of a Tier-1 pod
//! (docs/tier1.md). Every flag can also come from a `KH_WORKER_*` environment variable, which is
//! how the pod template sets them. The settings are `protocol::worker_args::WorkerArgs`, the
//! type the operator renders a worker pod's arguments from.

use anyhow::Context;
use kube_harness_worker::api::tier0::Prepared;
use kube_harness_worker::api::{
    self, AuthConfig, ConnectionLimits, SessionLogConfig, Worker, WorkerConfig,
};
use kube_harness_worker::classify::RuntimeToggles;
pub use kube_harness_worker::protocol::worker_args::WorkerArgs;
use kube_harness_worker::protocol::worker_args::{Escalation, SOURCES_GID};
use kube_harness_worker::runtime::NextTier;
use kube_harness_worker::tier1::{self, Agent, AgentConfig, PodTier1, PodTier1Config};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

fn connections(args: &WorkerArgs) -> anyhow::Result<ConnectionLimits> {
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(args.header_read_timeout),
        idle_timeout: Duration::from_secs(args.idle_timeout),
        max_connections: args.max_connections,
        ..ConnectionLimits::default()
    };
    limits.validate().map_err(|e| {
        anyhow::anyhow!("--header-read-timeout, --idle-timeout, --max-connections: {e}")
    })?;
    Ok(limits)
}

pub fn run(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    check_limits(&args)?;
    let connections = connections(&args)?;
    if args.tier == 1 {
        return run_agent(args, connections);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        // Listening first: the kubelet probes readiness the moment it sees the container run,
        // and a connection that waits in the backlog while the sandbox is checked is answered
        // (ready) within that probe, where a refused one would wait for the next probe period.
        let listener = api::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        if let Some(pool_token) = &args.adopt_token_file {
            let pool_auth = AuthConfig::from_token_file(pool_token)?;
            let pool = PoolPaths::of(&args);
            // Built before serving: a probe that comes meanwhile waits in the backlog.
            let prepared = std::sync::Mutex::new(prepare(&args).await);
            let bind: api::adopt::Bind = Box::new(move |req| {
                let prepared = prepared.lock().unwrap_or_else(|e| e.into_inner()).take();
                adopt(&pool, req, prepared)
            });
            return api::adopt::serve_pooled(
                listener,
                pool_auth,
                connections,
                bind,
                api::shutdown_signal(),
            )
            .await
            .context("serving");
        }
        let secrets = Secrets::read(&args)?;
        let (worker, auth) = session_worker(&args, &secrets, None, None)?;
        api::serve(listener, worker, auth, api::shutdown_signal())
            .await
            .context("serving")
    })?;
    Ok(ExitCode::SUCCESS)
}

fn check_limits(args: &WorkerArgs) -> anyhow::Result<()> {
    if args.command_timeout == 0 || args.command_timeout > args.max_timeout {
        anyhow::bail!("--command-timeout must be 1..=--max-timeout seconds");
    }
    if args.max_body_bytes == Some(0) || args.max_archive_bytes == 0 || args.max_file_bytes == 0 {
        anyhow::bail!(
            "--max-body-bytes, --max-archive-bytes and --max-file-bytes must be at least 1"
        );
    }
    Ok(())
}

/// Where a pooled worker keeps what an adoption brings, from its own arguments (the pod's
/// layout), never from the adoption's: its workspace root (skills under `.agents`), its
/// `--token-file`, and its `--session-log-token-file` or else `session-log-token` beside the
/// token file.
struct PoolPaths {
    root: PathBuf,
    token_file: PathBuf,
    session_log_token_file: PathBuf,
}

impl PoolPaths {
    fn of(args: &WorkerArgs) -> Self {
        PoolPaths {
            root: args.workspace_root.clone(),
            token_file: args.token_file.clone(),
            session_log_token_file: args
                .session_log_token_file
                .clone()
                .unwrap_or_else(|| args.token_file.with_file_name("session-log-token")),
        }
    }
}

/// A warm worker's adoption: the session's arguments as if they had been the command line, but
/// with the pooled worker's own root and token files; then the same worker a cold start builds,
/// from the tokens in the request. Everything is checked, and the worker built, before anything
/// is written; then the tokens and skills are written all or nothing (issue 29: a refused
/// adoption had written its token file, and written it where the request said).
fn adopt(
    pool: &PoolPaths,
    req: &api::model::AdoptRequest,
    prepared: Option<Prepared>,
) -> Result<(Arc<Worker>, AuthConfig), String> {
    let mut args = WorkerArgs::parse_flags(&req.args).map_err(|e| e.to_string())?;
    if args.tier != 0 {
        return Err("only a Tier-0 worker can be adopted".into());
    }
    args.workspace_root = pool.root.clone();
    args.adopt_token_file = None;
    args.token_file = pool.token_file.clone();
    args.session_log_token_file = match (&args.session_log_token_file, &req.session_log_token) {
        (Some(_), Some(_)) => Some(pool.session_log_token_file.clone()),
        (None, None) => None,
        _ => return Err("--session-log-token-file and the session-log token come together".into()),
    };
    check_limits(&args).map_err(|e| e.to_string())?;
    let secrets = Secrets::given(&req.token, req.session_log_token.as_deref())?;
    let skills = api::adopt_files::check_skills(&req.skills)?;
    let settings = api::model::adoption_settings(req);
    let bound =
        session_worker(&args, &secrets, Some(settings), prepared).map_err(|e| format!("{e:#}"))?;
    let mut tokens = vec![(args.token_file.as_path(), secrets.token.as_str())];
    if let (Some(path), Some(token)) = (&args.session_log_token_file, &secrets.session_log) {
        tokens.push((path.as_path(), token.as_str()));
    }
    api::adopt_files::write_all(&tokens, &pool.root.join(".agents"), &skills)?;
    Ok(bound)
}

/// The session's tokens: its own (the bearer of its API, and of the operator's tier API for
/// escalation) and the session log's.
struct Secrets {
    token: String,
    session_log: Option<String>,
}

impl Secrets {
    /// A cold start's, from the files its arguments name (whitespace around each ignored; the
    /// session log's only when there is a session log, else the arguments are refused later).
    fn read(args: &WorkerArgs) -> anyhow::Result<Self> {
        let read = |what: &str, path: &std::path::Path| {
            std::fs::read_to_string(path)
                .map(|text| text.trim().to_string())
                .with_context(|| format!("cannot read {what} {}", path.display()))
        };
        Ok(Secrets {
            token: read("token file", &args.token_file)?,
            session_log: match (&args.session_log_url, &args.session_log_token_file) {
                (Some(_), Some(path)) => Some(read("session-log token file", path)?),
                _ => None,
            },
        })
    }

    /// An adoption's, as given: each must be a token as it travels, visible ASCII in one piece.
    fn given(token: &str, session_log: Option<&str>) -> Result<Self, String> {
        AuthConfig::with_token(token).map_err(|e| format!("the session's token: {e}"))?;
        if let Some(t) = session_log {
            AuthConfig::with_token(t).map_err(|e| format!("the session-log token: {e}"))?;
        }
        Ok(Secrets {
            token: token.to_string(),
            session_log: session_log.map(str::to_string),
        })
    }
}

/// A pooled worker's sandbox, built while it waits: the one a session that keeps the worker's
/// defaults (toggles, deny list, time limit) asks for. An adoption asking for another builds
/// its own; `None` (logged) if it cannot be built here, and then the adoption reports why.
async fn prepare(args: &WorkerArgs) -> Option<Prepared> {
    let built = match worker_config(args).sandbox() {
        Ok(sandbox) => tokio::task::spawn_blocking(move || Prepared::build(sandbox))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string())),
        Err(e) => Err(e.to_string()),
    };
    built
        .inspect_err(|e| tracing::warn!("no sandbox prepared for the adoption: {e}"))
        .ok()
}

/// The session's worker and its bearer auth, from its settings and tokens (no file is read
/// here). `adoption`: the digest of the adoption that bound them, if any (reported by
/// /v1/status).
fn session_worker(
    args: &WorkerArgs,
    secrets: &Secrets,
    adoption: Option<String>,
    prepared: Option<Prepared>,
) -> anyhow::Result<(Arc<Worker>, AuthConfig)> {
    let connections = connections(args)?;
    let auth = AuthConfig::with_token(&secrets.token)
        .with_context(|| format!("token file {}", args.token_file.display()))?;
    let next_tier = match args.escalation {
        Escalation::Pod => Some(pod_tier(args, &secrets.token)?),
        Escalation::None => None,
    };
    let session_log = match (&args.session_log_url, &args.session_log_token_file) {
        (Some(url), _) => Some(SessionLogConfig {
            url: url.clone(),
            token: secrets.session_log.clone(),
            run_scope: args.session_log_run_scope.clone(),
        }),
        (None, Some(_)) => anyhow::bail!("--session-log-token-file needs --session-log-url"),
        (None, None) if args.session_log_run_scope.is_some() => {
            anyhow::bail!("--session-log-run-scope needs --session-log-url")
        }
        (None, None) => None,
    };
    if let Some(scope) = &args.session_log_run_scope {
        kube_harness_session_log::RunId::parse(scope)
            .map_err(|e| anyhow::anyhow!("--session-log-run-scope {scope:?}: {}", e.message))?;
    }
    let mut config = worker_config(args);
    config.session_log = session_log;
    config.connections = connections;
    config.adoption = adoption;
    Ok((
        Arc::new(Worker::with_prepared(config, next_tier, prepared)?),
        auth,
    ))
}

/// The worker's settings from its arguments, all but the session log and connection limits
/// (which need checks that can fail).
fn worker_config(args: &WorkerArgs) -> WorkerConfig {
    let mut config = WorkerConfig::new(args.session.clone(), args.workspace_root.clone());
    config.runtime = RuntimeToggles {
        python: args.python,
        javascript: args.javascript,
        network: args.network,
    };
    config.deny_commands = args.deny_command.clone();
    config.same_session = args.same_session;
    config.command_timeout = Duration::from_secs(args.command_timeout);
    config.max_timeout = Duration::from_secs(args.max_timeout);
    config.shutdown_grace = Duration::from_secs(args.shutdown_grace);
    config.turn_idle_timeout = Duration::from_secs(args.turn_idle_timeout);
    config.max_file_events = args.max_file_events;
    config.max_file_event_bytes = args.max_file_event_bytes;
    config.max_file_bytes = args.max_file_bytes;
    config.max_archive_bytes = args.max_archive_bytes;
    if let Some(max) = args.max_body_bytes {
        config.max_body_bytes = max;
    }
    config.persistent_dirs = args.persistent_dir.clone();
    config.read_only_prefixes = args.read_only_prefix.clone();
    config.share_gid = in_group(SOURCES_GID).then_some(SOURCES_GID);
    config
}

/// Whether this process has `gid` (primary or supplemental).
fn in_group(gid: u32) -> bool {
    rustix::process::getgid().as_raw() == gid
        || rustix::process::getgroups().is_ok_and(|groups| groups.iter().any(|g| g.as_raw() == gid))
}

/// `--escalation pod`: Tier-1 pods from the operator, the worker's token as the bearer.
fn pod_tier(args: &WorkerArgs, token: &str) -> anyhow::Result<Arc<dyn NextTier>> {
    let (Some(url), Some(namespace)) = (&args.tier_api_url, &args.session_namespace) else {
        anyhow::bail!("--escalation pod needs --tier-api-url and --session-namespace");
    };
    if args.provision_timeout == 0 {
        anyhow::bail!("--provision-timeout must be at least 1 second");
    }
    let mut config = PodTier1Config::new(url, namespace, &args.session, token);
    config.provision_timeout = Duration::from_secs(args.provision_timeout);
    config.command_timeout = Duration::from_secs(args.command_timeout);
    config.max_archive_bytes = args.max_archive_bytes;
    Ok(Arc::new(PodTier1::new(config).map_err(anyhow::Error::msg)?))
}

/// `--tier 1`: the agent of a Tier-1 pod. It reaps its commands' escaped descendants (it is the
/// container's PID 1, or made a subreaper here).
fn run_agent(args: WorkerArgs, connections: ConnectionLimits) -> anyhow::Result<ExitCode> {
    let auth = AuthConfig::from_token_file(&args.token_file)?;
    tier1::reap::become_subreaper().context("becoming the reaper of orphaned commands")?;
    let mut config = AgentConfig::new(&args.workspace_root);
    config.default_timeout = Duration::from_secs(args.command_timeout);
    // The worker sends its own limits (up to its --max-timeout); the agent's bound is a guard
    // against nonsense, not a second policy.
    config.max_timeout = Duration::from_secs(args.max_timeout.max(3600));
    config.reap_orphans = true;
    config.max_archive_bytes = args.max_archive_bytes;
    config.skills_keeper = args.skills_keeper;
    config.max_processes = args.max_processes;
    if let Some(max) = args.max_body_bytes {
        config.max_exec_body_bytes = max;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        // Listening first, as the worker does (a readiness probe waits instead of failing).
        let listener = api::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let agent = Arc::new(Agent::new(config)?);
        tracing::info!(addr = %args.listen, "Tier-1 agent listening");
        tier1::agent_http::serve_with(listener, agent, auth, connections, api::shutdown_signal())
            .await
            .context("serving")
    })?;
    Ok(ExitCode::SUCCESS)
}
