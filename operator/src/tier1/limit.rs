//! A bound on how fast one session opens Tier-1 sandboxes. Every open writes a turn record (a
//! HarnessTurn in the session's namespace, kept ten minutes after its turn ends), a pod and its
//! Secret: about ten API writes, and the operator's own work (the turn controller, the sweep)
//! grows with the records. A worker opens once per escalated turn and polls with GET after that,
//! so a legitimate agent never comes near it.
//!
//! In memory, per replica (governor's GCRA, keyed by namespace and session): a bound on the cost
//! of one token, not an exact global count. Checked after the bearer is verified, so nobody can
//! spend another session's allowance.

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota};
use std::num::NonZeroU32;
use std::time::Duration;

/// Opens one session may make at once.
pub const OPENS_BURST: u32 = 10;
/// Opens per minute one session may keep up after its burst.
pub const OPENS_PER_MINUTE: u32 = 12;
/// Keys kept before the limiter forgets sessions whose allowance is whole again.
const KEYS_KEPT: usize = 4096;

pub struct OpenLimiter {
    limiter: DefaultKeyedRateLimiter<(String, String)>,
}

impl Default for OpenLimiter {
    fn default() -> Self {
        Self::new(OPENS_PER_MINUTE, OPENS_BURST)
    }
}

impl OpenLimiter {
    pub fn new(per_minute: u32, burst: u32) -> Self {
        let at_least_one = |n: u32| NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_minute(at_least_one(per_minute)).allow_burst(at_least_one(burst));
        OpenLimiter {
            limiter: DefaultKeyedRateLimiter::keyed(quota),
        }
    }

    /// `Ok` when the session may open now, else how long until it may.
    pub fn check(&self, namespace: &str, session: &str) -> Result<(), Duration> {
        if self.limiter.len() > KEYS_KEPT {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(&(namespace.to_string(), session.to_string()))
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }

    /// Sessions the limiter currently remembers.
    pub fn keys(&self) -> usize {
        self.limiter.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_refusals_with_a_wait_and_other_sessions_unaffected() {
        let l = OpenLimiter::new(60, 3);
        for _ in 0..3 {
            assert!(l.check("ns", "a").is_ok());
        }
        let wait = l.check("ns", "a").expect_err("past the burst");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(
            l.check("ns", "b").is_ok(),
            "another session has its own allowance"
        );
        assert!(
            l.check("other", "a").is_ok(),
            "the key is namespace and session"
        );
    }

    #[test]
    fn the_allowance_refills() {
        let l = OpenLimiter::new(600, 1);
        assert!(l.check("ns", "a").is_ok());
        assert!(l.check("ns", "a").is_err());
        std::thread::sleep(Duration::from_millis(120));
        assert!(l.check("ns", "a").is_ok());
    }

    #[test]
    fn many_sessions_do_not_grow_it_forever() {
        let l = OpenLimiter::new(6000, 1);
        for i in 0..(KEYS_KEPT + 10) {
            let _ = l.check("ns", &format!("s{i}"));
        }
        std::thread::sleep(Duration::from_millis(20));
        let _ = l.check("ns", "last");
        assert!(l.keys() < KEYS_KEPT, "{}", l.keys());
    }
}
