//! Reads in flight, bounded per process: each holds a slot from before its page is loaded until
//! its answer has been sent, so parallel reads of a big run cost at most
//! [`DEFAULT_READS_IN_FLIGHT`] pages ([`crate::store::MAX_PAGE_BYTES`] each) however many clients
//! ask at once (issue 30: four parallel reads of a 41 MB run got the session log OOMKilled).
//! Reads past the bound wait their turn; the connection limits bound how many wait.
//!
//! A page is written out one event at a time as the client takes it, each event dropped once
//! written. A client that stops reading its answer would keep its slot (and its page) for good,
//! and eight such clients would stop every other tenant's reads: a page not sent within
//! [`SEND_TIMEOUT`] is abandoned, its remaining events dropped, its slot freed and its
//! connection failed.

use crate::model::StoredEvent;
use axum::body::{Body, Bytes};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default reads served at once.
pub const DEFAULT_READS_IN_FLIGHT: usize = 8;
/// Longest a page may take to be sent.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct ReadSlots(Arc<Semaphore>);

impl ReadSlots {
    pub fn new(slots: usize) -> Self {
        Self(Arc::new(Semaphore::new(slots.max(1))))
    }

    /// Waits for a slot.
    pub async fn take(&self) -> ReadSlot {
        ReadSlot {
            // The semaphore is never closed.
            _permit: self.0.clone().acquire_owned().await.ok(),
        }
    }
}

pub struct ReadSlot {
    _permit: Option<OwnedSemaphorePermit>,
}

/// A page being sent: what is left of it, and its slot.
struct Sending {
    started: bool,
    written: usize,
    events: std::vec::IntoIter<StoredEvent>,
    /// `Some` until the closing `],"next":N}` is written.
    next: Option<Option<u64>>,
    _slot: ReadSlot,
}

/// `{"events": [...], "next": N | null}`, serialized one event at a time as the body is sent,
/// holding `slot` until it is sent (or [`SEND_TIMEOUT`] passes, or the client goes away).
pub fn page_body(events: Vec<StoredEvent>, next: Option<u64>, slot: ReadSlot) -> Body {
    page_body_within(events, next, slot, SEND_TIMEOUT)
}

fn page_body_within(
    events: Vec<StoredEvent>,
    next: Option<u64>,
    slot: ReadSlot,
    timeout: Duration,
) -> Body {
    let sending = Arc::new(Mutex::new(Some(Sending {
        started: false,
        written: 0,
        events: events.into_iter(),
        next: Some(next),
        _slot: slot,
    })));
    let abandon = Arc::downgrade(&sending);
    tokio::spawn(async move {
        tokio::time::sleep(timeout).await;
        if let Some(sending) = abandon.upgrade() {
            sending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
        }
    });
    let stream = futures::stream::poll_fn(move |_| {
        let mut state = sending.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(page) = state.as_mut() else {
            return Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "page not sent in time: abandoned",
            ))));
        };
        let chunk = if !page.started {
            page.started = true;
            b"{\"events\":[".to_vec()
        } else if let Some(event) = page.events.next() {
            let mut buf = if page.written == 0 {
                Vec::new()
            } else {
                b",".to_vec()
            };
            page.written += 1;
            serde_json::to_writer(&mut buf, &event).map_err(std::io::Error::other)?;
            buf
        } else if let Some(next) = page.next.take() {
            let next = next.map_or("null".to_string(), |n| n.to_string());
            format!("],\"next\":{next}}}").into_bytes()
        } else {
            state.take(); // sent: the slot is free
            return Poll::Ready(None);
        };
        Poll::Ready(Some(Ok(Bytes::from(chunk))))
    });
    Body::from_stream(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    fn event(sequence: u64) -> StoredEvent {
        StoredEvent {
            run_id: "r".into(),
            sequence,
            append_idempotency_key: format!("k{sequence}"),
            occurrence_id: None,
            event_type: "t".into(),
            payload: serde_json::Map::new(),
            digest: "sha256:00".into(),
            recorded_at_ms: 1,
        }
    }

    #[tokio::test]
    async fn a_page_is_its_events_and_frees_its_slot_once_sent() {
        let slots = ReadSlots::new(1);
        let body = page_body(vec![event(1), event(2)], Some(2), slots.take().await);
        let bytes = to_bytes(body, usize::MAX).await.unwrap();
        let page: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(page["next"], 2);
        assert_eq!(page["events"][1]["sequence"], 2);
        assert_eq!(slots.0.available_permits(), 1);
        let empty = page_body(Vec::new(), None, slots.take().await);
        let bytes = to_bytes(empty, usize::MAX).await.unwrap();
        assert_eq!(&bytes[..], br#"{"events":[],"next":null}"#);
    }

    #[tokio::test]
    async fn a_page_not_taken_in_time_is_abandoned_and_its_slot_freed() {
        let slots = ReadSlots::new(1);
        let timeout = Duration::from_millis(50);
        let body = page_body_within(vec![event(1)], None, slots.take().await, timeout);
        assert_eq!(slots.0.available_permits(), 0);
        tokio::time::sleep(timeout * 3).await;
        assert_eq!(slots.0.available_permits(), 1, "the slot is free again");
        assert!(
            to_bytes(body, usize::MAX).await.is_err(),
            "an error, not a page"
        );
    }
}
