//! How a request body must keep coming, on every route that reads one: the one rule behind the
//! 408 `body-timeout` of the worker, its uploads, its adoption and the Tier-1 agent.
//!
//! A connection is bounded until its request head has arrived (the header read timeout); after
//! that only its handler bounds it. Issue 14 gave the upload routes a pace; issue 29 found the
//! JSON routes without one: a token holder dripping `/v1/exec` bodies a byte at a time held
//! connections forever. The rule now lives here, the server stamps it on every request
//! ([`RequestTiming`], by [`crate::serve_with`] from [`crate::ConnectionLimits::body`]), and the
//! body readers of [`super`] enforce it.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, Extensions, HeaderMap};
use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;

/// How every request body must keep coming, or be refused (408 `body-timeout`) before anything
/// acts on it:
///
/// - never silent for `idle`;
/// - after `grace`, on average at least `min_rate` bytes a second, both counted from the end of
///   the request's head (a client dripping a byte now and then is never silent, and would
///   otherwise hold its connection as long as it likes);
/// - a body read whole into memory (a JSON request: exec, end-turn, adoption, the agent's exec)
///   complete, head and body, within `json_deadline` of the request's first byte (so a head
///   trickled slowly leaves less for the body). Streamed bodies (uploads, up to GiBs) are bound
///   by the pace alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyPace {
    pub idle: Duration,
    pub grace: Duration,
    pub min_rate: u64,
    pub json_deadline: Duration,
}

impl Default for BodyPace {
    fn default() -> Self {
        BodyPace {
            idle: Duration::from_secs(30),
            grace: Duration::from_secs(30),
            min_rate: 16 * 1024,
            json_deadline: Duration::from_secs(60),
        }
    }
}

/// Which rule a wait for the next chunk is bounded by (what a timeout breaks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    Idle,
    Rate,
    Deadline,
}

impl BodyPace {
    /// Rejects values that would refuse every body (a zero idle time, deadline or rate).
    pub fn validate(&self) -> Result<(), String> {
        if self.idle.is_zero() || self.json_deadline.is_zero() || self.min_rate == 0 {
            return Err(
                "a body's idle time, its deadline and its minimum rate must be above zero".into(),
            );
        }
        Ok(())
    }

    /// How long to wait for the next chunk, `bytes` having come in `since_head` (since the
    /// request's head was complete; `since_start`: since its first byte), and the rule that wait
    /// ends for; `whole`: the JSON deadline applies.
    pub(crate) fn wait(
        &self,
        bytes: u64,
        (since_head, since_start): (Duration, Duration),
        whole: bool,
    ) -> (Duration, Rule) {
        // The next byte is due when the average would otherwise fall below the minimum.
        let due_secs = (bytes.saturating_add(1) as f64) / (self.min_rate.max(1) as f64);
        let due = self
            .grace
            .saturating_add(Duration::from_secs_f64(due_secs.min(1e9)));
        let mut wait = (self.idle, Rule::Idle);
        let rate = due.saturating_sub(since_head);
        if rate < wait.0 {
            wait = (rate, Rule::Rate);
        }
        if whole {
            let left = self.json_deadline.saturating_sub(since_start);
            if left < wait.0 {
                wait = (left, Rule::Deadline);
            }
        }
        wait
    }

    /// What breaking `rule` means, for the 408's message.
    pub(crate) fn explain(&self, rule: Rule) -> String {
        match rule {
            Rule::Idle => format!("nothing came for {:?}", self.idle),
            Rule::Rate => format!(
                "under {} bytes/s on average after the first {:?}",
                self.min_rate, self.grace
            ),
            Rule::Deadline => format!(
                "not complete within {:?} of the request's first byte",
                self.json_deadline
            ),
        }
    }
}

/// The length a request announces, if it announces one.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// When a request began (the first byte of its head) and when its head was complete, and the
/// pace its body must keep. The server ([`crate::serve_with`]) puts it on every request it
/// serves.
#[derive(Debug, Clone, Copy)]
pub struct RequestTiming {
    pub started: Instant,
    pub head_done: Instant,
    pub pace: BodyPace,
}

impl RequestTiming {
    /// (since the head was complete, since the first byte).
    pub(crate) fn elapsed(&self) -> (Duration, Duration) {
        (self.head_done.elapsed(), self.started.elapsed())
    }
}

/// What reading a request body needs from the request's head: its declared length, whether the
/// client waits for `100 Continue`, and its [`RequestTiming`] (from the server; a request served
/// another way starts now, with the default pace). An axum extractor.
#[derive(Debug, Clone, Copy)]
pub struct BodyHead {
    pub declared: Option<u64>,
    pub(crate) expects_continue: bool,
    pub timing: RequestTiming,
}

impl BodyHead {
    /// The head of a request with these headers and extensions.
    pub fn of(headers: &HeaderMap, extensions: &Extensions) -> Self {
        BodyHead {
            declared: declared_length(headers),
            expects_continue: headers
                .get(header::EXPECT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("100-continue")),
            timing: extensions
                .get::<RequestTiming>()
                .copied()
                .unwrap_or_else(|| RequestTiming {
                    started: Instant::now(),
                    head_done: Instant::now(),
                    pace: BodyPace::default(),
                }),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for BodyHead {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        Ok(BodyHead::of(&parts.headers, &parts.extensions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_bounded_by_the_rule_that_comes_first() {
        let pace = BodyPace {
            idle: Duration::from_secs(30),
            grace: Duration::from_secs(30),
            min_rate: 1000,
            json_deadline: Duration::from_secs(60),
        };
        let s = Duration::from_secs;
        // Early on, only silence bounds a wait.
        assert_eq!(pace.wait(0, (s(0), s(0)), true), (s(30), Rule::Idle));
        // After the grace period, 10 bytes are long overdue: the next must come at once.
        assert_eq!(pace.wait(10, (s(40), s(40)), false), (s(0), Rule::Rate));
        // The pace counts from the head's end: a slow head does not make the body overdue ...
        assert_eq!(
            pace.wait(0, (s(1), s(25)), true),
            (s(29) + Duration::from_millis(1), Rule::Rate)
        );
        // ... but the deadline counts from its first byte. A streamed body has none.
        assert_eq!(
            pace.wait(1_000_000, (s(40), s(50)), true),
            (s(10), Rule::Deadline)
        );
        assert_eq!(pace.wait(1_000_000, (s(40), s(50)), false).1, Rule::Idle);
    }
}
