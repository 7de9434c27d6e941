//! Bearer-token authentication.
//!
//! The token is read from a file (never from the command line, where `ps` would show it). Tokens are
//! compared as SHA-256 digests with [`subtle`], so neither the content nor the length of the
//! configured token leaks through response timing. A failed check answers 401 with the same body
//! whether the header was missing, malformed or wrong.

use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Who may call the API: either holders of one bearer token, or (explicitly) anyone.
#[derive(Clone)]
pub struct AuthConfig {
    /// SHA-256 of the expected token; `None` only when `--insecure-no-auth` was given.
    expected: Option<Arc<[u8; 32]>>,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token (nor its digest).
        f.debug_struct("AuthConfig")
            .field("enabled", &self.expected.is_some())
            .finish()
    }
}

impl AuthConfig {
    /// Applies the rule every service follows: a token file is required unless the operator
    /// opted out with `--insecure-no-auth`; giving both is a mistake and refused.
    pub fn from_args(token_file: Option<&Path>, insecure_no_auth: bool) -> anyhow::Result<Self> {
        match (token_file, insecure_no_auth) {
            (Some(_), true) => anyhow::bail!(
                "--token-file and --insecure-no-auth contradict each other; give exactly one"
            ),
            (None, false) => anyhow::bail!(
                "no token configured: pass --token-file FILE, or --insecure-no-auth to serve without authentication"
            ),
            (None, true) => {
                tracing::warn!(
                    "AUTHENTICATION DISABLED (--insecure-no-auth): anyone who can reach this port can read and write"
                );
                Ok(Self::insecure())
            }
            (Some(path), false) => Self::from_token_file(path),
        }
    }

    /// Reads the token from `path`; surrounding whitespace (a trailing newline) is ignored.
    pub fn from_token_file(path: &Path) -> anyhow::Result<Self> {
        let raw = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read token file {}: {e}", path.display()))?;
        Self::with_token(raw.trim())
            .map_err(|e| anyhow::anyhow!("token file {}: {e}", path.display()))
    }

    /// A config accepting exactly `token`, which must be non-empty visible ASCII (it travels in
    /// an HTTP header).
    pub fn with_token(token: &str) -> anyhow::Result<Self> {
        if token.is_empty() {
            anyhow::bail!("token is empty");
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            anyhow::bail!("token must be visible ASCII without spaces");
        }
        Ok(Self {
            expected: Some(Arc::new(Sha256::digest(token.as_bytes()).into())),
        })
    }

    /// A config that lets every request through.
    pub fn insecure() -> Self {
        Self { expected: None }
    }

    /// Whether a token is required.
    pub fn enabled(&self) -> bool {
        self.expected.is_some()
    }

    /// SHA-256 of the configured token (`None` without authentication): the key a service may
    /// derive its own credentials from (the session log's scoped tokens), never the token.
    pub fn token_digest(&self) -> Option<&[u8; 32]> {
        self.expected.as_deref()
    }

    /// Checks an `Authorization` header value in constant time.
    pub fn accepts(&self, header: Option<&HeaderValue>) -> bool {
        let Some(expected) = &self.expected else {
            return true;
        };
        let presented = bearer(header).unwrap_or("");
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // An empty presented token hashes to a value that cannot match a non-empty token's digest
        // (short of a SHA-256 collision), so no separate branch is needed.
        bool::from(digest.ct_eq(expected.as_ref()))
    }
}

/// axum middleware: `axum::middleware::from_fn_with_state(auth, require_bearer)`.
pub async fn require_bearer(
    State(auth): State<AuthConfig>,
    request: Request,
    next: Next,
) -> Response {
    if auth.accepts(request.headers().get(AUTHORIZATION)) {
        return next.run(request).await;
    }
    unauthorized()
}

/// The one 401 every failed check answers: the same body whatever was wrong.
pub fn unauthorized() -> Response {
    let mut response = ApiError::unauthorized("missing or invalid bearer token").into_response();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The token of an `Authorization: Bearer …` header, if there is one.
pub fn bearer(header: Option<&HeaderValue>) -> Option<&str> {
    header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requires_a_token_or_explicit_opt_out() {
        let err = AuthConfig::from_args(None, false).unwrap_err().to_string();
        assert!(err.contains("--insecure-no-auth"), "{err}");
        assert!(!AuthConfig::from_args(None, true).unwrap().enabled());
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "s3cret\n").unwrap();
        assert!(AuthConfig::from_args(Some(file.path()), true).is_err());
        let auth = AuthConfig::from_args(Some(file.path()), false).unwrap();
        assert!(auth.accepts(Some(&HeaderValue::from_static("Bearer s3cret"))));
        assert!(!auth.accepts(Some(&HeaderValue::from_static("Bearer s3cre"))));
        assert!(!auth.accepts(Some(&HeaderValue::from_static("Bearer s3cret "))));
        assert!(!auth.accepts(Some(&HeaderValue::from_static("Basic s3cret"))));
        assert!(!auth.accepts(Some(&HeaderValue::from_static("Bearer "))));
        assert!(!auth.accepts(None));
    }

    #[test]
    fn empty_or_unreadable_token_files_are_refused() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), " \n").unwrap();
        assert!(AuthConfig::from_token_file(file.path()).is_err());
        assert!(AuthConfig::from_token_file(Path::new("/nonexistent/token")).is_err());
        assert!(AuthConfig::with_token("two words").is_err());
    }

    #[test]
    fn debug_does_not_print_the_token() {
        let auth = AuthConfig::with_token("s3cret").unwrap();
        assert!(!format!("{auth:?}").contains("s3cret"));
    }
}
