//! Reads in flight, bounded per process: each holds a slot from before its page is loaded until
//! its answer has been sent (or dropped), so parallel reads of a big run cost at most
//! [`DEFAULT_READS_IN_FLIGHT`] pages ([`crate::store::MAX_PAGE_BYTES`] each, twice: the events
//! and their JSON) however many clients ask at once (issue 30: four parallel reads of a 41 MB run
//! got the session log OOMKilled). Reads past the bound wait their turn; the connection limits
//! bound how many wait.

use axum::body::{Body, Bytes};
use axum::response::Response;
use http_body::Frame;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default reads served at once.
pub const DEFAULT_READS_IN_FLIGHT: usize = 8;

#[derive(Clone)]
pub struct ReadSlots(Arc<Semaphore>);

impl ReadSlots {
    pub fn new(slots: usize) -> Self {
        Self(Arc::new(Semaphore::new(slots.max(1))))
    }

    /// Waits for a slot.
    pub async fn take(&self) -> ReadSlot {
        // The semaphore is never closed.
        ReadSlot {
            _permit: self.0.clone().acquire_owned().await.ok(),
        }
    }
}

pub struct ReadSlot {
    _permit: Option<OwnedSemaphorePermit>,
}

impl ReadSlot {
    /// `response`, keeping this slot until its body has been sent: a client that reads its
    /// answer slowly keeps the answer's memory, so it keeps the slot.
    pub fn hold(self, response: Response) -> Response {
        response.map(|body| Body::new(Held { body, _slot: self }))
    }
}

struct Held {
    body: Body,
    _slot: ReadSlot,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
