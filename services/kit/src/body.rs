//! Bounded HTTP bodies, for servers (refuse past a limit, hold to a pace, linger) and, re-exported
//! from `kube-harness-bounds`, for clients (read an answer up to a limit, spool it to a file,
//! stream a file). Shared by the worker API, its client and the Tier-1 agent, so that no body is
//! ever read whole into memory unbounded, and none is received more slowly than [`BodyPace`]
//! allows.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

mod pace;

use futures::StreamExt;
pub use kube_harness_bounds::body::{
    chain, file_chunks, from_file, json, read, spool, text_prefix, BodyError, Capped, SPOOL_BUFFER,
};
pub use pace::{declared_length, BodyHead, BodyPace, RequestTiming};
use std::time::Duration;

/// After refusing a request body for its size, a server goes on reading and discarding it
/// for up to this many bytes and this long before answering (a "lingering close"): a
/// client still sending then reads the 413, where closing at once would reset the
/// connection under it (it sees a broken pipe, not the answer). Past these, the connection
/// is closed anyway.
pub const LINGER_BYTES: u64 = 64 << 20;
pub const LINGER_TIME: Duration = Duration::from_secs(5);

/// Reads and discards what is left of a refused body (see [`LINGER_BYTES`]).
pub async fn linger(stream: &mut axum::body::BodyDataStream) {
    let drain = async {
        let mut left = LINGER_BYTES;
        while let Some(Ok(chunk)) = stream.next().await {
            let len = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
            match left.checked_sub(len) {
                Some(rest) => left = rest,
                None => break,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

/// A refused request body: lingers over it unless the client waits for `100 Continue` (then
/// the body is never sent, and a refusal needs no lingering).
pub async fn refuse(head: &BodyHead, stream: &mut axum::body::BodyDataStream) {
    if !head.expects_continue {
        linger(stream).await;
    }
}

/// A request body being received: counted against its limit as it arrives and held to its
/// [`BodyPace`] (a body read whole also to its deadline). What every server route that reads a
/// body goes through: [`read_request`] for JSON, the worker's and the agent's spools for uploads.
pub struct Receiving {
    stream: axum::body::BodyDataStream,
    head: BodyHead,
    limit: u64,
    whole: bool,
    bytes: u64,
}

impl Receiving {
    /// Starts receiving a streamed body (an upload) of at most `limit` bytes: refused at once
    /// (after lingering) when its Content-Length says it is larger.
    pub async fn start(
        head: &BodyHead,
        body: axum::body::Body,
        limit: u64,
    ) -> Result<Self, BodyError> {
        Self::begin(head, body, limit, false).await
    }

    /// As [`Receiving::start`], for a body read whole into memory: its JSON deadline applies.
    pub async fn start_whole(
        head: &BodyHead,
        body: axum::body::Body,
        limit: u64,
    ) -> Result<Self, BodyError> {
        Self::begin(head, body, limit, true).await
    }

    async fn begin(
        head: &BodyHead,
        body: axum::body::Body,
        limit: u64,
        whole: bool,
    ) -> Result<Self, BodyError> {
        let mut stream = body.into_data_stream();
        if head.declared.is_some_and(|len| len > limit) {
            refuse(head, &mut stream).await;
            return Err(BodyError::TooLarge { limit });
        }
        Ok(Receiving {
            stream,
            head: *head,
            limit,
            whole,
            bytes: 0,
        })
    }

    /// The next chunk, or `None` at the end of the body. `TooLarge` the moment the count passes
    /// the limit (after lingering over the rest), `TooSlow` when the chunk does not come in
    /// time (no lingering: the client is the slow one).
    pub async fn next(&mut self) -> Result<Option<axum::body::Bytes>, BodyError> {
        let timing = self.head.timing;
        let (wait, rule) = timing.pace.wait(self.bytes, timing.elapsed(), self.whole);
        let next = match tokio::time::timeout(wait, self.stream.next()).await {
            Ok(next) => next,
            Err(_) => {
                return Err(BodyError::TooSlow {
                    bytes: self.bytes,
                    elapsed: timing.started.elapsed(),
                    why: timing.pace.explain(rule),
                })
            }
        };
        let Some(chunk) = next else {
            return Ok(None);
        };
        let chunk = chunk.map_err(|e| BodyError::Read(chain(&e)))?;
        self.bytes = self
            .bytes
            .saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        if self.bytes > self.limit {
            refuse(&self.head, &mut self.stream).await;
            return Err(BodyError::TooLarge { limit: self.limit });
        }
        Ok(Some(chunk))
    }

    /// Bytes received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Reads a request body (JSON) of at most `limit` bytes into memory, held to its pace and its
/// deadline ([`Receiving::start_whole`]): refused at once when its Content-Length says it is
/// larger, else the moment the count passes the limit; either way after lingering over the rest
/// (see [`LINGER_BYTES`]).
pub async fn read_request(
    head: &BodyHead,
    body: axum::body::Body,
    limit: usize,
) -> Result<axum::body::Bytes, BodyError> {
    let limit64 = u64::try_from(limit).unwrap_or(u64::MAX);
    let mut receiving = Receiving::start_whole(head, body, limit64).await?;
    let mut bytes = Vec::new();
    while let Some(chunk) = receiving.next().await? {
        bytes.extend_from_slice(&chunk);
    }
    Ok(axum::body::Bytes::from(bytes))
}
