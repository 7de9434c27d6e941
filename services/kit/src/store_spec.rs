//! `--store memory|file:PATH|postgres:URL`, parsed the same way by every service.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a service keeps its data.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// In process memory: lost when the process exits (development only).
    Memory,
    /// A local file or directory (the service documents which).
    File(PathBuf),
    /// A PostgreSQL connection URL (`postgres://...` or `postgresql://...`).
    Postgres(String),
}

impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for StoreSpec {
    /// Prints the spec with any password in the URL masked, so it is safe to log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::File(p) => write!(f, "file:{}", p.display()),
            StoreSpec::Postgres(url) => write!(f, "postgres:{}", redact_password(url)),
        }
    }
}

fn redact_password(url: &str) -> String {
    // postgres://user:password@host/...: mask what lies between the first ':' after the scheme
    // and the '@'.
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// Why a `--store` value was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid store spec {spec:?}: {reason} (expected memory, file:PATH or postgres:URL)")]
pub struct StoreSpecError {
    spec: String,
    reason: &'static str,
}

impl FromStr for StoreSpec {
    type Err = StoreSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| StoreSpecError {
            spec: s.to_string(),
            reason,
        };
        if s == "memory" {
            return Ok(StoreSpec::Memory);
        }
        if let Some(path) = s.strip_prefix("file:") {
            if path.is_empty() {
                return Err(err("empty path"));
            }
            return Ok(StoreSpec::File(PathBuf::from(path)));
        }
        if let Some(url) = s.strip_prefix("postgres:") {
            // Accept both `postgres:postgres://...` and the shorthand `postgres://...`.
            let url = if url.starts_with("//") {
                format!("postgres:{url}")
            } else {
                url.to_string()
            };
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(err("the URL must start with postgres:// or postgresql://"));
            }
            return Ok(StoreSpec::Postgres(url));
        }
        if s.starts_with("postgresql://") {
            return Ok(StoreSpec::Postgres(s.to_string()));
        }
        Err(err("unknown kind"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind() {
        assert_eq!("memory".parse(), Ok(StoreSpec::Memory));
        assert_eq!(
            "file:/var/lib/x.ndjson".parse(),
            Ok(StoreSpec::File("/var/lib/x.ndjson".into()))
        );
        let url = "postgres://u:p@127.0.0.1:5432/db";
        assert_eq!(
            format!("postgres:{url}").parse(),
            Ok(StoreSpec::Postgres(url.into()))
        );
        assert_eq!(url.parse(), Ok(StoreSpec::Postgres(url.into())));
    }

    #[test]
    fn refuses_bad_specs_clearly() {
        for bad in ["", "file:", "mem", "postgres:mysql://x", "s3://bucket"] {
            let err = bad.parse::<StoreSpec>().unwrap_err().to_string();
            assert!(
                err.contains("expected memory, file:PATH or postgres:URL"),
                "{err}"
            );
        }
    }

    #[test]
    fn display_masks_passwords() {
        let spec: StoreSpec = "postgres://u:hunter2@h/db".parse().unwrap();
        assert_eq!(spec.to_string(), "postgres:postgres://u:***@h/db");
        assert!(!format!("{spec:?}").contains("hunter2"));
    }
}
