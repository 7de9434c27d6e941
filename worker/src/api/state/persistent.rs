//! The session's Persistent Dirs seen from the session: committed or kept as a turn left them
//! when it ends, and a kept turn committed on request (`POST /v1/persistent/commit`).

use super::super::error::WorkerError;
use super::super::model::{CommitOutcome, CommitRequest, PersistentCommit};
use super::super::persistent::CommitError;
use super::super::refusal::Refusal;
use super::slot::BusyFlag;
use super::Worker;
use std::collections::BTreeSet;

impl Worker {
    /// Commits or keeps the session's writable Persistent Dirs as the ended turn left them
    /// (after its Tier-1 changes were merged back).
    pub(super) async fn end_persistent(
        &self,
        turn_id: &str,
        changed: Option<BTreeSet<String>>,
    ) -> Vec<PersistentCommit> {
        let Some(dirs) = self.persistent.clone() else {
            return Vec::new();
        };
        let turn = turn_id.to_string();
        let reports = tokio::task::spawn_blocking(move || dirs.end_turn(&turn, changed.as_ref()))
            .await
            .unwrap_or_else(|e| {
                vec![PersistentCommit {
                    dir: String::new(),
                    turn_id: turn_id.to_string(),
                    outcome: CommitOutcome::Failed,
                    message: Some(format!("the commit task failed: {e}")),
                }]
            });
        for r in &reports {
            if matches!(r.outcome, CommitOutcome::Conflict | CommitOutcome::Failed) {
                tracing::warn!(dir = r.dir, turn_id, outcome = ?r.outcome, "Persistent Dir not committed: {}", r.message.as_deref().unwrap_or(""));
            }
        }
        reports
    }

    /// `POST /v1/persistent/commit`: writes a kept turn of a dir to its source, between
    /// commands.
    pub async fn commit_persistent(&self, req: CommitRequest) -> Result<PersistentCommit, Refusal> {
        Ok(self.commit_kept(req).await?)
    }

    async fn commit_kept(&self, req: CommitRequest) -> Result<PersistentCommit, WorkerError> {
        let Some(dirs) = self.persistent.clone() else {
            return Err(WorkerError::NotFound(
                "this session has no Persistent Dirs".to_string(),
            ));
        };
        let _slot = self.lock().await?;
        let _busy = BusyFlag::set(&self.busy);
        self.touch();
        let committed = tokio::task::spawn_blocking(move || dirs.commit(&req.dir, &req.turn_id))
            .await
            .map_err(|e| self.task_error("commit", &e))?;
        committed.map_err(|e| match &e {
            CommitError::NoSuchDir(_) | CommitError::NothingKept { .. } => {
                WorkerError::NotFound(e.to_string())
            }
            CommitError::ReadOnly(_) => WorkerError::NotCommitted(e.to_string()),
            CommitError::Failed(_) => WorkerError::Io(e.to_string()),
        })
    }
}
