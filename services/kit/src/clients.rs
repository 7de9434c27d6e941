//! Bounds per client, so that one client's flood cannot take another's share of a shared service
//! (issue 30: one tenant's pod held the session log with 1,100 dripping appends, and every other
//! tenant's exec failed).
//!
//! Two identities, two bounds:
//!
//! - **source address** (what the server sees before any byte): the connections one address may
//!   hold, [`crate::ConnectionLimits::max_connections_per_source`], enforced by
//!   [`crate::serve_with`] at accept;
//! - **bearer identity** (what a service can tell once it has checked the request's head, e.g.
//!   the session log's token scope `NAMESPACE:UID`): the requests one identity may have in
//!   flight, [`crate::ConnectionLimits::max_requests_per_client`]. The server stamps one
//!   [`RequestsPerClient`] on every request; the service's auth middleware calls [`admit`] with
//!   the identity it has verified, before any body byte is read. Past the bound: 429 with
//!   `Retry-After`, nothing done.

use crate::error::ApiError;
use axum::extract::Request;
use axum::http::header::RETRY_AFTER;
use axum::http::{Extensions, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Default [`crate::ConnectionLimits::max_requests_per_client`].
pub const DEFAULT_MAX_REQUESTS_PER_CLIENT: usize = 32;

/// Seconds a refused client is told to wait (`Retry-After`): a request in flight of a
/// well-behaved client finishes well within it.
pub const RETRY_AFTER_SECS: u64 = 1;

/// The connections one source address may hold when no share is configured: an eighth of the
/// connection limit, but never fewer than the limit itself up to 64 (a small server, as in
/// tests, is not split up).
pub fn default_share(max_connections: usize) -> usize {
    (max_connections / 8).max(max_connections.min(64)).max(1)
}

/// Requests in flight per client identity, shared by every request of one server.
#[derive(Clone, Debug)]
pub struct RequestsPerClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: usize,
    /// Identity → requests in flight; an identity leaves the map with its last request, so the
    /// map holds at most one entry per request in flight.
    counts: Mutex<HashMap<String, usize>>,
}

impl RequestsPerClient {
    /// At most `limit` requests in flight per identity (at least 1).
    pub fn new(limit: usize) -> Self {
        RequestsPerClient {
            inner: Arc::new(Inner {
                limit: limit.max(1),
                counts: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The limiter the server stamped on a request, if it was served by [`crate::serve_with`].
    pub fn of(extensions: &Extensions) -> Option<RequestsPerClient> {
        extensions.get::<RequestsPerClient>().cloned()
    }

    /// A place for one more request of `client`, or the refusal to answer (a 429).
    pub fn admit(&self, client: &str) -> Result<ClientPermit, TooMany> {
        let mut counts = self
            .inner
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(client.to_string()).or_insert(0);
        if *count >= self.inner.limit {
            let limit = self.inner.limit;
            drop(counts);
            tracing::warn!(
                client,
                limit,
                "a client is at its bound of requests in flight: answering 429"
            );
            return Err(TooMany { limit });
        }
        *count += 1;
        Ok(ClientPermit {
            place: Some((self.inner.clone(), client.to_string())),
        })
    }

    /// Requests `client` has in flight.
    pub fn in_flight(&self, client: &str) -> usize {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(client)
            .copied()
            .unwrap_or(0)
    }
}

/// Admits `request` for `client` with the limiter its server stamped on it (a request served
/// another way is not bounded): what a service's auth middleware calls once it knows who asks.
pub fn admit(request: &Request, client: &str) -> Result<ClientPermit, TooMany> {
    match RequestsPerClient::of(request.extensions()) {
        Some(limiter) => limiter.admit(client),
        None => Ok(ClientPermit { place: None }),
    }
}

/// One request's place among its client's requests in flight; given back when dropped.
#[must_use = "the place is given back when the permit is dropped"]
#[derive(Debug)]
pub struct ClientPermit {
    place: Option<(Arc<Inner>, String)>,
}

impl ClientPermit {
    /// `response`, holding this place until its body has been sent (or dropped): a client that
    /// reads its answers slowly keeps them in flight.
    pub fn hold(self, response: Response) -> Response {
        response.map(|body| {
            axum::body::Body::new(Held {
                body,
                _permit: self,
            })
        })
    }
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        if let Some((inner, client)) = self.place.take() {
            let mut counts = inner.counts.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(count) = counts.get_mut(&client) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.remove(&client);
                }
            }
        }
    }
}

/// A response body that keeps its [`ClientPermit`].
struct Held {
    body: axum::body::Body,
    _permit: ClientPermit,
}

impl http_body::Body for Held {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A client at its bound of requests in flight; answered as 429 `too-many-requests` with
/// `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooMany {
    pub limit: usize,
}

impl IntoResponse for TooMany {
    fn into_response(self) -> Response {
        too_many(format!(
            "this client already has {} requests in flight (--max-requests-per-client); retry after {RETRY_AFTER_SECS} s",
            self.limit
        ))
    }
}

/// 429 `too-many-requests` with `Retry-After`.
pub fn too_many(message: String) -> Response {
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        crate::error::code::TOO_MANY_REQUESTS,
        message,
    )
    .into_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_has_its_own_bound_and_gets_its_places_back() {
        let limiter = RequestsPerClient::new(2);
        let a1 = limiter.admit("a").unwrap();
        let _a2 = limiter.admit("a").unwrap();
        let refused = limiter.admit("a").unwrap_err().into_response();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[RETRY_AFTER], "1");
        // Another client is not affected.
        let _b = limiter.admit("b").unwrap();
        drop(a1);
        assert_eq!(limiter.in_flight("a"), 1);
        let _a3 = limiter.admit("a").unwrap();
    }

    #[test]
    fn a_small_server_is_not_split_up() {
        assert_eq!(default_share(8), 8);
        assert_eq!(default_share(64), 64);
        assert_eq!(default_share(128), 64);
        assert_eq!(default_share(1024), 128);
        assert_eq!(default_share(0), 1);
    }
}
