//! One client's turn at a time (`POST /v1/turns`): a client opens a turn and gets its id; while
//! it is open, commands and end-turn requests that do not name it are refused with 409
//! `turn-busy` naming its client, and one that names a turn no longer open gets 409
//! `turn-ended`. A claimed turn idle past `turn_idle_timeout` is ended by the worker, so an
//! abandoned client does not hold the session. Commands without a turn id keep the shared turn
//! (the local host's one-command-per-process clients, older SDKs) while no claimed turn is open.

use super::super::error::WorkerError;
use super::super::model::{OpenTurnRequest, OpenTurnResponse};
use super::super::refusal::Refusal;
use super::slot::{Claim, OpenTurn, Slot};
use super::Worker;
use std::time::Instant;

/// Longest `client` name an open-turn request may give.
pub const MAX_CLIENT_LEN: usize = 128;

/// Who may end the open turn.
#[derive(Clone, Copy)]
pub(super) enum Ender<'a> {
    /// A client's `POST /v1/turns/end`, naming a turn or not.
    Client(Option<&'a str>),
    /// The worker itself, at shutdown: whatever turn is open.
    Worker,
    /// The worker's idle check: a claimed turn idle past the bound, else nothing.
    Idle,
}

impl Worker {
    /// Opens a turn for one client: 409 `turn-busy` while any turn is open (a claimed one, or the
    /// shared one of commands without a turn id, until it is ended).
    pub async fn open_claimed_turn(
        &self,
        req: OpenTurnRequest,
    ) -> Result<OpenTurnResponse, Refusal> {
        Ok(self.claim_turn(req).await?)
    }

    async fn claim_turn(&self, req: OpenTurnRequest) -> Result<OpenTurnResponse, WorkerError> {
        if let Some(client) = &req.client {
            if client.len() > MAX_CLIENT_LEN || client.chars().any(char::is_control) {
                return Err(WorkerError::BadRequest(format!(
                    "client must be at most {MAX_CLIENT_LEN} bytes without control characters"
                )));
            }
        }
        let tier0 = self.usable_tier0()?;
        let mut slot = self.lock().await?;
        self.check_broken()?;
        if let Some(open) = &slot.turn {
            return Err(WorkerError::TurnBusy(busy(open, None)));
        }
        self.touch();
        let open = self.open(&mut slot, tier0).await?;
        open.claim = Some(Claim { client: req.client });
        open.last_used = Instant::now();
        tracing::info!(turn_id = %open.turn_id, "a client opened a turn");
        Ok(OpenTurnResponse {
            turn_id: open.turn_id.clone(),
            idle_timeout_ms: u64::try_from(self.config.turn_idle_timeout.as_millis())
                .unwrap_or(u64::MAX),
        })
    }

    /// Ends a claimed turn left idle past the bound (as `POST /v1/turns/end` would, its closing
    /// events recorded); does nothing while a request holds the session. Called every second.
    pub async fn end_idle_turn(&self) {
        match self.finish_turn(None, Ender::Idle).await {
            Ok(r) if r.turn.is_some() => tracing::warn!(
                idle_timeout_s = self.config.turn_idle_timeout.as_secs(),
                "a client's turn was idle past the bound and was ended"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("ending an idle turn: {e}"),
        }
    }
}

/// Whether a command naming `turn_id` (or none) may run now; the refusal when not.
pub(super) fn admit(slot: &Slot, turn_id: Option<&str>) -> Result<(), WorkerError> {
    match (&slot.turn, turn_id) {
        (Some(open), Some(id)) if open.turn_id == id => Ok(()),
        (Some(open), None) if open.claim.is_none() => Ok(()),
        (Some(open), named) => Err(WorkerError::TurnBusy(busy(open, named))),
        (None, Some(id)) => Err(WorkerError::TurnEnded(ended(id))),
        (None, None) => Ok(()),
    }
}

/// Whether `ender` may end the open turn: `Ok(false)` when there is nothing for it to end.
pub(super) fn may_end(
    slot: &Slot,
    ender: Ender<'_>,
    idle: std::time::Duration,
) -> Result<bool, WorkerError> {
    let Some(open) = &slot.turn else {
        return Ok(false);
    };
    match ender {
        Ender::Worker => Ok(true),
        Ender::Idle => Ok(open.claim.is_some() && open.last_used.elapsed() >= idle),
        Ender::Client(Some(id)) if open.turn_id == id => Ok(true),
        Ender::Client(None) if open.claim.is_none() => Ok(true),
        // A turn that is not this one is open: ending the named one again answers `turn: null`
        // only when no claimed turn is open; otherwise the client is told whose turn it is.
        Ender::Client(named) => Err(WorkerError::TurnBusy(busy(open, named))),
    }
}

fn busy(open: &OpenTurn, named: Option<&str>) -> String {
    let whose = match &open.claim {
        Some(Claim {
            client: Some(client),
        }) => format!("turn {} of client {client:?}", open.turn_id),
        Some(Claim { client: None }) => format!("turn {} of another client", open.turn_id),
        None => format!(
            "the shared turn {} (of commands sent without a turn id)",
            open.turn_id
        ),
    };
    let asked = match named {
        Some(id) => format!("turn {id:?} is not open: "),
        None => String::new(),
    };
    format!(
        "{asked}{whose} is open, idle {} s; the session runs one turn at a time: wait for its end \
         (POST /v1/turns/end, or its idle bound), then open one",
        open.last_used.elapsed().as_secs()
    )
}

fn ended(id: &str) -> String {
    format!(
        "turn {id:?} is not open: it was ended (POST /v1/turns/end, its idle bound, or a worker \
         restart); open a new one (POST /v1/turns)"
    )
}
