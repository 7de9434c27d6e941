//! `kube-harness ledger serve ...`: the command-line face, shared by the main binary so that what
//! tests start is what users run.

use crate::http::router;
use crate::ledger::create_durable_orchestration_services;
use crate::store::{DurableJsonStore, FileStore, MemoryStore, PostgresStore, PostgresStoreOptions};
use anyhow::Context;
use clap::{Args, Subcommand};
use kube_harness_service_kit::{
    bind, serve_with, shutdown_signal, AuthConfig, ConnectionArgs, StoreSpec,
};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct LedgerArgs {
    #[command(subcommand)]
    pub command: LedgerCommand,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Serve the orchestration ledgers (tasks, continuations, wakeups, queues, results) over HTTP.
    Serve(ServeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Where ledgers live: memory (lost on exit), file:DIR (one JSON file per record), postgres:URL.
    #[arg(long, default_value = "memory", env = "KH_LEDGER_STORE")]
    pub store: StoreSpec,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8788")]
    pub listen: SocketAddr,
    /// File holding the bearer token clients must present.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Serve without authentication (anyone reaching the port can read and write).
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Key prefix under which the ledgers keep their records.
    #[arg(long, default_value = "ledgers")]
    pub root_dir: String,
    /// PostgreSQL schema holding the documents table.
    #[arg(long, default_value = "kube_harness_ledger")]
    pub pg_schema: String,
    /// Header read and idle timeouts, connection limit (docs/ledgers.md "Connections").
    #[command(flatten)]
    pub connections: ConnectionArgs,
}

/// Opens the `DurableJsonStore` a spec names.
pub async fn open_store(
    spec: &StoreSpec,
    pg_schema: &str,
) -> anyhow::Result<Arc<dyn DurableJsonStore>> {
    Ok(match spec {
        StoreSpec::Memory => Arc::new(MemoryStore::new()),
        StoreSpec::File(dir) => Arc::new(FileStore::open(dir.clone())?),
        StoreSpec::Postgres(url) => {
            let options = PostgresStoreOptions {
                schema: pg_schema.to_string(),
                ..Default::default()
            };
            Arc::new(PostgresStore::connect(url, options).await?)
        }
    })
}

/// Runs a `ledger` subcommand on its own tokio runtime.
pub fn run(args: LedgerArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        LedgerCommand::Serve(serve_args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("cannot start the tokio runtime")?;
            runtime.block_on(serve_ledger(serve_args))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens the store, binds and serves until SIGTERM/SIGINT.
pub async fn serve_ledger(args: ServeArgs) -> anyhow::Result<()> {
    let auth = AuthConfig::from_args(args.token_file.as_deref(), args.insecure_no_auth)?;
    let limits = args.connections.limits()?;
    let store = open_store(&args.store, &args.pg_schema)
        .await
        .with_context(|| format!("cannot open store {}", args.store))?;
    let services = create_durable_orchestration_services(&args.root_dir, store)?;
    let app = router(services, auth, Registry::default());
    let listener = bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(store = %args.store, "ledger service serving");
    serve_with(listener, app, limits, shutdown_signal()).await?;
    Ok(())
}
