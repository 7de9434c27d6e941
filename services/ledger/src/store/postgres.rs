//! PostgreSQL backend: one row per document in `<schema>.documents`, for several processes and
//! hosts. `with_lock` takes a transaction-scoped advisory lock and runs the lock body on that same
//! transaction, so the body's writes commit together with the lock's release, and a holder whose
//! connection dies (SIGKILL, network loss) rolls back and releases the lock server-side.

use super::{
    child_name, encode_document, prefix_range, DurableJsonStore, LockBody, LockedStore, StoreError,
};
use crate::key::Key;
use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Connection settings beyond the URL.
#[derive(Debug, Clone)]
pub struct PostgresStoreOptions {
    /// Schema holding the `documents` table; distinct schemas isolate stores on one server.
    pub schema: String,
    /// Largest number of pooled connections. Each held lock occupies one for its duration.
    pub max_connections: usize,
}

impl Default for PostgresStoreOptions {
    fn default() -> Self {
        PostgresStoreOptions {
            schema: "kube_harness_ledger".into(),
            max_connections: 16,
        }
    }
}

#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    sql: Arc<Sql>,
}

/// Statements with the (validated) schema name baked in.
struct Sql {
    schema: String,
    read: String,
    write: String,
    remove: String,
    list_all: String,
    list_range: String,
}

impl Sql {
    fn new(schema: &str) -> Sql {
        let t = format!("\"{schema}\".documents");
        Sql {
            schema: schema.to_string(),
            read: format!("SELECT value FROM {t} WHERE key = $1"),
            write: format!(
                "INSERT INTO {t} (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
            ),
            remove: format!("DELETE FROM {t} WHERE key = $1"),
            list_all: format!("SELECT key FROM {t}"),
            list_range: format!("SELECT key FROM {t} WHERE key >= $1 AND key < $2"),
        }
    }
}

fn db_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Database(e.to_string())
}

/// Schema names are interpolated into SQL, so only plain lower-case identifiers are accepted.
fn validate_schema(schema: &str) -> Result<(), StoreError> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Database(format!(
            "invalid schema name {schema:?}: use [a-z_][a-z0-9_]{{0,62}}"
        )))
    }
}

impl PostgresStore {
    /// Connects and creates the schema and table if missing (safe to race from many processes).
    pub async fn connect(url: &str, options: PostgresStoreOptions) -> Result<Self, StoreError> {
        validate_schema(&options.schema)?;
        let pool = kube_harness_service_kit::postgres::pool(url, options.max_connections)
            .map_err(db_err)?;
        let store = PostgresStore {
            pool,
            sql: Arc::new(Sql::new(&options.schema)),
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut conn = self.pool.get().await.map_err(db_err)?;
        let tx = conn.transaction().await.map_err(db_err)?;
        // Concurrent CREATE ... IF NOT EXISTS can still collide on the catalog; serialise it.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('kube-harness-ledger-migrate', 0))",
            &[],
        )
        .await
        .map_err(db_err)?;
        let schema = &self.sql.schema;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
             CREATE TABLE IF NOT EXISTS \"{schema}\".documents (
                 key text COLLATE \"C\" PRIMARY KEY,
                 value jsonb NOT NULL,
                 updated_at timestamptz NOT NULL DEFAULT now()
             );"
        ))
        .await
        .map_err(db_err)?;
        tx.commit().await.map_err(db_err)
    }

    /// Drops the schema and everything in it; for tests that made a throwaway schema.
    pub async fn drop_schema(&self) -> Result<(), StoreError> {
        let conn = self.pool.get().await.map_err(db_err)?;
        conn.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.sql.schema
        ))
        .await
        .map_err(db_err)
    }
}

async fn read_on(conn: &Object, sql: &Sql, key: &Key) -> Result<Option<Value>, StoreError> {
    let stmt = conn.prepare_cached(&sql.read).await.map_err(db_err)?;
    let row = conn
        .query_opt(&stmt, &[&key.as_str()])
        .await
        .map_err(db_err)?;
    Ok(row.map(|r| r.get::<_, Value>(0)))
}

async fn write_on(conn: &Object, sql: &Sql, key: &Key, value: &Value) -> Result<(), StoreError> {
    encode_document(key, value)?;
    let stmt = conn.prepare_cached(&sql.write).await.map_err(db_err)?;
    conn.execute(&stmt, &[&key.as_str(), value])
        .await
        .map_err(db_err)?;
    Ok(())
}

async fn remove_on(conn: &Object, sql: &Sql, key: &Key) -> Result<bool, StoreError> {
    let stmt = conn.prepare_cached(&sql.remove).await.map_err(db_err)?;
    Ok(conn
        .execute(&stmt, &[&key.as_str()])
        .await
        .map_err(db_err)?
        > 0)
}

