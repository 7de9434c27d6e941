//! Tier-1 pods as the worker's next tier: on a turn's first escalation, pack the workspace, ask
//! the operator for a sandbox, wait for it, hand the archive to its agent and check what the
//! agent unpacked; then run the turn's commands there, and at the end fetch the changes, merge
//! them into the session's tracked mounts and always end the sandbox.
//!
//! Every failure is bounded and answered: provisioning by its deadline (126 with the operator's
//! reason), a command by its time limit plus a margin (126 when the pod stops answering).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::error::Tier1Error;
use super::pod_config::ERROR_TEXT_BYTES;
pub use super::pod_config::{PodTier1Config, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_ARCHIVE_BYTES};
use super::pod_shell::PodShell;
use super::skills::{self, MAX_SKILLS_ARCHIVE_BYTES};
use super::tier_api::{TierApi, TierApiError};
use async_trait::async_trait;
use kube_harness_protocol::tier1::{BindReport, Phase, Sandbox};
use kube_harness_protocol::trace::SandboxOrigin;
use kube_harness_runtime::{CommandExecutor, NextTier, TierError};
use kube_harness_service_kit::body::{self, Capped};
use kube_harness_workspace::{self as workspace, PackOptions, PackReport, WorkspaceSpec};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Provisions a [`PodShell`] per escalating turn.
pub struct PodTier1 {
    config: PodTier1Config,
    http: reqwest::Client,
    api: TierApi,
}

