//! One turn's Tier-1 pod once it is bound: commands forwarded to its agent (bounded by their
//! limit plus a margin; a pod that stops answering is 126 at once from then on), and at the end
//! the change archive merged into the session's tracked mounts and the sandbox always ended.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::error::Tier1Error;
use super::pod_config::{PodTier1Config, ERROR_TEXT_BYTES};
use super::tier_api::TierApi;
use async_trait::async_trait;
use base64::Engine;
use kube_harness_protocol::tier1::{AgentExec, AgentExecResult};
use kube_harness_protocol::trace::{HigherTierUsage, PodUsage, SandboxOrigin};
use kube_harness_runtime::relock;
use kube_harness_runtime::{CommandExecutor, DisposeReport, ExecRequest, ExecResult, TierError};
use kube_harness_service_kit::body::{self, BodyError};
use kube_harness_workspace::{self as workspace, ApplyOptions, Snapshot, WorkspaceSpec};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One turn's Tier-1 pod, bound to the turn's workspace.
pub struct PodShell {
    pub(super) http: reqwest::Client,
    pub(super) api: TierApi,
    pub(super) config: PodTier1Config,
    pub(super) endpoint: String,
    pub(super) token: String,
    pub(super) pod: String,
    pub(super) turn: String,
    pub(super) opened: SandboxOrigin,
    pub(super) worker_spec: WorkspaceSpec,
    /// The worker's snapshot at handoff: the merge's base.
    pub(super) worker_base: Snapshot,
    pub(super) started: Instant,
    pub(super) provisioned: Duration,
    pub(super) handed_over: u64,
    pub(super) commands: AtomicU64,
    pub(super) busy_ms: AtomicU64,
    /// Set once the pod stopped answering: later commands are refused at once, not sent into
    /// a dead address one time limit at a time.
    pub(super) gone: Mutex<Option<String>>,
    /// One command at a time, as in one persistent shell.
    pub(super) queue: tokio::sync::Mutex<()>,
}

impl PodShell {
    fn gone(&self) -> Option<String> {
        relock(&self.gone).clone()
    }

    fn mark_gone(&self, why: &str) {
        relock(&self.gone).get_or_insert_with(|| why.to_string());
    }

    async fn send(&self, req: &ExecRequest) -> Result<ExecResult, Tier1Error> {
        let limit = req.timeout.unwrap_or(self.config.command_timeout);
        let body = AgentExec {
            script: req.script.clone(),
            cwd: req.cwd.display().to_string(),
            env: req.env.clone(),
            timeout_ms: Some(u64::try_from(limit.as_millis().max(1)).unwrap_or(u64::MAX)),
        };
        let wait = limit.saturating_add(self.config.request_margin);
        let asked = Instant::now();
        let sent = self
            .http
            .post(format!("{}/v1/exec", self.endpoint))
            .bearer_auth(&self.token)
            .json(&body)
            .timeout(wait)
            .send()
            .await;
        let r = match sent {
            Ok(r) => r,
            Err(e) => {
                let why = if e.is_timeout() {
                    format!(
                        "did not answer within {:?} of the command's limit",
                        self.config.request_margin
                    )
                } else {
                    format!("stopped answering ({e})")
                };
                self.mark_gone(&why);
                return Err(Tier1Error::Pod(format!(
                    "the Tier-1 pod {} {why}",
                    self.pod
                )));
            }
        };
        let status = r.status();
        if !status.is_success() {
            let text = body::text_prefix(r, ERROR_TEXT_BYTES).await;
            if status.is_server_error() {
                self.mark_gone(&format!("answered {status}"));
            }
            return Err(Tier1Error::Pod(format!(
                "the Tier-1 pod {} refused the command ({status}): {text}",
                self.pod
            )));
        }
        tracing::debug!(
            pod = %self.pod,
            ms = asked.elapsed().as_secs_f64() * 1e3,
            "tier-1 exec: the agent answered"
        );
        let answer: AgentExecResult =
            body::json(r, self.config.max_answer_bytes)
                .await
                .map_err(|e| {
                    self.mark_gone(&format!("sent an unreadable answer ({e})"));
                    Tier1Error::Pod(format!(
                        "the Tier-1 pod {} sent an unreadable answer: {e}",
                        self.pod
                    ))
                })?;
        let decode = |field: &str, s: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| {
                    Tier1Error::Pod(format!(
                        "the Tier-1 pod {} sent bad base64 in {field}: {e}",
                        self.pod
                    ))
                })
        };
        Ok(ExecResult {
            stdout: decode("stdoutB64", &answer.stdout_b64)?,
            stderr: decode("stderrB64", &answer.stderr_b64)?,
            state: decode("stateB64", &answer.state_b64)?,
            exit_code: answer.exit_code,
            timed_out: answer.timed_out,
            // An agent that names no stream (older than the per-stream flags) cut stdout.
            stdout_truncated: answer.stdout_truncated
                || (answer.truncated && !answer.stderr_truncated),
            stderr_truncated: answer.stderr_truncated,
            duration: Duration::from_millis(answer.duration_ms),
            state_truncated: false,
        })
    }

    /// `GET /v1/changes` and the merge into the worker's tracked mounts.
    async fn merge(&self) -> Result<(workspace::ApplyReport, u64), Tier1Error> {
        if let Some(why) = self.gone() {
            return Err(Tier1Error::Pod(format!(
                "the Tier-1 pod {} {why}; nothing was merged back",
                self.pod
            )));
        }
        let r = self
            .http
            .get(format!("{}/v1/changes", self.endpoint))
            .bearer_auth(&self.token)
            .timeout(self.config.changes_timeout)
            .send()
            .await
            .map_err(|e| {
                Tier1Error::Pod(format!(
                    "fetching the changes from the Tier-1 pod {}: {e}; nothing was merged back",
                    self.pod
                ))
            })?;
        let status = r.status();
        if !status.is_success() {
            let text = body::text_prefix(r, ERROR_TEXT_BYTES).await;
            return Err(Tier1Error::Pod(format!(
                "the Tier-1 pod {} refused its changes ({status}): {text}; nothing was merged back",
                self.pod
            )));
        }
        // Streamed into an unnamed spool file, counted as it arrives and cut off past the
        // limit (the spool goes with the error): never held in memory, nothing left behind.
        let limit = self.config.max_archive_bytes;
        let (archive, returned) = body::spool(r, &self.config.spool_dir, limit)
            .await
            .map_err(|e| {
                Tier1Error::Pod(match e {
                    BodyError::TooLarge { .. } => format!(
                        "the change archive of the Tier-1 pod {} is over the limit of {limit} bytes (--max-archive-bytes); nothing was merged back",
                        self.pod
                    ),
                    other => format!(
                        "reading the changes from the Tier-1 pod {}: {other}; nothing was merged back",
                        self.pod
                    ),
                })
            })?;
        let spec = self.worker_spec.clone();
        let base = self.worker_base.clone();
        let report = tokio::task::spawn_blocking(move || {
            let reader = std::io::BufReader::with_capacity(body::SPOOL_BUFFER, archive);
            workspace::apply(&spec, reader, &base, &ApplyOptions::default())
        })
        .await
        .map_err(Tier1Error::task("merge task"))?
        .map_err(Tier1Error::workspace("merging the Tier-1 changes"))?;
        Ok((report, returned))
    }
}