async fn list_on(
    conn: &Object,
    sql: &Sql,
    prefix: Option<&Key>,
) -> Result<Vec<String>, StoreError> {
    let (lower, upper) = prefix_range(prefix);
    let rows = match &upper {
        Some(upper) => {
            let stmt = conn.prepare_cached(&sql.list_range).await.map_err(db_err)?;
            conn.query(&stmt, &[&lower, upper]).await.map_err(db_err)?
        }
        None => {
            let stmt = conn.prepare_cached(&sql.list_all).await.map_err(db_err)?;
            conn.query(&stmt, &[]).await.map_err(db_err)?
        }
    };
    let mut names = BTreeSet::new();
    for row in rows {
        let key: String = row.get(0);
        if let Some(name) = child_name(&key, &lower) {
            names.insert(name.to_string());
        }
    }
    Ok(names.into_iter().collect())
}

async fn advisory_lock(conn: &Object, sql: &Sql, key: &Key) -> Result<(), StoreError> {
    let name = format!("{}:{}", sql.schema, key.as_str());
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&name],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

#[async_trait]
impl DurableJsonStore for PostgresStore {
    async fn read_json(&self, key: &Key) -> Result<Option<Value>, StoreError> {
        let conn = self.pool.get().await.map_err(db_err)?;
        read_on(&conn, &self.sql, key).await
    }

    async fn write_json(&self, key: &Key, value: &Value) -> Result<(), StoreError> {
        let conn = self.pool.get().await.map_err(db_err)?;
        write_on(&conn, &self.sql, key, value).await
    }

    async fn remove(&self, key: &Key) -> Result<bool, StoreError> {
        let conn = self.pool.get().await.map_err(db_err)?;
        remove_on(&conn, &self.sql, key).await
    }

    async fn list_dir(&self, prefix: Option<&Key>) -> Result<Vec<String>, StoreError> {
        let conn = self.pool.get().await.map_err(db_err)?;
        list_on(&conn, &self.sql, prefix).await
    }

    async fn with_lock(&self, key: &Key, body: LockBody<'_>) -> Result<(), StoreError> {
        let conn = self.pool.get().await.map_err(db_err)?;
        let guard = TxGuard(Some(conn));
        let conn = guard.conn();
        conn.batch_execute("BEGIN").await.map_err(db_err)?;
        advisory_lock(conn, &self.sql, key).await?;
        let shared = Arc::new(TxShared {
            conn: Mutex::new(Some(guard)),
            sql: self.sql.clone(),
        });
        let result = body(Arc::new(TxView {
            inner: shared.clone(),
        }) as LockedStore)
        .await;
        let Some(guard) = shared.conn.lock().await.take() else {
            return Err(StoreError::Database("lock transaction vanished".into()));
        };
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        guard.conn().batch_execute(end).await.map_err(db_err)?;
        guard.finish();
        result
    }
}

/// Owns a pooled connection inside a transaction. If dropped before `finish` (the lock body's
/// future was cancelled), the connection is detached from the pool and closed, so the server rolls
/// back and releases the lock instead of a pooled connection staying mid-transaction.
struct TxGuard(Option<Object>);

impl TxGuard {
    fn conn(&self) -> &Object {
        self.0.as_ref().expect("connection present until finish")
    }
    fn finish(mut self) {
        self.0.take();
    }
}

impl Drop for TxGuard {
    fn drop(&mut self) {
        if let Some(obj) = self.0.take() {
            drop(Object::take(obj));
        }
    }
}

/// The store as seen inside a lock body: every operation runs on the locking transaction.
#[derive(Clone)]
struct TxView {
    inner: Arc<TxShared>,
}

struct TxShared {
    conn: Mutex<Option<TxGuard>>,
    sql: Arc<Sql>,
}

impl TxView {
    /// The transaction's connection; fails once the lock has been released (a body that leaked
    /// its view and used it later).
    async fn tx(&self) -> Result<tokio::sync::MutexGuard<'_, Option<TxGuard>>, StoreError> {
        let guard = self.inner.conn.lock().await;
        if guard.is_none() {
            return Err(StoreError::Database("lock already released".into()));
        }
        Ok(guard)
    }
}

#[async_trait]
impl DurableJsonStore for TxView {
    async fn read_json(&self, key: &Key) -> Result<Option<Value>, StoreError> {
        let g = self.tx().await?;
        read_on(g.as_ref().expect("checked").conn(), &self.inner.sql, key).await
    }

    async fn write_json(&self, key: &Key, value: &Value) -> Result<(), StoreError> {
        let g = self.tx().await?;
        write_on(
            g.as_ref().expect("checked").conn(),
            &self.inner.sql,
            key,
            value,
        )
        .await
    }

    async fn remove(&self, key: &Key) -> Result<bool, StoreError> {
        let g = self.tx().await?;
        remove_on(g.as_ref().expect("checked").conn(), &self.inner.sql, key).await
    }

    async fn list_dir(&self, prefix: Option<&Key>) -> Result<Vec<String>, StoreError> {
        let g = self.tx().await?;
        list_on(g.as_ref().expect("checked").conn(), &self.inner.sql, prefix).await
    }

    /// A nested lock joins the surrounding transaction: advisory xact locks are released when the
    /// outermost lock commits or rolls back.
    async fn with_lock(&self, key: &Key, body: LockBody<'_>) -> Result<(), StoreError> {
        {
            let g = self.tx().await?;
            advisory_lock(g.as_ref().expect("checked").conn(), &self.inner.sql, key).await?;
        }
        body(Arc::new(self.clone())).await
    }
}
