//! `kube-harness`: one binary, one subcommand per role.
//!
//! Each role lives in its own crate; this file only wires their command-line faces together.
//!
//! Installed (or linked) as `kubectl-harness`, the binary is a kubectl plugin: `kubectl harness
//! exec|sessions|cp|end-turn …` (argv[0] dispatch; the server roles are not offered there).

/// mimalloc instead of the C library's allocator: cheaper under the services' many small,
/// cross-thread allocations, and far cheaper than musl's in the static image.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod classify;
mod commit;
mod cp;
mod crdgen;
mod exec;
mod inspect;
mod ledger;
mod local;
mod operator;
mod ping;
mod reach;
mod session_log;
mod sessions;
mod skills_keeper;
mod toggles;
mod trace_view;
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
    /// How log lines (on stderr) are written: `text` for people, `json` (one object a line, with
    /// the span fields) for a log pipeline.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "KUBE_HARNESS_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The format of log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
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
    /// Print the CRDs (HarnessSession, SandboxTier, HarnessTurn) as YAML, generated from the Rust
    /// types.
    Crdgen(crdgen::CrdgenArgs),
    /// The operator: HarnessSession, SandboxTier and HarnessTurn controllers, leader-elected.
    Operator(operator::OperatorArgs),
    /// Run one command in a HarnessSession (through the API server) and exit with its code.
    Exec(exec::ExecArgs),
    /// End a session's open turn: merge a Tier-1 sandbox back and release it, write the usage.
    EndTurn(exec::EndTurnArgs),
    /// Write a Persistent Dir's version kept at the end of a turn to its source.
    Commit(commit::CommitArgs),
    /// Copy one file into or out of a session: `cp ./x SESSION:/session/x` or back.
    Cp(cp::CpArgs),
    /// List HarnessSessions with phase, readiness, tier and usage.
    Sessions(sessions::SessionsArgs),
    /// Print a session's events from its session log (as `local trace` does for a local one).
    Trace(inspect::TraceArgs),
    /// Count a session's dispose failures, refusals and time-outs; exit 1 if a dispose failed.
    Doctor(inspect::DoctorArgs),
    /// Run `true` in a session over each route and print the round trip's p50, p95 and max.
    Ping(ping::PingArgs),
    /// The Tier-0 worker of one session: serves exec, end-turn and status over HTTP.
    Worker(Box<worker::WorkerArgs>),
    /// The skills keeper of a Tier-1 pod: the one writer of the volume shown read-only at
    /// /.agents there; serves the agent's one loopback connection.
    SkillsKeeper(skills_keeper::SkillsKeeperArgs),
}

/// The name kubectl runs a plugin by (`kubectl harness …` → `kubectl-harness …`).
const PLUGIN_NAME: &str = "kubectl-harness";
/// What the plugin offers: the commands for reaching sessions, not the server roles.
const PLUGIN_COMMANDS: [&str; 8] = [
    "exec", "sessions", "cp", "end-turn", "commit", "ping", "trace", "doctor",
];

/// The command line as a kubectl plugin: `kubectl harness` in help and errors, and only the
/// session commands (any other is an unrecognised subcommand, exit 2).
fn plugin_command() -> clap::Command {
    use clap::CommandFactory;
    let full = Cli::command();
    let offered: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| PLUGIN_COMMANDS.contains(&s.get_name()))
        .cloned()
        .collect();
    let globals: Vec<clap::Arg> = full.get_arguments().cloned().collect();
    clap::Command::new(PLUGIN_NAME)
        .args(globals)
        .bin_name("kubectl harness")
        .version(env!("CARGO_PKG_VERSION"))
        .about(
            "Reach Kube Harness sessions from kubectl: exec, sessions, cp, end-turn, ping, trace, doctor",
        )
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommands(offered)
}

fn parse() -> Cli {
    let invoked_as = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    if invoked_as != PLUGIN_NAME {
        return Cli::parse();
    }
    use clap::FromArgMatches;
    let matches = plugin_command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let cli = parse();
    init_tracing(cli.log_format);
    let result = match cli.command {
        Command::Classify(args) => classify::run(args),
        Command::SessionLog(args) => session_log::run(args),
        Command::Ledger(args) => ledger::run(args),
        Command::Local(args) => local::run(args),
        Command::Worker(args) => worker::run(*args),
        Command::SkillsKeeper(args) => skills_keeper::run(args),
        Command::Crdgen(args) => crdgen::run(args),
        Command::Operator(args) => operator::run(args),
        Command::Exec(args) => exec::run(args),
        Command::EndTurn(args) => exec::run_end_turn(args),
        Command::Commit(args) => commit::run(args),
        Command::Cp(args) => cp::run(args),
        Command::Sessions(args) => sessions::run(args),
        Command::Trace(args) => inspect::run_trace(args),
        Command::Doctor(args) => inspect::run_doctor(args),
        Command::Ping(args) => ping::run(args),
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
fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBE_HARNESS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => lines.json().with_current_span(true).init(),
    }
}
