//! `kube-harness exec [-n NS] SESSION [--json] -- SCRIPT`: run one command in a HarnessSession
//! from anywhere the kubeconfig reaches (from a pod, at the session's in-cluster address), and
//! exit with its exit code.

use crate::reach::SessionArgs;
use anyhow::Context;
use clap::Args;
use kube_harness_client::ClientError;
use kube_harness_worker::protocol::worker_api::{
    EndTurnRequest, EndTurnResponse, ExecRequest, ExecStreamLine,
};
use kube_harness_worker::protocol::WorkerClient;
use std::io::Write;
use std::process::ExitCode;

#[derive(Args)]
pub struct ExecArgs {
    #[command(flatten)]
    target: SessionArgs,
    /// Print the whole JSON response (events included) instead of stdout/stderr.
    #[arg(long)]
    json: bool,
    /// Session log run the command belongs to (default: the session's name).
    #[arg(long)]
    run_id: Option<String>,
    /// Step key: the same run and step return the recorded result instead of running again.
    #[arg(long)]
    step_key: Option<String>,
    /// Command time limit in seconds (the worker caps it).
    #[arg(long)]
    timeout: Option<u64>,
    /// End the turn after the command: a Tier-1 sandbox merges its changes back and is released,
    /// and the turn's usage event is written (with `--json`, the turn summary is printed too).
    #[arg(long)]
    end_turn: bool,
    /// The script, as one argument or several joined by spaces.
    #[arg(last = true, required = true)]
    script: Vec<String>,
}

pub fn run(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(exec(args))
}

async fn exec(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let connected = match args.target.connect().await {
        Ok(connected) => connected,
        // Refused by the namespace (a quota): the command cannot run, as a refusal does.
        // Suspended or expired: the session declines commands until its spec changes.
        Err(e)
            if matches!(
                e.downcast_ref(),
                Some(
                    ClientError::Refused { .. }
                        | ClientError::Suspended { .. }
                        | ClientError::Expired { .. }
                )
            ) =>
        {
            eprintln!("kube-harness exec: {e}");
            return Ok(ExitCode::from(126));
        }
        Err(e) => return Err(e),
    };
    let mut request = ExecRequest::new(args.script.join(" "));
    request.run_id = args.run_id.clone();
    request.step_key = args.step_key;
    request.timeout_ms = args.timeout.map(|s| s.saturating_mul(1000));
    // Printed as it comes (unless the whole JSON answer is asked for).
    let mut streamed = Streamed::default();
    let sent = if args.json {
        connected.worker.exec(&request).await
    } else {
        connected
            .worker
            .exec_stream(&request, |line| streamed.print(line))
            .await
    };
    let response = sent.with_context(|| {
        format!(
            "the command's result was lost (the worker pod may have died mid-command); \
             session {} recovers on its own: check `kubectl get hs {}`",
            args.target.session, args.target.session
        )
    })?;
    let ended = if args.end_turn {
        Some(end_turn(&connected.worker, &args.target.session, args.run_id).await?)
    } else {
        None
    };
    if args.json {
        let mut out = serde_json::to_value(&response)?;
        if let Some(ended) = ended {
            out["endTurn"] = serde_json::to_value(ended)?;
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        // What did not stream: a higher tier's output, and the runtime's notes after it.
        std::io::stdout().write_all(rest(&response.outcome.stdout, &streamed.out).as_bytes())?;
        std::io::stderr().write_all(rest(&response.outcome.stderr, &streamed.err).as_bytes())?;
        for (name, file) in [
            ("stdout", &response.stdout_file),
            ("stderr", &response.stderr_file),
        ] {
            if let Some(f) = file {
                let whole = if f.complete {
                    "all of it"
                } else {
                    "its first part"
                };
                eprintln!(
                    "kube-harness: {name} outgrew the result's cap; {whole} ({} bytes) is kept at {} in session {}",
                    f.bytes, f.path, args.target.session
                );
            }
        }
        for problem in &response.output_problems {
            eprintln!("kube-harness: {problem}");
        }
    }
    Ok(ExitCode::from(
        response.outcome.exit_code.clamp(0, 255) as u8
    ))
}

/// How much of each streamed output is remembered to tell what of the result did not stream:
/// more than the result's 1 MiB cap, and a bound on the client's memory however much streams.
const REMEMBERED: usize = 2 << 20;

/// The start of the output printed while the command ran (up to [`REMEMBERED`] bytes).
#[derive(Default)]
struct Streamed {
    out: String,
    err: String,
}

impl Streamed {
    fn print(&mut self, line: &ExecStreamLine) {
        let (text, kept, mut sink): (&str, &mut String, Box<dyn Write>) = match line {
            ExecStreamLine::Stdout { data } => (data, &mut self.out, Box::new(std::io::stdout())),
            ExecStreamLine::Stderr { data } => (data, &mut self.err, Box::new(std::io::stderr())),
            _ => return,
        };
        let _ = sink.write_all(text.as_bytes());
        let _ = sink.flush();
        let mut room = REMEMBERED.saturating_sub(kept.len()).min(text.len());
        while !text.is_char_boundary(room) {
            room -= 1;
        }
        kept.push_str(&text[..room]);
    }
}

/// The part of a result's output not printed yet: what follows the streamed text, or all of it
/// when it is not a continuation (a command retried on Tier-1, which does not stream).
fn rest<'a>(result: &'a str, streamed: &str) -> &'a str {
    if streamed.starts_with(result) {
        // All of it streamed (the result may be cut at its cap where the stream was not).
        return "";
    }
    result.strip_prefix(streamed).unwrap_or(result)
}

/// Ends the session's open turn (no-op when none is open).
async fn end_turn(
    worker: &WorkerClient,
    session: &str,
    run_id: Option<String>,
) -> anyhow::Result<EndTurnResponse> {
    worker
        .end_turn_with(&EndTurnRequest {
            run_id,
            turn_id: None,
        })
        .await
        .with_context(|| format!("ending the turn of session {session}"))
}

/// `kube-harness end-turn [-n NS] SESSION [--json]`: end the open turn (merge a Tier-1 sandbox
/// back, release it, write the usage event) without running a command.
#[derive(Args)]
pub struct EndTurnArgs {
    #[command(flatten)]
    target: SessionArgs,
    /// Print the turn summary as JSON.
    #[arg(long)]
    json: bool,
    /// Session log run the turn's closing events go to (default: the session's name).
    #[arg(long)]
    run_id: Option<String>,
}

pub fn run_end_turn(args: EndTurnArgs) -> anyhow::Result<ExitCode> {
    tokio::runtime::Runtime::new()?.block_on(async move {
        let connected = args.target.connect().await?;
        let ended = end_turn(&connected.worker, &args.target.session, args.run_id).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&ended)?);
        } else {
            match &ended.turn {
                Some(t) => println!(
                    "turn {} ended: {} commands, {} files changed",
                    t.turn_id,
                    t.commands,
                    (t.file_changes.len() as u64).saturating_add(t.file_changes_omitted)
                ),
                None => println!("no turn was open"),
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
