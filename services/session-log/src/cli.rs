//! `kube-harness session-log ...`: the command-line face, shared by the main binary and the test
//! server binary so that crash tests kill exactly what users run.

use crate::server::{app, ServerConfig};
use crate::store::{new_batch_histogram, Quotas, Store, StoreOptions};
use anyhow::Context;
use clap::{ArgAction, Args, Subcommand};
use kube_harness_service_kit::{
    bind, serve_with, shutdown_signal, AuthConfig, ConnectionArgs, StoreSpec,
};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct SessionLogArgs {
    #[command(subcommand)]
    pub command: SessionLogCommand,
}

#[derive(Debug, Subcommand)]
pub enum SessionLogCommand {
    /// Serve the session log (lh.remote-session.v1) over HTTP.
    Serve(ServeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Where events live: memory (lost on exit), file:PATH (one NDJSON file), postgres:URL.
    #[arg(long, default_value = "memory", env = "KH_SESSION_LOG_STORE")]
    pub store: StoreSpec,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,
    /// File holding the bearer token clients must present.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Serve without authentication (anyone reaching the port can read and write).
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// File store: fsync before acknowledging. `--sync=false` gives up crash durability.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub sync: bool,
    /// Largest accepted payload, in bytes of canonical JSON (over it: 413).
    #[arg(long, default_value_t = crate::model::DEFAULT_MAX_PAYLOAD_BYTES)]
    pub max_payload_bytes: usize,
    /// Most bytes of events one session (run `NS:UID` and runs `NS:UID:…`) may store; past it an
    /// append is 413 `session-quota-exceeded` and nothing is written.
    #[arg(long, default_value_t = crate::store::DEFAULT_MAX_SESSION_BYTES)]
    pub max_session_bytes: u64,
    /// Most bytes of events one namespace (runs `NS` and `NS:…`) may store; past it an append is
    /// 413 `namespace-quota-exceeded` and nothing is written.
    #[arg(long, default_value_t = crate::store::DEFAULT_MAX_NAMESPACE_BYTES)]
    pub max_namespace_bytes: u64,
    /// Reads served at once; each holds at most one page (4 MiB of events) until it is sent.
    #[arg(long, default_value_t = crate::reads::DEFAULT_READS_IN_FLIGHT)]
    pub max_reads_in_flight: usize,
    /// Header read and idle timeouts, connection limit (docs/session-log.md "Connections").
    #[command(flatten)]
    pub connections: ConnectionArgs,
}

/// Runs a `session-log` subcommand on its own tokio runtime.
pub fn run(args: SessionLogArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        SessionLogCommand::Serve(serve_args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the tokio runtime")?;
            runtime.block_on(serve_session_log(serve_args))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens the store, binds and serves until SIGTERM/SIGINT.
pub async fn serve_session_log(args: ServeArgs) -> anyhow::Result<()> {
    let auth = AuthConfig::from_args(args.token_file.as_deref(), args.insecure_no_auth)?;
    let limits = args.connections.limits()?;
    if !args.sync {
        tracing::warn!(
            "--sync=false: DURABILITY DISABLED. Appends are acknowledged before they reach the disk; a crash can lose acknowledged events"
        );
    }
    let mut registry = Registry::default();
    let batch_sizes = new_batch_histogram();
    registry.register(
        "kh_session_log_commit_batch_size",
        "Appends that shared one commit (fsync or transaction)",
        batch_sizes.clone(),
    );
    let store = Store::open(
        &args.store,
        StoreOptions {
            sync: args.sync,
            batch_sizes,
            quotas: Quotas {
                session_bytes: args.max_session_bytes,
                namespace_bytes: args.max_namespace_bytes,
            },
        },
    )
    .await
    .with_context(|| format!("cannot open store {}", args.store))?;
    let mut config = ServerConfig::new(auth);
    config.max_payload_bytes = args.max_payload_bytes;
    config.reads_in_flight = args.max_reads_in_flight;
    let router = app(store.clone(), config, registry);
    let listener = bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(store = %args.store, kind = store.kind(), "session log serving lh.remote-session.v1");
    serve_with(listener, router, limits, shutdown_signal()).await?;
    Ok(())
}
