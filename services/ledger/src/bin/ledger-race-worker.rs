//! Test helper for the multi-process race tests (`tests/suite/races.rs`): one OS process that claims
//! tasks, wakeups or queue messages from a shared file or PostgreSQL store and reports every claim
//! and completion as a JSON line on stdout. `--stall-after-claim` makes it claim one item and then
//! hang (to be killed with SIGKILL); `--hold-lock KEY` takes a store lock and hangs.

use clap::{Parser, ValueEnum};
use kube_harness_ledger::cli::open_store;
use kube_harness_ledger::ledger::{
    create_durable_orchestration_services, LedgerError, OrchestrationServices,
};
use kube_harness_ledger::store::locked;
use kube_harness_ledger::{Key, StoreError};
use kube_harness_service_kit::StoreSpec;
use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    Tasks,
    Wakeups,
    Queue,
}

#[derive(Parser)]
struct Args {
    #[arg(long)]
    store: StoreSpec,
    #[arg(long, default_value = "kube_harness_ledger")]
    pg_schema: String,
    #[arg(long, default_value = "ledgers")]
    root: String,
    #[arg(long, value_enum, default_value = "tasks")]
    kind: Kind,
    #[arg(long)]
    owner: String,
    #[arg(long, default_value_t = 2000)]
    lease_ms: u64,
    /// Simulated work between claim and completion.
    #[arg(long, default_value_t = 2)]
    work_ms: u64,
    #[arg(long)]
    stall_after_claim: bool,
    /// Hold the store lock on this key forever (after printing `locked`).
    #[arg(long)]
    hold_lock: Option<String>,
    /// Overwrite the document at this key in a loop (numbered, 256 KiB each) until killed.
    #[arg(long)]
    write_loop: Option<String>,
    /// Give up after this long.
    #[arg(long, default_value_t = 40)]
    deadline_s: u64,
}

fn emit(line: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// One claim: (item id, token, expires_at).
async fn claim(
    l: &OrchestrationServices,
    args: &Args,
) -> Result<Option<(String, String, u64)>, LedgerError> {
    Ok(match args.kind {
        Kind::Tasks => l.tasks.claim(&args.owner, args.lease_ms).await?.map(|t| {
            let lease = t.lease.expect("claimed task has a lease");
            (t.id, lease.token, lease.expires_at)
        }),
        Kind::Wakeups => l
            .wakeups
            .claim_due(&args.owner, args.lease_ms)
            .await?
            .map(|w| {
                let lease = w.lease.expect("claimed wakeup has a lease");
                (w.id, lease.token, lease.expires_at)
            }),
        Kind::Queue => l
            .queues
            .dequeue("race", &args.owner, args.lease_ms)
            .await?
            .map(|m| {
                (
                    m.id,
                    m.receipt.expect("delivery has a receipt"),
                    m.visible_at,
                )
            }),
    })
}

async fn complete(
    l: &OrchestrationServices,
    args: &Args,
    id: &str,
    token: &str,
) -> Result<(), LedgerError> {
    match args.kind {
        Kind::Tasks => l
            .tasks
            .complete(id, token, json!({"by": args.owner}))
            .await
            .map(|_| ()),
        Kind::Wakeups => l.wakeups.complete(id, token).await.map(|_| ()),
        Kind::Queue => l.queues.ack("race", id, token).await,
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let store = open_store(&args.store, &args.pg_schema).await?;
    if let Some(key) = &args.hold_lock {
        let key = Key::new(key)?;
        locked::<(), StoreError, _, _>(store.as_ref(), &key, |_| async {
            emit(json!({"event": "locked"}));
            std::future::pending::<()>().await;
            Ok(())
        })
        .await?;
        return Ok(());
    }
    if let Some(key) = &args.write_loop {
        let key = Key::new(key)?;
        let pad = "x".repeat(256 * 1024);
        for n in 0u64.. {
            store.write_json(&key, &json!({"n": n, "pad": pad})).await?;
            if n == 0 {
                emit(json!({"event": "writing"}));
            }
        }
    }
    let ledgers = create_durable_orchestration_services(&args.root, store)?;
    let deadline = Instant::now() + Duration::from_secs(args.deadline_s);
    let mut idle_since: Option<Instant> = None;
    while Instant::now() < deadline {
        match claim(&ledgers, &args).await? {
            Some((id, token, expires_at)) => {
                idle_since = None;
                emit(
                    json!({"event": "claimed", "item": id, "token": token, "owner": args.owner,
                            "expires_at": expires_at, "lease_ms": args.lease_ms}),
                );
                if args.stall_after_claim {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_millis(args.work_ms)).await;
                let outcome = match complete(&ledgers, &args, &id, &token).await {
                    Ok(()) => "ok".to_string(),
                    Err(e) => e.code().to_string(),
                };
                emit(
                    json!({"event": "completed", "item": id, "token": token, "owner": args.owner, "outcome": outcome}),
                );
            }
            None => {
                // Nothing claimable now. Stop after a quiet spell longer than a lease: anything held
                // by a process that died before this one went quiet has come back by then.
                let quiet = *idle_since.get_or_insert_with(Instant::now);
                if quiet.elapsed() > Duration::from_millis(args.lease_ms + 500) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    emit(json!({"event": "exit", "owner": args.owner}));
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ledger-race-worker: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
