//! Where the agent installs the skills it is sent (`PUT /v1/skills`, docs/tier1.md): through the
//! pod's skills keeper, into a directory its own namespace shows read-only, or nowhere. Each
//! way, commands see `/.agents` only through a read-only mount (`skills.rs` says why).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::keeper::Keeper;
use super::skills::{self, InstallError};
use kube_harness_protocol::tier1::BindReport;
use kube_harness_service_kit::ApiError;
use std::io::{Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

pub enum SkillsSink {
    /// This agent shows no `/.agents` (in a pod without a keeper): skills are refused, 409.
    None,
    /// A directory the agent's namespace binds read-only at `/.agents` (`--workspace-root`
    /// other than `/`: tests and development, where the agent is root).
    Dir(PathBuf),
    /// The pod's keeper, the one writer of the volume mounted read-only at `/.agents`.
    Keeper(Arc<Keeper>),
}

impl SkillsSink {
    /// Installs the spooled skills archive, replacing what was shown (on a blocking thread).
    pub async fn install(&self, mut archive: std::fs::File) -> Result<BindReport, ApiError> {
        let io = |e: std::io::Error| {
            ApiError::internal("skills-failed", format!("reading the spooled skills: {e}"))
        };
        archive.seek(SeekFrom::Start(0)).map_err(io)?;
        let len = archive.metadata().map_err(io)?.len();
        let work: Box<dyn FnOnce() -> Result<BindReport, InstallError> + Send> = match self {
            SkillsSink::None => {
                return Err(ApiError::conflict(
                    "no-skills",
                    "this agent shows no /.agents (its pod has no skills keeper)",
                ))
            }
            SkillsSink::Dir(dir) => {
                let dir = dir.clone();
                Box::new(move || skills::install(std::io::BufReader::new(archive), &dir))
            }
            SkillsSink::Keeper(keeper) => {
                let keeper = keeper.clone();
                Box::new(move || keeper.install(&mut archive, len))
            }
        };
        let installed = tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| ApiError::internal("skills-failed", format!("the install task: {e}")))?;
        installed.map_err(|e| match e {
            InstallError::BadArchive(m) => ApiError::bad_request("bad-archive", m),
            InstallError::Io(m) => ApiError::internal("skills-failed", m),
        })
    }
}
