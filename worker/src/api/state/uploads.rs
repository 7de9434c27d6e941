//! Files and directories in and out of the session, between commands: an upload (`PUT
//! /v1/files`, `PUT /v1/archive`) spooled first and then placed and recorded as the open turn's
//! file events; a download (`GET /v1/files`, `GET /v1/archive`) checked here and streamed by the
//! routes after the session is let go.

use super::super::error::WorkerError;
use super::super::log::keyed;
use super::super::model::{ArchiveWritten, FileWritten};
use super::super::refusal::Refusal;
use super::super::{archive, files};
use super::slot::BusyFlag;
use super::{Worker, UPLOADS_AT_ONCE};
use kube_harness_runtime::TraceEvent;
use kube_harness_service_kit::body::BodyHead;
use kube_harness_workspace::FileChange;

/// What an upload placed and recorded.
struct Uploaded {
    changes: Vec<FileChange>,
    bytes: u64,
    events: Vec<TraceEvent>,
    log_pending: usize,
    /// What the upload did not place as asked (an archive's modes it could not keep).
    warnings: Vec<String>,
}

/// What an upload's placing made: its changes, and what it did not place as asked.
type Placed = (Vec<FileChange>, Vec<String>);

impl Worker {
    /// Writes one file (`PUT /v1/files?path=…`): see [`Worker::upload`].
    pub async fn put_file(
        &self,
        path: &str,
        turn_id: Option<&str>,
        head: &BodyHead,
        body: axum::body::Body,
    ) -> Result<FileWritten, Refusal> {
        let target = files::resolve(&self.spec, path).and_then(|t| {
            files::missing_parents(&t)?;
            Ok(t)
        });
        let limit = (self.config.max_file_bytes, "--max-file-bytes");
        let up = self
            .upload(target, turn_id, head, body, limit, |target, spooled| {
                Ok((vec![files::place(&target, spooled)?.change], Vec::new()))
            })
            .await?;
        let change = up.changes.first().map(|c| c.change);
        Ok(FileWritten {
            path: path.to_string(),
            change: match change {
                Some(kube_harness_workspace::ChangeKind::Created) => "created",
                _ => "modified",
            }
            .to_string(),
            bytes: up.bytes,
            events: up.events,
            log_pending: up.log_pending,
        })
    }

    /// Unpacks a tar into a directory (`PUT /v1/archive?path=…`): see [`Worker::upload`] and
    /// `archive::extract` (checked whole before anything is written).
    pub async fn put_archive(
        &self,
        path: &str,
        turn_id: Option<&str>,
        head: &BodyHead,
        body: axum::body::Body,
    ) -> Result<ArchiveWritten, Refusal> {
        let target = files::resolve_dir(&self.spec, path).and_then(|t| {
            files::missing_dirs(&t, &t.rel)?;
            Ok(t)
        });
        let limit = (self.config.max_archive_bytes, "--max-archive-bytes");
        let spec = self.spec.clone();
        let up = self
            .upload(
                target,
                turn_id,
                head,
                body,
                limit,
                move |target, spooled| {
                    let writable = |harness: &std::path::Path| spec.is_writable(harness);
                    let extracted = archive::extract(&target, spooled.file, writable)?;
                    Ok((extracted.changes, extracted.warnings))
                },
            )
            .await?;
        Ok(ArchiveWritten {
            path: path.to_string(),
            entries: up.changes.len() as u64,
            bytes: up.bytes,
            events: up.events,
            log_pending: up.log_pending,
            warnings: up.warnings,
        })
    }

