//! Requests per second from one source address (issue 30: a tenant's pods pipelined thousands of
//! requests per connection to the tier API, each answered at once, and the operator's CPU went to
//! them while other sessions' escalations took 40 s). Past
//! [`super::ConnectionLimits::max_request_rate_per_source`] (with a burst of twice that), a
//! request is answered 429 `too-many-requests` with `Retry-After` and its connection is closed,
//! before the router sees it: a flood costs its sender a new connection per refused request.
//!
//! Loopback is never limited: it is the server's own pod (or, on a workstation, its own user),
//! and benchmarks and tests drive the services from there.

use crate::clients::too_many;
use axum::http::header::CONNECTION;
use axum::http::HeaderValue;
use axum::response::Response;
use governor::{DefaultKeyedRateLimiter, Quota};
use std::net::IpAddr;
use std::num::NonZeroU32;

/// Sources whose state is kept before the stale ones are dropped.
const KEPT: usize = 4096;

pub(super) struct SourceRate {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
    per_second: u32,
}

impl SourceRate {
    /// `None` when `per_second` is 0 (no limit).
    pub(super) fn new(per_second: u32) -> Option<Self> {
        let rate = NonZeroU32::new(per_second)?;
        let burst = NonZeroU32::new(per_second.saturating_mul(2)).unwrap_or(rate);
        Some(SourceRate {
            limiter: DefaultKeyedRateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)),
            per_second,
        })
    }

    pub(super) fn per_second(&self) -> u32 {
        self.per_second
    }

    /// Whether one more request from `source` may be served now.
    pub(super) fn admit(&self, source: IpAddr) -> bool {
        if source.is_loopback() {
            return true;
        }
        if self.limiter.len() > KEPT {
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&source).is_ok()
    }
}

/// The answer to a request over the rate: 429, and the connection closes after it.
pub(super) fn refusal(per_second: u32) -> Response {
    let mut response = too_many(format!(
        "more than {per_second} requests a second from this address (--max-request-rate-per-source)"
    ));
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_past_its_burst_is_refused_and_loopback_never() {
        let rate = SourceRate::new(5).unwrap();
        let far: IpAddr = "10.1.2.3".parse().unwrap();
        let served = (0..30).filter(|_| rate.admit(far)).count();
        assert!((10..=11).contains(&served), "burst of 10, got {served}");
        let other: IpAddr = "10.1.2.4".parse().unwrap();
        assert!(rate.admit(other), "another address has its own budget");
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!((0..1000).all(|_| rate.admit(local)));
        assert!(SourceRate::new(0).is_none());
    }
}
