//! The session log server alone (`kube-harness session-log serve` without the rest of the
//! binary), so this crate's crash tests can run it as a child process and SIGKILL it.

use clap::Parser;
use kube_harness_session_log::cli::{serve_session_log, ServeArgs};

/// The same allocator as the `kube-harness` binary, so crash tests run what users run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KUBE_HARNESS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match serve_session_log(Cli::parse().serve).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kh-session-log-test-server: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