    /// An upload: checked (403 on a read-only path), the body spooled first (a slow client holds
    /// no session), then, between commands, `place`d in the worker's mounts and recorded as the
    /// open turn's `harness.file.*` events with source `upload` (the turn is opened if none is).
    /// 409 while the turn runs on Tier-1 (its copy of the workspace would not see the files, and
    /// the merge-back would fight them).
    async fn upload(
        &self,
        target: Result<files::Target, WorkerError>,
        turn_id: Option<&str>,
        head: &BodyHead,
        body: axum::body::Body,
        (limit, flag): (u64, &str),
        place: impl FnOnce(files::Target, files::Spooled) -> Result<Placed, WorkerError>
            + Send
            + 'static,
    ) -> Result<Uploaded, WorkerError> {
        let checked = self.usable_tier0().and_then(|tier0| {
            let target = target?;
            if !self.spec.is_writable(&target.harness) {
                return Err(WorkerError::ReadOnly(format!(
                    "{} is read-only in this session",
                    target.harness.display()
                )));
            }
            Ok((tier0, target, self.log_run(None)?))
        });
        let (tier0, target, run) = match checked {
            Ok(checked) => checked,
            Err(refusal) => {
                // Read (and drop) what the client is still sending, so that it reads the answer
                // rather than a reset connection.
                files::discard(head, body).await;
                return Err(refusal);
            }
        };
        // Spools are bounded in number as well as size (each may be `limit` bytes of the
        // worker's temp directory): a third concurrent upload is told to try again.
        let Ok(_spooling) = self.uploads.try_acquire() else {
            files::discard(head, body).await;
            return Err(WorkerError::UploadsBusy(UPLOADS_AT_ONCE));
        };
        let spooled = files::spool(head, body, limit, flag).await?;
        let bytes = spooled.bytes;
        let mut slot = self.lock().await?;
        let _busy = BusyFlag::set(&self.busy);
        self.touch();
        self.check_broken()?;
        // Recorded as the open turn's events: not into another client's turn.
        super::claim::admit(&slot, turn_id)?;
        slot.exec_counter = slot.exec_counter.saturating_add(1);
        let prefix = format!("{}:upload-{}", self.instance, slot.exec_counter);
        let open = self.open(&mut slot, tier0).await?;
        if open.turn.tier().await != 0 {
            return Err(WorkerError::TurnEscalated);
        }
        let (changes, warnings) = tokio::task::spawn_blocking(move || place(target, spooled))
            .await
            .map_err(|e| WorkerError::Io(format!("the upload task failed: {e}")))??;
        open.turn.record_upload(&changes).await;
        let events = open.capture.take();
        open.files.record(&events);
        // An upload is not a command: its events wait in the queue (which goes first before
        // the next command) and the answer counts them, rather than failing a write that is done.
        let log_pending = match self.record(keyed(&run, &prefix, &events, 0)).await {
            Ok(()) => 0,
            Err(_) => self.log_pending().await,
        };
        Ok(Uploaded {
            changes,
            bytes,
            events,
            log_pending,
            warnings,
        })
    }

    /// Opens one file for `GET /v1/files?path=…`, between commands; the caller streams it after
    /// the session is let go. 409 while the turn runs on Tier-1 (the worker's copy is stale until
    /// the turn ends).
    pub async fn open_file(&self, path: &str) -> Result<(std::fs::File, u64), Refusal> {
        let target = files::resolve(&self.spec, path)?;
        self.between_commands().await?;
        Ok(files::open(&target)?)
    }

    /// Checks a directory for `GET /v1/archive?path=…` between commands (409 while on Tier-1),
    /// and returns it for the walk, which streams after the session is let go.
    pub async fn archive_target(&self, path: &str) -> Result<files::Target, Refusal> {
        let target = files::resolve_dir(&self.spec, path)?;
        self.between_commands().await?;
        files::require_dir(&target)?;
        Ok(target)
    }

    /// Waits for the running command, if any; 409 when the turn is on a higher tier.
    async fn between_commands(&self) -> Result<(), WorkerError> {
        let slot = self.lock().await?;
        self.touch();
        if let Some(open) = &slot.turn {
            if open.turn.tier().await != 0 {
                return Err(WorkerError::TurnEscalated);
            }
        }
        Ok(())
    }
}
