//! PostgreSQL store: several server replicas share one database.
//!
//! Gapless sequences under concurrency come from a per-run counter row (`kh_session_log_runs`)
//! locked `FOR UPDATE` and advanced in the same transaction as the inserts; unique constraints on
//! (run, sequence) and (run, key) back that up. Group commit: one task per process collects the
//! appends that queue while the previous transaction commits and writes them in one transaction.
//! Runs are locked in sorted order so concurrent batches from several replicas cannot deadlock.
//!
//! Quotas: each run row counts the bytes of its events (`bytes`, the length of their stored
//! JSON, at least `MIN_EVENT_BYTES` each); a batch sums the rows of its runs' namespaces and refuses an append past its session's
//! or namespace's quota. With several replicas, batches that touch different runs of one session
//! at the same moment may together overshoot it by what they add (they lock only their own runs).
//! Reads stop at the page's byte bound inside the query, so a page of big events is never
//! fetched whole.

use super::index::same_or_conflict;
use super::quota::{charge, namespace_of, Quotas, Usage, MIN_EVENT_BYTES};
use super::types::{AppendOutcome, StoreError};
use crate::model::{PreparedEvent, RunId, StoredEvent};
use anyhow::Context;
use deadpool_postgres::Pool;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::{BTreeMap, HashMap};
use tokio::sync::{mpsc, oneshot};

const MAX_BATCH: usize = 1024;
const POOL_SIZE: usize = 8;

const _: () = assert!(
    MIN_EVENT_BYTES == 1024,
    "migration 2 charges events at least 1024 bytes"
);

/// Versioned schema changes, applied in order at start under an advisory lock.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE kh_session_log_runs (
         run_id text PRIMARY KEY,
         last_sequence bigint NOT NULL CHECK (last_sequence >= 0)
     );
     CREATE TABLE kh_session_log_events (
         run_id text NOT NULL REFERENCES kh_session_log_runs (run_id),
         sequence bigint NOT NULL CHECK (sequence >= 1),
         idempotency_key text NOT NULL,
         digest text NOT NULL,
         event json NOT NULL,
         PRIMARY KEY (run_id, sequence),
         UNIQUE (run_id, idempotency_key)
     );",
    ),
    (
        2,
        "ALTER TABLE kh_session_log_runs ADD COLUMN bytes bigint NOT NULL DEFAULT 0;
     UPDATE kh_session_log_runs r SET bytes = coalesce(
         (SELECT sum(greatest(octet_length(e.event::text), 1024)) FROM kh_session_log_events e WHERE e.run_id = r.run_id), 0);
     CREATE INDEX kh_session_log_runs_namespace ON kh_session_log_runs (split_part(run_id, ':', 1));",
    ),
];

struct Job {
    run: RunId,
    event: PreparedEvent,
    reply: oneshot::Sender<Result<AppendOutcome, StoreError>>,
}

pub struct PostgresStore {
    pool: Pool,
    tx: mpsc::Sender<Job>,
}

/// One page: events whose running total of stored bytes stays within `$4` (the first always),
/// at most `$3` candidates; a candidate past the bound comes back as NULL (there is more) without
/// its event being sent.
const READ_PAGE: &str = "SELECT CASE WHEN upto <= $4 OR n = 1 THEN event END FROM (
     SELECT sequence, event,
            row_number() OVER w AS n,
            sum(octet_length(event::text)) OVER w AS upto
     FROM kh_session_log_events WHERE run_id = $1 AND sequence > $2
     WINDOW w AS (ORDER BY sequence ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
     ORDER BY sequence LIMIT $3
 ) page ORDER BY sequence";

impl PostgresStore {
    /// Connects, applies migrations and starts the group-commit task.
    pub async fn connect(
        url: &str,
        batch_sizes: Histogram,
        quotas: Quotas,
    ) -> anyhow::Result<Self> {
        let pool = kube_harness_service_kit::postgres::pool(url, POOL_SIZE)?;
        migrate(&pool).await?;
        tracing::info!("PostgreSQL store ready (migrations applied)");
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(group_commit(pool.clone(), rx, batch_sizes, quotas));
        Ok(Self { pool, tx })
    }

