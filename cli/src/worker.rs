//! `kube-harness worker`: the Tier-0 worker of one session, serving the runtime over HTTP (the
//! operator runs it in the session's pod), or with `--tier 1` the agent of a Tier-1 pod
//! (docs/tier1.md). Every flag can also come from a `KH_WORKER_*` environment variable, which is
//! how the pod template sets them.

use anyhow::Context;
use clap::{ArgAction, Args};
use kube_harness_worker::api::{
    self, AuthConfig, ConnectionLimits, SameSession, SessionLogConfig, Worker, WorkerConfig,
};
use kube_harness_worker::classify::RuntimeToggles;
use kube_harness_worker::runtime::NextTier;
use kube_harness_worker::tier1::{self, Agent, AgentConfig, PodTier1, PodTier1Config};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Address to serve the API on.
    #[arg(long, env = "KH_WORKER_LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// File holding the bearer token clients must send (the session's Secret, mounted).
    #[arg(long, env = "KH_WORKER_TOKEN_FILE", value_name = "FILE")]
    token_file: PathBuf,
    /// The session's name: the default session log run id, reported by /v1/status.
    #[arg(long, env = "KH_WORKER_SESSION", default_value = "session")]
    session: String,
    /// The tier this process is: 0 (the session's worker) or 1 (the agent of a Tier-1 pod,
    /// which uses only --listen, --token-file, --workspace-root, --command-timeout,
    /// --max-timeout, --max-body-bytes, --max-archive-bytes and the connection flags
    /// --header-read-timeout, --idle-timeout, --max-connections).
    #[arg(long, env = "KH_WORKER_TIER", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    tier: u8,
    /// Whether python3/python may run on Tier-0.
    #[arg(long, env = "KH_WORKER_PYTHON", value_name = "BOOL", default_value_t = true, action = ArgAction::Set)]
    python: bool,
    /// Whether node may run on Tier-0.
    #[arg(long, env = "KH_WORKER_JAVASCRIPT", value_name = "BOOL", default_value_t = true, action = ArgAction::Set)]
    javascript: bool,
    /// Whether network clients (curl) may run on Tier-0.
    #[arg(long, env = "KH_WORKER_NETWORK", value_name = "BOOL", default_value_t = false, action = ArgAction::Set)]
    network: bool,
    /// Refuse this command on every tier (repeatable; in the env variable: comma-separated).
    #[arg(
        long = "deny-command",
        env = "KH_WORKER_DENY_COMMAND",
        value_name = "CMD",
        value_delimiter = ','
    )]
    deny_command: Vec<String>,
    /// A second exec for a busy session waits (`queue`) or is answered 409 (`reject`).
    #[arg(long, env = "KH_WORKER_SAME_SESSION", default_value = "queue", value_parser = ["queue", "reject"])]
    same_session: String,
    /// The session log service (`http://host:port`); events are appended there, and steps with
    /// a runId and stepKey are replayed from it.
    #[arg(long, env = "KH_WORKER_SESSION_LOG_URL", value_name = "URL")]
    session_log_url: Option<String>,
    /// File holding the session log's bearer token.
    #[arg(long, env = "KH_WORKER_SESSION_LOG_TOKEN_FILE", value_name = "FILE")]
    session_log_token_file: Option<PathBuf>,
    /// Prefix of every session-log run this worker writes: run R becomes SCOPE:R, and requests
    /// without a runId go to run SCOPE. The operator sets NAMESPACE:UID of the session.
    #[arg(long, env = "KH_WORKER_SESSION_LOG_RUN_SCOPE", value_name = "SCOPE")]
    session_log_run_scope: Option<String>,
    /// Where the canonical workspace directories are: `/` in a pod (volumes mounted at
    /// /session, /artifacts, /persistent, /.agents); elsewhere a directory holding session/,
    /// artifacts/, persistent/ and .agents/ (presented through a private mount namespace).
    #[arg(
        long,
        env = "KH_WORKER_WORKSPACE_ROOT",
        default_value = "/",
        value_name = "DIR"
    )]
    workspace_root: PathBuf,
    /// Where escalating commands go: `none` refuses them with exit 126; `pod` asks the
    /// operator's tier API for a Tier-1 pod (needs --tier-api-url and --session-namespace).
    #[arg(long, env = "KH_WORKER_ESCALATION", default_value = "none", value_parser = ["none", "pod"])]
    escalation: String,
    /// The operator's tier API (`http://<release>-operator.<namespace>:8081`), for
    /// `--escalation pod`; the worker's own token (--token-file) is the bearer.
    #[arg(long, env = "KH_WORKER_TIER_API_URL", value_name = "URL")]
    tier_api_url: Option<String>,
    /// The session's namespace, for `--escalation pod`.
    #[arg(long, env = "KH_WORKER_SESSION_NAMESPACE", value_name = "NS")]
    session_namespace: Option<String>,
    /// How long a Tier-1 pod may take to be ready and bound before the command is refused
    /// with 126, in seconds.
    #[arg(
        long,
        env = "KH_WORKER_PROVISION_TIMEOUT",
        default_value_t = 180,
        value_name = "SECONDS"
    )]
    provision_timeout: u64,
    /// Default per-command time limit, in seconds.
    #[arg(
        long,
        env = "KH_WORKER_COMMAND_TIMEOUT",
        default_value_t = 60,
        value_name = "SECONDS"
    )]
    command_timeout: u64,
    /// The most a request's timeoutMs may ask for, in seconds.
    #[arg(
        long,
        env = "KH_WORKER_MAX_TIMEOUT",
        default_value_t = 600,
        value_name = "SECONDS"
    )]
    max_timeout: u64,
    /// Largest accepted JSON request body, in bytes (413 beyond; read as it arrives and cut off
    /// there). Default: 262144 (256 KiB) for the worker, 4194304 (4 MiB) for the agent
    /// (`--tier 1`), whose exec requests also carry the session's exported variables.
    #[arg(long, env = "KH_WORKER_MAX_BODY_BYTES", value_name = "BYTES")]
    max_body_bytes: Option<usize>,
    /// Largest archive, in bytes (default 1 GiB). The worker: the workspace it hands to a Tier-1
    /// pod and the change archive it reads back (beyond it the merge fails cleanly: nothing is
    /// applied, the turn's dispose reports it). The agent (`--tier 1`): the workspace archive
    /// it accepts (413 beyond) and the change archive it packs. Archives are streamed through
    /// a spool file in the temp directory, never held in memory.
    #[arg(
        long,
        env = "KH_WORKER_MAX_ARCHIVE_BYTES",
        default_value_t = tier1::pod::DEFAULT_MAX_ARCHIVE_BYTES,
        value_name = "BYTES"
    )]
    max_archive_bytes: u64,
    /// On SIGTERM, how long the running command may take to finish before the turn is ended.
    #[arg(
        long,
        env = "KH_WORKER_SHUTDOWN_GRACE",
        default_value_t = 20,
        value_name = "SECONDS"
    )]
    shutdown_grace: u64,
    /// At most this many file events (`harness.file.*`) per command and per merge-back; past
    /// it one `harness.file.truncated` event with the counts. Also the most paths the end-turn
    /// answer lists.
    #[arg(
        long,
        env = "KH_WORKER_MAX_FILE_EVENTS",
        default_value_t = kube_harness_worker::runtime::event::DEFAULT_MAX_FILE_EVENTS,
        value_name = "N"
    )]
    max_file_events: usize,
    /// At most this many bytes of paths (as JSON strings) in one command's (or one merge-back's)
    /// file events, the rest counted in the `harness.file.truncated` event; also the most bytes
    /// of paths the end-turn answer lists.
    #[arg(
        long,
        env = "KH_WORKER_MAX_FILE_EVENT_BYTES",
        default_value_t = kube_harness_worker::runtime::event::DEFAULT_MAX_FILE_EVENT_BYTES,
        value_name = "BYTES"
    )]
    max_file_event_bytes: usize,
    /// Seconds a client has to send a request's head (from connecting, or from the first byte
    /// of a request on a kept-alive connection); then the connection is closed.
    #[arg(
        long,
        env = "KH_WORKER_HEADER_READ_TIMEOUT",
        default_value_t = api::DEFAULT_HEADER_READ_TIMEOUT.as_secs(),
        value_name = "SECONDS"
    )]
    header_read_timeout: u64,
    /// Seconds a kept-alive connection with no request in flight may stay silent.
    #[arg(
        long,
        env = "KH_WORKER_IDLE_TIMEOUT",
        default_value_t = api::DEFAULT_IDLE_TIMEOUT.as_secs(),
        value_name = "SECONDS"
    )]
    idle_timeout: u64,
    /// Most client connections open at once (at most half the open-file limit). At the limit a
    /// new connection closes the longest-waiting idle or half-sent one; when all are answering
    /// requests, it waits.
    #[arg(
        long,
        env = "KH_WORKER_MAX_CONNECTIONS",
        default_value_t = api::DEFAULT_MAX_CONNECTIONS,
        value_name = "N"
    )]
    max_connections: usize,
}

