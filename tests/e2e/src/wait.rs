//! Bounded polling. Watches would be faster, but polling a GET keeps the "last seen" state at hand
//! for the timeout message, which is what a failing CI run needs.

use backon::{ConstantBuilder, Retryable};
use std::future::Future;
use std::time::Duration;

use crate::{E2eError, Result};

/// Poll interval: short enough for sub-second tests, long enough not to load a 2-core machine.
const POLL: Duration = Duration::from_millis(250);

/// What one probe saw.
pub enum Check<T> {
    /// The condition holds; the wait returns this value.
    Done(T),
    /// Not yet; the text describes the state seen, for the timeout message.
    Pending(String),
}

/// Calls `probe` until it returns `Ok(Check::Done(value))`, or fails with [`E2eError::Timeout`]
/// after `timeout`, quoting the last `Check::Pending` description. An `Err` ends the wait at once.
/// A probe in flight at the deadline is let finish (the deadline is checked between probes).
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Check<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let attempt = || {
        let seen = probe();
        async move {
            match seen.await {
                Ok(Check::Done(v)) => Ok(v),
                Ok(Check::Pending(last)) => Err(Wait::Pending(last)),
                Err(e) => Err(Wait::Failed(e)),
            }
        }
    };
    let polled = attempt
        .retry(
            ConstantBuilder::default()
                .with_delay(POLL)
                .without_max_times(),
        )
        .sleep(tokio::time::sleep)
        .when(|e| matches!(e, Wait::Pending(_)))
        .adjust(|_, delay| delay.filter(|_| tokio::time::Instant::now() < deadline))
        .await;
    polled.map_err(|e| match e {
        Wait::Pending(last) => E2eError::Timeout {
            what: what.to_string(),
            secs: timeout.as_secs(),
            last,
        },
        Wait::Failed(e) => e,
    })
}

/// Why one probe did not end the wait.
enum Wait {
    Pending(String),
    Failed(E2eError),
}
