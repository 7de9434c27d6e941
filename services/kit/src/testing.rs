//! Test support: a fresh PostgreSQL database per test, on the real server that
//! `tests/services/postgres.sh start` runs (feature `postgres-testing`).
//!
//! PostgreSQL tests must not pass by silently skipping: when `KH_TEST_POSTGRES_URL` is unset,
//! [`fresh_database`] panics with instructions, unless `KH_SKIP_POSTGRES=1` asks explicitly for a
//! (loudly printed) skip.

use tokio_postgres::NoTls;

/// The environment variable holding the admin URL of the test server.
pub const POSTGRES_URL_ENV: &str = "KH_TEST_POSTGRES_URL";
/// Set to `1` to skip PostgreSQL tests on purpose.
pub const SKIP_POSTGRES_ENV: &str = "KH_SKIP_POSTGRES";

/// A database created for one test; nobody else uses it, so tests can run in parallel.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    /// Connection URL of this database.
    pub url: String,
    /// Its name.
    pub name: String,
    admin_url: String,
}

/// Returns the admin URL of the test server, `None` when the caller asked to skip (after printing
/// a loud line saying so), and panics with instructions when nothing is configured.
pub fn postgres_admin_url(test: &str) -> Option<String> {
    match std::env::var(POSTGRES_URL_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var(SKIP_POSTGRES_ENV).as_deref() == Ok("1") => {
            eprintln!(
                "!!! SKIPPED PostgreSQL test {test}: {SKIP_POSTGRES_ENV}=1 is set. This test did NOT run. !!!"
            );
            None
        }
        _ => panic!(
            "PostgreSQL test {test} needs a real server: run `bash tests/services/postgres.sh start` \
             and export the KH_TEST_POSTGRES_URL=... line it prints (or set {SKIP_POSTGRES_ENV}=1 \
             to skip PostgreSQL tests explicitly)"
        ),
    }
}

/// Creates a new, empty database named after `test` plus a random suffix.
pub async fn fresh_database(test: &str) -> Option<TestDatabase> {
    let admin_url = postgres_admin_url(test)?;
    let slug: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(30)
        .collect();
    let name = format!(
        "kh_{slug}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let client = connect(&admin_url).await;
    client
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name} failed: {e}"));
    Some(TestDatabase {
        url: with_database(&admin_url, &name),
        name,
        admin_url,
    })
}

impl TestDatabase {
    /// Drops the database, closing any connection still open to it.
    pub async fn drop_database(self) {
        let client = connect(&self.admin_url).await;
        if let Err(e) = client
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            ))
            .await
        {
            eprintln!("warning: could not drop test database {}: {e}", self.name);
        }
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!("cannot connect to {POSTGRES_URL_ENV}: {e} (is tests/services/postgres.sh start running?)")
        });
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Replaces the database name in a `postgres://user@host:port/db?params` URL.
pub fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (before_query, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let authority = before_query.split('/').next().unwrap_or(before_query);
    let mut out = format!("{scheme}://{authority}/{database}");
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn replaces_the_database_name() {
        assert_eq!(
            with_database("postgres://p@127.0.0.1:55432/kh_test", "x"),
            "postgres://p@127.0.0.1:55432/x"
        );
        assert_eq!(
            with_database("postgres://p@h:1?sslmode=disable", "x"),
            "postgres://p@h:1/x?sslmode=disable"
        );
    }
}
