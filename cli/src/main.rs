//! `kube-harness`: one binary, one subcommand per role.
//!
//! Each role lives in its own crate; this file only wires their command-line faces together.

/// mimalloc instead of the C library's allocator: cheaper under the services' many small,
/// cross-thread allocations, and far cheaper than musl's in the static image.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod classify;
mod cp;
mod crdgen;
mod exec;
mod ledger;
mod local;
mod operator;
mod session_log;
mod sessions;
mod toggles;
mod worker;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kube-harness",
    version,
    about = "Shell execution for AI agents, on Kubernetes or locally"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Classify a script with tree-sitter-bash: tier0, escalate or refuse.
    Classify(classify::ClassifyArgs),
    /// The session log service (lh.remote-session.v1): durable, idempotent, replayable.
    SessionLog(session_log::SessionLogArgs),
    /// The orchestration ledger service: tasks, continuations, wakeups, workflow queues, results.
    Ledger(ledger::LedgerArgs),
    /// The local host: run commands in a session without a cluster, and inspect its data.
    Local(local::LocalArgs),
    /// Print the CRDs (HarnessSession, SandboxTier) as YAML, generated from the Rust types.
    Crdgen(crdgen::CrdgenArgs),
    /// The operator: HarnessSession and SandboxTier controllers, leader-elected.
    Operator(operator::OperatorArgs),
    /// Run one command in a HarnessSession (through the API server) and exit with its code.
    Exec(exec::ExecArgs),
    /// End a session's open turn: merge a Tier-1 sandbox back and release it, write the usage.
    EndTurn(exec::EndTurnArgs),
    /// Copy one file into or out of a session: `cp ./x SESSION:/session/x` or back.
    Cp(cp::CpArgs),
    /// List HarnessSessions with phase, readiness, tier and usage.
    Sessions(sessions::SessionsArgs),
    /// The Tier-0 worker of one session: serves exec, end-turn and status over HTTP.
    Worker(worker::WorkerArgs),
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Classify(args) => classify::run(args),
        Command::SessionLog(args) => session_log::run(args),
        Command::Ledger(args) => ledger::run(args),
        Command::Local(args) => local::run(args),
        Command::Worker(args) => worker::run(args),
        Command::Crdgen(args) => crdgen::run(args),
        Command::Operator(args) => operator::run(args),
        Command::Exec(args) => exec::run(args),
        Command::EndTurn(args) => exec::run_end_turn(args),
        Command::Cp(args) => cp::run(args),
        Command::Sessions(args) => sessions::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("kube-harness: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Logs go to stderr so that stdout stays machine-readable for every subcommand.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBE_HARNESS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