#[async_trait]
impl CommandExecutor for PodShell {
    fn tier(&self) -> u8 {
        1
    }

    fn opened(&self) -> Option<SandboxOrigin> {
        Some(self.opened.clone())
    }

    async fn execute(&self, req: ExecRequest) -> ExecResult {
        let _turn = self.queue.lock().await;
        if let Some(why) = self.gone() {
            return kube_harness_runtime::fault(&format!(
                "the Tier-1 pod {} {why}; this turn's commands cannot run there",
                self.pod
            ));
        }
        let started = Instant::now();
        let mut result = self
            .send(&req)
            .await
            .unwrap_or_else(|e| kube_harness_runtime::fault(&e.to_string()));
        if result.duration.is_zero() {
            result.duration = started.elapsed();
        }
        self.commands.fetch_add(1, Ordering::Relaxed);
        self.busy_ms
            .fetch_add(result.duration.as_millis() as u64, Ordering::Relaxed);
        result
    }

    /// Merge, then always end the sandbox: a failed merge or delete is a problem in the report
    /// (`harness.runtime.dispose.failed`), never a reason to keep the pod or lose the usage.
    async fn dispose(&self) -> Result<DisposeReport, TierError> {
        let _turn = self.queue.lock().await;
        let merged = self.merge().await;
        let deleted = self.api.delete(&self.turn).await;
        let pod_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut report = DisposeReport::default();
        let mut returned = 0;
        match merged {
            Ok((applied, bytes)) => {
                returned = bytes;
                report
                    .problems
                    .extend(crate::merge_report::problems(&applied));
                report.file_changes = applied.applied;
            }
            Err(e) => report.problems.push(e.to_string()),
        }
        if let Err(e) = deleted {
            report.problems.push(format!(
                "ending the Tier-1 sandbox of pod {} failed: {e}",
                self.pod
            ));
        }
        report.usage = Some(HigherTierUsage::Pod(PodUsage {
            pod: self.pod.clone(),
            source: self.opened.source,
            miss_reason: self.opened.miss_reason.clone(),
            pod_ms,
            provision_ms: self.provisioned.as_millis() as u64,
            commands: self.commands.load(Ordering::Relaxed),
            duration_ms: self.busy_ms.load(Ordering::Relaxed),
            bytes_handed_over: self.handed_over,
            bytes_returned: returned,
        }));
        Ok(report)
    }
}