impl PodTier1 {
    pub fn new(config: PodTier1Config) -> Result<Self, Tier1Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| Tier1Error::local("HTTP client", std::io::Error::other(e)))?;
        let api = TierApi::new(
            http.clone(),
            &config.tier_api_url,
            &config.namespace,
            &config.session,
            &config.token,
        )
        .with_max_answer_bytes(config.max_answer_bytes);
        Ok(PodTier1 { config, http, api })
    }

    /// Opens the turn's sandbox and polls it until Ready; on Failed, a definite refusal or the
    /// deadline, ends it and says why.
    async fn wait_ready(
        &self,
        turn: &str,
        bytes: u64,
        deadline: Instant,
    ) -> Result<Sandbox, Tier1Error> {
        let mut opened = false;
        let mut last;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let call = left.clamp(Duration::from_millis(100), Duration::from_secs(10));
            let asked = Instant::now();
            let answer = if opened {
                self.api.get(turn, call).await
            } else {
                self.api.open(turn, bytes, call).await
            };
            tracing::debug!(
                turn,
                call = if opened { "get" } else { "open" },
                ms = asked.elapsed().as_secs_f64() * 1e3,
                phase = answer.as_ref().ok().map(|sb| sb.phase.as_str()),
                "tier-1 escalation: tier API answered"
            );
            match answer {
                Ok(sb) => {
                    opened = true;
                    match sb.phase {
                        Phase::Ready if sb.endpoint.is_some() && sb.token.is_some() => {
                            return Ok(sb)
                        }
                        Phase::Failed => {
                            let why = format!(
                                "the Tier-1 sandbox failed ({}): {}",
                                sb.reason.as_deref().unwrap_or("unknown reason"),
                                sb.message.as_deref().unwrap_or("no message")
                            );
                            return Err(self.end_after(turn, Tier1Error::Sandbox(why)).await);
                        }
                        other => {
                            last = format!(
                                "last phase {}{}",
                                other.as_str(),
                                sb.pod.map(|p| format!(", pod {p}")).unwrap_or_default()
                            )
                        }
                    }
                }
                Err(TierApiError::Retryable(e)) => last = e,
                // The operator lost track of it (restarted before the pod was recorded): the
                // open is idempotent per turn, so ask again.
                Err(TierApiError::NotFound(e)) => {
                    opened = false;
                    last = e;
                }
                Err(TierApiError::Refused(e)) => {
                    return Err(self.end_after(turn, Tier1Error::Sandbox(e)).await)
                }
            }
            if Instant::now() >= deadline {
                let why = format!(
                    "the Tier-1 sandbox was not ready within {}s ({last})",
                    self.config.provision_timeout.as_secs()
                );
                return Err(self.end_after(turn, Tier1Error::Sandbox(why)).await);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(self.config.poll_interval.min(left)).await;
        }
    }

    /// Ends the turn's sandbox after a failure and returns the failure (with the delete's own
    /// failure appended, when there is one).
    async fn end_after(&self, turn: &str, error: Tier1Error) -> Tier1Error {
        match self.api.delete(turn).await {
            Ok(()) => error,
            Err(end) => Tier1Error::EndFailed {
                error: Box::new(error),
                end,
            },
        }
    }

    /// `PUT` of a spooled archive to the agent (`route`: the workspace or the skills), retried
    /// while the agent's address refuses connections (a pod just Ready, a network policy not
    /// yet in force), until the deadline; then its count must be what was packed.
    async fn hand_over(
        &self,
        sb: &Sandbox,
        route: &str,
        (archive, length, packed): &Spooled,
        deadline: Instant,
    ) -> Result<BindReport, Tier1Error> {
        let endpoint = sb
            .endpoint
            .as_deref()
            .unwrap_or_default()
            .trim_end_matches('/');
        let token = sb.token.as_deref().unwrap_or_default();
        let url = format!("{endpoint}{route}");
        let what = if route.starts_with("/v1/skills") {
            "skills"
        } else {
            "workspace"
        };
        let length = *length;
        let bound = loop {
            // Streamed from the spool, from its start again on each attempt.
            let body = body::from_file(archive)
                .map_err(|e| Tier1Error::local(format!("reading the spooled {what} archive"), e))?;
            let sent = self
                .http
                .put(&url)
                .bearer_auth(token)
                .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
                .header(reqwest::header::CONTENT_LENGTH, length)
                .body(body)
                .timeout(
                    deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_secs(60)),
                )
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    break body::json::<BindReport>(r, self.config.max_answer_bytes)
                        .await
                        .map_err(|e| {
                            Tier1Error::Pod(format!(
                                "unreadable {what} answer from the Tier-1 agent: {e}"
                            ))
                        })?
                }
                Ok(r) => {
                    let status = r.status();
                    let text = body::text_prefix(r, ERROR_TEXT_BYTES).await;
                    return Err(Tier1Error::Pod(format!(
                        "the Tier-1 agent refused the {what} ({status}): {text}"
                    )));
                }
                Err(e) if e.is_connect() && Instant::now() < deadline => {
                    tokio::time::sleep(self.config.poll_interval).await;
                }
                Err(e) => {
                    return Err(Tier1Error::Pod(format!(
                        "handing the {what} to the Tier-1 agent: {e}"
                    )))
                }
            }
        };
        if bound.files != packed.entries || bound.bytes != packed.total_bytes {
            return Err(Tier1Error::Pod(format!(
                "the Tier-1 pod {} unpacked {} {what} entries / {} bytes, but {} / {} were sent",
                sb.pod.as_deref().unwrap_or_default(),
                bound.files,
                bound.bytes,
                packed.entries,
                packed.total_bytes
            )));
        }
        Ok(bound)
    }
}

/// An archive packed into a spool file: the file, its length and what `pack` reported.
type Spooled = (std::fs::File, u64, PackReport);

