//! `kube-harness trace SESSION` and `kube-harness doctor SESSION`: a cluster session's events,
//! read from its session log through its worker (`GET /v1/log`, scoped to the session: the
//! session's token is all it takes, as for exec), shown as `kube-harness local trace|doctor`
//! show a local session's.

use crate::reach::SessionArgs;
use crate::trace_view;
use anyhow::Context;
use clap::Args;
use kube_harness_worker::protocol::worker_api::MAX_LOG_PAGE;
use kube_harness_worker::protocol::WorkerClient;
use kube_harness_worker::runtime::TraceEvent;
use std::process::ExitCode;

/// Most events read for one trace: a bound on memory for a run that never ends.
pub const MAX_EVENTS: usize = 1_000_000;

/// Which session, which run, and how to reach it.
#[derive(Args)]
pub struct Target {
    #[command(flatten)]
    session: SessionArgs,
    /// The session log run, as `exec --run-id` named it (default: the session's own run).
    #[arg(long)]
    run_id: Option<String>,
}

/// `kube-harness trace [-n NS] SESSION [--run-id R] [--format pretty|json]`.
#[derive(Args)]
pub struct TraceArgs {
    #[command(flatten)]
    target: Target,
    /// `pretty` (one line per event, long runs of file events summarised) or `json` (lines).
    #[arg(long, default_value = "pretty", value_parser = ["pretty", "json"])]
    format: String,
}

/// `kube-harness doctor [-n NS] SESSION [--run-id R]`: exits 1 when a dispose failed.
#[derive(Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    target: Target,
}

pub fn run_trace(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let events = read(&args.target)?;
    trace_view::print(
        &mut std::io::stdout().lock(),
        &events,
        args.format == "json",
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_doctor(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let events = read(&args.target)?;
    Ok(trace_view::doctor(
        &mut std::io::stdout().lock(),
        &args.target.session.session,
        &events,
    )?)
}

fn read(target: &Target) -> anyhow::Result<Vec<TraceEvent>> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let connected = target.session.connect().await?;
        let session = &target.session.session;
        read_run(&connected.worker, session, target.run_id.as_deref()).await
    })
}

/// Every event of the run, page by page, as trace lines of `session`.
pub async fn read_run(
    worker: &WorkerClient,
    session: &str,
    run: Option<&str>,
) -> anyhow::Result<Vec<TraceEvent>> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = worker
            .log_page(run, after, MAX_LOG_PAGE)
            .await
            .with_context(|| format!("reading the session log of {session}"))?;
        events.extend(page.events.iter().map(|e| e.trace_event(session)));
        if events.len() > MAX_EVENTS {
            anyhow::bail!("the run has more than {MAX_EVENTS} events; read it in parts with the session log's own API");
        }
        match page.next {
            // A server that answers the same position again would loop forever.
            Some(next) if next > after => after = next,
            Some(next) => anyhow::bail!("the worker's log pages went back ({next} after {after})"),
            None => return Ok(events),
        }
    }
}