impl WorkerArgs {
    fn connections(&self) -> anyhow::Result<ConnectionLimits> {
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(self.header_read_timeout),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            max_connections: self.max_connections,
        };
        limits.validate().map_err(|e| {
            anyhow::anyhow!("--header-read-timeout, --idle-timeout, --max-connections: {e}")
        })?;
        Ok(limits)
    }
}

pub fn run(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    if args.command_timeout == 0 || args.command_timeout > args.max_timeout {
        anyhow::bail!("--command-timeout must be 1..=--max-timeout seconds");
    }
    if args.max_body_bytes == Some(0) || args.max_archive_bytes == 0 {
        anyhow::bail!("--max-body-bytes and --max-archive-bytes must be at least 1");
    }
    let connections = args.connections()?;
    if args.tier == 1 {
        return run_agent(args, connections);
    }
    let auth = AuthConfig::from_token_file(&args.token_file)?;
    let next_tier = match args.escalation.as_str() {
        "pod" => Some(pod_tier(&args)?),
        _ => None,
    };
    let session_log = match (&args.session_log_url, &args.session_log_token_file) {
        (Some(url), token_file) => Some(SessionLogConfig {
            url: url.clone(),
            token: match token_file {
                Some(path) => Some(
                    std::fs::read_to_string(path)
                        .with_context(|| format!("reading {}", path.display()))?
                        .trim()
                        .to_string(),
                ),
                None => None,
            },
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
    let mut config = WorkerConfig::new(args.session, args.workspace_root);
    config.runtime = RuntimeToggles {
        python: args.python,
        javascript: args.javascript,
        network: args.network,
    };
    config.deny_commands = args.deny_command;
    config.same_session = args
        .same_session
        .parse::<SameSession>()
        .map_err(anyhow::Error::msg)?;
    config.session_log = session_log;
    config.command_timeout = Duration::from_secs(args.command_timeout);
    config.max_timeout = Duration::from_secs(args.max_timeout);
    config.shutdown_grace = Duration::from_secs(args.shutdown_grace);
    config.connections = connections;
    config.max_file_events = args.max_file_events;
    config.max_file_event_bytes = args.max_file_event_bytes;
    if let Some(max) = args.max_body_bytes {
        config.max_body_bytes = max;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let worker = Arc::new(Worker::new(config, next_tier).map_err(anyhow::Error::msg)?);
        let listener = api::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        api::serve(listener, worker, auth, api::shutdown_signal())
            .await
            .context("serving")
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `--escalation pod`: Tier-1 pods from the operator, the worker's token as the bearer.
fn pod_tier(args: &WorkerArgs) -> anyhow::Result<Arc<dyn NextTier>> {
    let (Some(url), Some(namespace)) = (&args.tier_api_url, &args.session_namespace) else {
        anyhow::bail!("--escalation pod needs --tier-api-url and --session-namespace");
    };
    if args.provision_timeout == 0 {
        anyhow::bail!("--provision-timeout must be at least 1 second");
    }
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| format!("reading {}", args.token_file.display()))?;
    let mut config = PodTier1Config::new(url, namespace, &args.session, token.trim());
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
    if let Some(max) = args.max_body_bytes {
        config.max_exec_body_bytes = max;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let agent = Arc::new(Agent::new(config).map_err(anyhow::Error::msg)?);
        let listener = api::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        tracing::info!(addr = %args.listen, "Tier-1 agent listening");
        tier1::agent_http::serve_with(listener, agent, auth, connections, api::shutdown_signal())
            .await
            .context("serving")
    })?;
    Ok(ExitCode::SUCCESS)
}