/// Packs the `what` archive into an unnamed spool file in `dir`, at most `limit` bytes (`over`
/// names the error beyond); `pack` writes it into the writer it is given, and its failure is
/// said as `packing`.
fn spool(
    dir: &std::path::Path,
    limit: u64,
    (what, packing): (&str, &'static str),
    over: impl FnOnce() -> Tier1Error,
    pack: impl FnOnce(
        &mut dyn std::io::Write,
    ) -> Result<PackReport, kube_harness_workspace::WorkspaceError>,
) -> Result<Spooled, Tier1Error> {
    let file = tempfile::tempfile_in(dir).map_err(|e| {
        Tier1Error::local(
            format!("spooling the {what} archive in {}", dir.display()),
            e,
        )
    })?;
    let mut out = Capped::new(
        std::io::BufWriter::with_capacity(body::SPOOL_BUFFER, file),
        limit,
    );
    let packed = pack(&mut out);
    if out.over {
        return Err(over());
    }
    let packed = packed.map_err(Tier1Error::workspace(packing))?;
    let written = out.written;
    let file = out
        .inner
        .into_inner()
        .map_err(|e| Tier1Error::local(format!("spooling the {what} archive"), e.into_error()))?;
    Ok((file, written, packed))
}

#[async_trait]
impl NextTier for PodTier1 {
    async fn provision(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, TierError> {
        Ok(self.open(spec).await?)
    }
}

impl PodTier1 {
    async fn open(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, Tier1Error> {
        let started = Instant::now();
        let step = |what: &str| {
            tracing::debug!(
                ms = started.elapsed().as_secs_f64() * 1e3,
                "tier-1 escalation: {what}"
            )
        };
        let deadline = started
            .checked_add(self.config.provision_timeout)
            .unwrap_or(started);
        let packed_spec = spec.clone();
        let dir = self.config.spool_dir.clone();
        let limit = self.config.max_archive_bytes;
        // Both packed into spool files, never into memory; refused before any pod is asked for
        // when over their limits. The skills (what Tier-0 shows at /.agents) go as an archive of
        // their own, shown read-only on the pod and never merged back.
        let (workspace, skills) = tokio::task::spawn_blocking(move || {
            let over = || Tier1Error::OverHandoffLimit { limit };
            let opts = PackOptions::default();
            let what = ("workspace", "packing the workspace");
            let ws = spool(&dir, limit, what, over, |out| {
                workspace::pack(&packed_spec, &opts, out)
            })?;
            let over = || Tier1Error::OverSkillsLimit {
                limit: MAX_SKILLS_ARCHIVE_BYTES,
            };
            let agents = skills::agents_dir(&packed_spec);
            let what = ("skills", "packing the skills under /.agents");
            let sk = spool(&dir, MAX_SKILLS_ARCHIVE_BYTES, what, over, |out| {
                skills::pack(agents, out)
            })?;
            Ok::<_, Tier1Error>((ws, sk))
        })
        .await
        .map_err(Tier1Error::task("pack task"))??;
        step("workspace packed");
        let handed_over = workspace.1;
        let turn = format!("t{}", uuid::Uuid::new_v4().simple());
        let sb = self.wait_ready(&turn, handed_over, deadline).await?;
        step("sandbox ready");
        let pod = sb.pod.clone().unwrap_or_default();
        // A pod kept from the session's earlier turn holds that turn's workspace: this one
        // replaces it (and is checked as any bind is).
        let route = match sb.reused {
            true => "/v1/workspace?replace=true",
            false => "/v1/workspace",
        };
        if let Err(e) = self.hand_over(&sb, route, &workspace, deadline).await {
            return Err(self.end_after(&turn, e).await);
        }
        step("workspace bound");
        // After the bind, before the first command (the agent takes them only then). A fresh
        // pod shows an empty /.agents already; a kept one shows the last turn's.
        if skills.2.entries > 1 || sb.reused {
            if let Err(e) = self.hand_over(&sb, "/v1/skills", &skills, deadline).await {
                return Err(self.end_after(&turn, e).await);
            }
            step("skills installed");
        }
        let packed = workspace.2;
        Ok(Arc::new(PodShell {
            http: self.http.clone(),
            api: self.api.clone(),
            config: self.config.clone(),
            endpoint: sb
                .endpoint
                .clone()
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_string(),
            token: sb.token.clone().unwrap_or_default(),
            opened: SandboxOrigin {
                source: sb.source,
                miss_reason: sb.miss_reason.clone(),
                pod: sb.pod.clone(),
                reused: sb.reused,
            },
            pod,
            turn,
            worker_spec: spec.clone(),
            worker_base: packed.snapshot,
            started,
            provisioned: started.elapsed(),
            handed_over,
            commands: AtomicU64::new(0),
            busy_ms: AtomicU64::new(0),
            gone: Mutex::new(None),
            queue: tokio::sync::Mutex::new(()),
        }))
    }
}