    pub async fn append(
        &self,
        run: &RunId,
        event: PreparedEvent,
    ) -> Result<AppendOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Job {
                run: run.clone(),
                event,
                reply,
            })
            .await
            .map_err(|_| StoreError::Unavailable("PostgreSQL commit task stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Internal("PostgreSQL commit task dropped an append".into()))?
    }

    pub async fn read(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
        max_bytes: u64,
    ) -> Result<(Vec<StoredEvent>, bool), StoreError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let rows = client
            .query(
                READ_PAGE,
                &[
                    &run.as_str(),
                    &(after as i64),
                    &(limit as i64 + 1),
                    &(max_bytes as i64),
                ],
            )
            .await
            .map_err(unavailable)?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(value) = row.get::<_, Option<serde_json::Value>>(0) else {
                break;
            };
            let event: StoredEvent =
                serde_json::from_value(value).map_err(|e| StoreError::RunCorrupt {
                    run: run.to_string(),
                    reason: format!("a stored row does not hold an event: {e}"),
                })?;
            events.push(event);
        }
        let more = rows.len() > events.len().min(limit);
        events.truncate(limit);
        Ok((events, more))
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("PostgreSQL: {e}"))
}

async fn migrate(pool: &Pool) -> anyhow::Result<()> {
    let mut client = pool.get().await.context("cannot connect to PostgreSQL")?;
    let tx = client.transaction().await?;
    // Replicas starting together take turns.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('kh_session_log_migrations'))",
        &[],
    )
    .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS kh_session_log_migrations (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let applied: Vec<i32> = tx
        .query("SELECT version FROM kh_session_log_migrations", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (version, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .with_context(|| format!("migration {version} failed"))?;
        tx.execute(
            "INSERT INTO kh_session_log_migrations (version) VALUES ($1)",
            &[version],
        )
        .await?;
        tracing::info!(version, "applied session log migration");
    }
    tx.commit().await.context("cannot commit migrations")?;
    Ok(())
}

async fn group_commit(
    pool: Pool,
    mut rx: mpsc::Receiver<Job>,
    batch_sizes: Histogram,
    quotas: Quotas,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        batch_sizes.observe(batch.len() as f64);
        match commit_batch(&pool, &batch, &quotas).await {
            Ok(results) => {
                for (job, result) in batch.into_iter().zip(results) {
                    let _ = job.reply.send(result);
                }
            }
            Err(e) => {
                // Nothing of this transaction is committed (or, if the connection died during
                // COMMIT, the outcome is unknown): callers retry with the same keys, which
                // returns the original events if it did commit.
                let err = unavailable(e);
                for job in batch {
                    let _ = job.reply.send(Err(err.clone()));
                }
            }
        }
    }
}

type Outcome = Result<AppendOutcome, StoreError>;

/// Column arrays for one multi-row INSERT via `unnest`.
#[derive(Default)]
struct Columns<'a> {
    runs: Vec<&'a str>,
    sequences: Vec<i64>,
    keys: Vec<&'a str>,
    digests: Vec<&'a str>,
    events: Vec<&'a str>,
}

