//! `kube-harness worker`: the Tier-0 worker of one session, serving the runtime over HTTP (the
//! operator runs it in the session's pod). Every flag can also come from a `KH_WORKER_*`
//! environment variable, which is how the pod template sets them.

use anyhow::Context;
use clap::{ArgAction, Args};
use kube_harness_worker::api::{
    self, AuthConfig, SameSession, SessionLogConfig, Worker, WorkerConfig,
};
use kube_harness_worker::classify::RuntimeToggles;
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
    /// The tier this worker is. Only 0 exists so far (Tier-1 agent mode is not built yet).
    #[arg(long, env = "KH_WORKER_TIER", default_value_t = 0)]
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
    /// Where escalating commands go: `none` refuses them with exit 126 (no Tier-1 tier yet).
    #[arg(long, env = "KH_WORKER_ESCALATION", default_value = "none", value_parser = ["none"])]
    escalation: String,
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
    /// On SIGTERM, how long the running command may take to finish before the turn is ended.
    #[arg(
        long,
        env = "KH_WORKER_SHUTDOWN_GRACE",
        default_value_t = 20,
        value_name = "SECONDS"
    )]
    shutdown_grace: u64,
}

pub fn run(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    if args.tier != 0 {
        anyhow::bail!(
            "--tier {} is not supported: this worker serves Tier-0 only (Tier-1 agent mode is not built yet)",
            args.tier
        );
    }
    if args.command_timeout == 0 || args.command_timeout > args.max_timeout {
        anyhow::bail!("--command-timeout must be 1..=--max-timeout seconds");
    }
    let auth = AuthConfig::from_token_file(&args.token_file)?;
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
        }),
        (None, Some(_)) => anyhow::bail!("--session-log-token-file needs --session-log-url"),
        (None, None) => None,
    };
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
    // `--escalation none` is the only choice so far: no next tier, escalations refused with 126.
    debug_assert_eq!(args.escalation, "none");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let worker = Arc::new(Worker::new(config, None).map_err(anyhow::Error::msg)?);
        let listener = api::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        api::serve(listener, worker, auth, api::shutdown_signal())
            .await
            .context("serving")
    })?;
    Ok(ExitCode::SUCCESS)
}
