//! `kube-harness commit [-n NS] SESSION --dir NAME --turn T`: write the version of a Persistent
//! Dir that turn T left (a `manual` dir's, or an `after-turn` dir's that lost a conflict) to its
//! source, through the session's worker API (docs/operator.md "Persistent Dirs").

use crate::reach::SessionArgs;
use anyhow::Context;
use clap::Args;
use kube_harness_worker::protocol::client::WorkerClientError;
use kube_harness_worker::protocol::worker_api::CommitRequest;
use std::process::ExitCode;

#[derive(Args)]
pub struct CommitArgs {
    #[command(flatten)]
    target: SessionArgs,
    /// The Persistent Dir's name (`/persistent/<dir>`).
    #[arg(long)]
    dir: String,
    /// The turn whose version to commit (`turnId` of the end-turn answer).
    #[arg(long)]
    turn: String,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CommitArgs) -> anyhow::Result<ExitCode> {
    tokio::runtime::Runtime::new()?.block_on(async move {
        let connected = args.target.connect().await?;
        let committed = match connected
            .worker
            .commit_persistent(&CommitRequest {
                dir: args.dir.clone(),
                turn_id: args.turn.clone(),
            })
            .await
        {
            Ok(committed) => committed,
            // Refused by the worker (no such dir or kept version): its message, exit 1.
            Err(WorkerClientError::Api { message, .. }) => {
                eprintln!("kube-harness commit: {message}");
                return Ok(ExitCode::from(1));
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "committing /persistent/{} of turn {} in session {}",
                        args.dir, args.turn, args.target.session
                    )
                })
            }
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&committed)?);
        } else {
            println!(
                "/persistent/{} of turn {} committed",
                committed.dir, committed.turn_id
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}