/// Writes one batch in one transaction; per-job outcomes (conflicts are per job, not failures).
async fn commit_batch(
    pool: &Pool,
    batch: &[Job],
    quotas: &Quotas,
) -> Result<Vec<Outcome>, tokio_postgres::Error> {
    let mut client = match pool.get().await {
        Ok(c) => c,
        Err(deadpool_postgres::PoolError::Backend(e)) => return Err(e),
        Err(e) => {
            let err = unavailable(e);
            return Ok(batch.iter().map(|_| Err(err.clone())).collect());
        }
    };
    let tx = client.transaction().await?;
    let mut runs: Vec<&str> = batch.iter().map(|j| j.run.as_str()).collect();
    runs.sort_unstable();
    runs.dedup();
    tx.execute(
        "INSERT INTO kh_session_log_runs (run_id, last_sequence)
         SELECT r, 0 FROM unnest($1::text[]) AS r ORDER BY r
         ON CONFLICT (run_id) DO NOTHING",
        &[&runs],
    )
    .await?;
    let mut last: HashMap<String, i64> = tx
        .query(
            "SELECT run_id, last_sequence FROM kh_session_log_runs WHERE run_id = ANY($1) ORDER BY run_id FOR UPDATE",
            &[&runs],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut namespaces: Vec<&str> = runs.iter().map(|r| namespace_of(r)).collect();
    namespaces.dedup();
    let mut usage = Usage::default();
    for row in tx
        .query(
            "SELECT run_id, bytes FROM kh_session_log_runs WHERE split_part(run_id, ':', 1) = ANY($1)",
            &[&namespaces],
        )
        .await?
    {
        usage.add_charged(row.get(0), row.get::<_, i64>(1).max(0) as u64);
    }
    let mut pending = Usage::default();
    let mut added: HashMap<String, i64> = HashMap::new();
    let (key_runs, keys): (Vec<&str>, Vec<&str>) = batch
        .iter()
        .map(|j| (j.run.as_str(), j.event.key.as_str()))
        .unzip();
    let mut existing: HashMap<(String, String), StoredEvent> = HashMap::new();
    for row in tx
        .query(
            "SELECT e.run_id, e.idempotency_key, e.event FROM kh_session_log_events e
             JOIN unnest($1::text[], $2::text[]) AS k(run_id, key)
               ON e.run_id = k.run_id AND e.idempotency_key = k.key",
            &[&key_runs, &keys],
        )
        .await?
    {
        let value: serde_json::Value = row.get(2);
        if let Ok(event) = serde_json::from_value::<StoredEvent>(value) {
            existing.insert((row.get(0), row.get(1)), event);
        }
    }
    let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(batch.len());
    let mut planned: BTreeMap<usize, (StoredEvent, String)> = BTreeMap::new();
    let mut planned_keys: HashMap<(String, String), usize> = HashMap::new();
    for (i, job) in batch.iter().enumerate() {
        let k = (job.run.as_str().to_string(), job.event.key.clone());
        let earlier = existing
            .get(&k)
            .or_else(|| planned_keys.get(&k).map(|j| &planned[j].0));
        if let Some(stored) = earlier {
            outcomes.push(Some(
                same_or_conflict(&job.run, stored.sequence, &stored.digest, &job.event).map(|()| {
                    AppendOutcome {
                        event: stored.clone(),
                        created: false,
                    }
                }),
            ));
            continue;
        }
        let seq = last.get(&k.0).copied().unwrap_or(0) + 1;
        let stored = job.event.to_stored(&job.run, seq as u64);
        let json = serde_json::to_string(&stored).unwrap_or_default();
        let bytes = json.len() as u64;
        if let Err(e) = usage.admit(&pending, quotas, job.run.as_str(), bytes) {
            outcomes.push(Some(Err(e)));
            continue;
        }
        pending.add(job.run.as_str(), bytes);
        *added.entry(k.0.clone()).or_default() += charge(bytes) as i64;
        last.insert(k.0.clone(), seq);
        planned_keys.insert(k, i);
        planned.insert(i, (stored, json));
        outcomes.push(None);
    }
    if !planned.is_empty() {
        let mut rows = Columns::default();
        for (event, json) in planned.values() {
            rows.runs.push(&event.run_id);
            rows.sequences.push(event.sequence as i64);
            rows.keys.push(&event.append_idempotency_key);
            rows.digests.push(&event.digest);
            rows.events.push(json);
        }
        tx.execute(
            "INSERT INTO kh_session_log_events (run_id, sequence, idempotency_key, digest, event)
             SELECT r, s, k, d, e::json FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[]) AS t(r, s, k, d, e)",
            &[&rows.runs, &rows.sequences, &rows.keys, &rows.digests, &rows.events],
        )
        .await?;
        let mut updates = (Vec::new(), Vec::new(), Vec::new());
        for (run, bytes) in &added {
            updates.0.push(run.as_str());
            updates.1.push(last[run]);
            updates.2.push(*bytes);
        }
        tx.execute(
            "UPDATE kh_session_log_runs AS r SET last_sequence = u.last, bytes = r.bytes + u.added
             FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(run_id, last, added)
             WHERE r.run_id = u.run_id AND r.last_sequence < u.last",
            &[&updates.0, &updates.1, &updates.2],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(outcomes
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            o.unwrap_or_else(|| {
                Ok(AppendOutcome {
                    event: planned[&i].0.clone(),
                    created: true,
                })
            })
        })
        .collect())
}
