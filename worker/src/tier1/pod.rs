//! Tier-1 pods as the worker's next tier: on a turn's first escalation, pack the workspace, ask
//! the operator for a sandbox, wait for it, hand the archive to its agent and check what the
//! agent unpacked; then run the turn's commands there, and at the end fetch the changes, merge
//! them into the session's tracked mounts and always end the sandbox.
//!
//! Every failure is bounded and answered: provisioning by its deadline (126 with the operator's
//! reason), a command by its time limit plus a margin (126 when the pod stops answering).

use super::tier_api::{TierApi, TierApiError};
use super::wire::{phase, AgentExec, AgentExecResult, BindReport, Sandbox};
use crate::runtime::{CommandExecutor, DisposeReport, ExecRequest, ExecResult, NextTier};
use crate::workspace::{self, ApplyOptions, PackOptions, Snapshot, WorkspaceSpec};
use async_trait::async_trait;
use base64::Engine;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the worker finds the operator, and its bounds.
#[derive(Debug, Clone)]
pub struct PodTier1Config {
    /// The operator's tier API, e.g. `http://kube-harness-operator.kube-harness:8081`.
    pub tier_api_url: String,
    /// The session's namespace and name.
    pub namespace: String,
    pub session: String,
    /// The session's worker token: the bearer to the operator.
    pub token: String,
    /// How long a sandbox may take to be Ready and bound.
    pub provision_timeout: Duration,
    pub poll_interval: Duration,
    /// A command's limit when its request names none (the worker's `--command-timeout`).
    pub command_timeout: Duration,
    /// What a request to the agent may take beyond the command's own limit (transfer, the
    /// agent's kill and drain) before the pod counts as gone.
    pub request_margin: Duration,
    /// Bound on fetching the change archive at the end of the turn.
    pub changes_timeout: Duration,
}

impl PodTier1Config {
    pub fn new(tier_api_url: &str, namespace: &str, session: &str, token: &str) -> Self {
        PodTier1Config {
            tier_api_url: tier_api_url.to_string(),
            namespace: namespace.to_string(),
            session: session.to_string(),
            token: token.to_string(),
            provision_timeout: Duration::from_secs(180),
            poll_interval: Duration::from_millis(250),
            command_timeout: Duration::from_secs(60),
            request_margin: Duration::from_secs(15),
            changes_timeout: Duration::from_secs(300),
        }
    }
}

/// Provisions a [`PodShell`] per escalating turn.
pub struct PodTier1 {
    config: PodTier1Config,
    http: reqwest::Client,
    api: TierApi,
}

impl PodTier1 {
    pub fn new(config: PodTier1Config) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let api = TierApi::new(
            http.clone(),
            &config.tier_api_url,
            &config.namespace,
            &config.session,
            &config.token,
        );
        Ok(PodTier1 { config, http, api })
    }

    /// Opens the turn's sandbox and polls it until Ready; on Failed, a definite refusal or the
    /// deadline, ends it and says why.
    async fn wait_ready(
        &self,
        turn: &str,
        bytes: u64,
        deadline: Instant,
    ) -> Result<Sandbox, String> {
        let mut opened = false;
        let mut last;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let call = left.clamp(Duration::from_millis(100), Duration::from_secs(10));
            let answer = if opened {
                self.api.get(turn, call).await
            } else {
                self.api.open(turn, bytes, call).await
            };
            match answer {
                Ok(sb) => {
                    opened = true;
                    match sb.phase.as_str() {
                        phase::READY if sb.endpoint.is_some() && sb.token.is_some() => {
                            return Ok(sb)
                        }
                        phase::FAILED => {
                            let why = format!(
                                "the Tier-1 sandbox failed ({}): {}",
                                sb.reason.as_deref().unwrap_or("unknown reason"),
                                sb.message.as_deref().unwrap_or("no message")
                            );
                            return Err(self.end_after(turn, why).await);
                        }
                        other => {
                            last = format!(
                                "last phase {other}{}",
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
                Err(TierApiError::Refused(e)) => return Err(self.end_after(turn, e).await),
            }
            if Instant::now() >= deadline {
                let why = format!(
                    "the Tier-1 sandbox was not ready within {}s ({last})",
                    self.config.provision_timeout.as_secs()
                );
                return Err(self.end_after(turn, why).await);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(self.config.poll_interval.min(left)).await;
        }
    }

    /// Ends the turn's sandbox after a failure and returns the failure (with the delete's own
    /// failure appended, when there is one).
    async fn end_after(&self, turn: &str, why: String) -> String {
        match self.api.delete(turn).await {
            Ok(()) => why,
            Err(e) => format!("{why}; ending the sandbox also failed: {e}"),
        }
    }

    /// `PUT /v1/workspace`, retried while the agent's address refuses connections (a pod just
    /// Ready, a network policy not yet in force), until the deadline.
    async fn hand_over(
        &self,
        sb: &Sandbox,
        archive: Vec<u8>,
        deadline: Instant,
    ) -> Result<BindReport, String> {
        let endpoint = sb
            .endpoint
            .as_deref()
            .unwrap_or_default()
            .trim_end_matches('/');
        let token = sb.token.as_deref().unwrap_or_default();
        let body = axum::body::Bytes::from(archive);
        loop {
            let sent = self
                .http
                .put(format!("{endpoint}/v1/workspace"))
                .bearer_auth(token)
                .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
                .body(body.clone())
                .timeout(
                    deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_secs(60)),
                )
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    return r
                        .json::<BindReport>()
                        .await
                        .map_err(|e| format!("unreadable bind answer from the Tier-1 agent: {e}"))
                }
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    return Err(format!(
                        "the Tier-1 agent refused the workspace ({status}): {text}"
                    ));
                }
                Err(e) if e.is_connect() && Instant::now() < deadline => {
                    tokio::time::sleep(self.config.poll_interval).await;
                }
                Err(e) => return Err(format!("handing the workspace to the Tier-1 agent: {e}")),
            }
        }
    }
}

#[async_trait]
impl NextTier for PodTier1 {
    async fn provision(&self, spec: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, String> {
        let started = Instant::now();
        let deadline = started + self.config.provision_timeout;
        let packed_spec = spec.clone();
        let (archive, packed) = tokio::task::spawn_blocking(move || {
            let mut archive = Vec::new();
            let report = workspace::pack(&packed_spec, &PackOptions::default(), &mut archive)
                .map_err(|e| format!("packing the workspace: {e}"))?;
            Ok::<_, String>((archive, report))
        })
        .await
        .map_err(|e| format!("pack task: {e}"))??;
        let turn = format!("t{}", uuid::Uuid::new_v4().simple());
        let handed_over = archive.len() as u64;
        let sb = self.wait_ready(&turn, handed_over, deadline).await?;
        let pod = sb.pod.clone().unwrap_or_default();
        let bound = match self.hand_over(&sb, archive, deadline).await {
            Ok(b) => b,
            Err(e) => return Err(self.end_after(&turn, e).await),
        };
        if bound.files != packed.entries || bound.bytes != packed.total_bytes {
            let why = format!(
                "the Tier-1 pod {pod} unpacked {} entries / {} bytes, but {} / {} were sent",
                bound.files, bound.bytes, packed.entries, packed.total_bytes
            );
            return Err(self.end_after(&turn, why).await);
        }
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
            opened: json!({"source": sb.source, "missReason": sb.miss_reason, "pod": sb.pod}),
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

/// One turn's Tier-1 pod, bound to the turn's workspace.
pub struct PodShell {
    http: reqwest::Client,
    api: TierApi,
    config: PodTier1Config,
    endpoint: String,
    token: String,
    pod: String,
    turn: String,
    opened: Value,
    worker_spec: WorkspaceSpec,
    /// The worker's snapshot at handoff: the merge's base.
    worker_base: Snapshot,
    started: Instant,
    provisioned: Duration,
    handed_over: u64,
    commands: AtomicU64,
    busy_ms: AtomicU64,
    /// Set once the pod stopped answering: later commands are refused at once, not sent into
    /// a dead address one time limit at a time.
    gone: Mutex<Option<String>>,
    /// One command at a time, as in one persistent shell.
    queue: tokio::sync::Mutex<()>,
}

impl PodShell {
    fn gone(&self) -> Option<String> {
        self.gone.lock().expect("pod state lock").clone()
    }

    fn mark_gone(&self, why: &str) {
        self.gone
            .lock()
            .expect("pod state lock")
            .get_or_insert_with(|| why.to_string());
    }

    async fn send(&self, req: &ExecRequest) -> Result<ExecResult, String> {
        let limit = req.timeout.unwrap_or(self.config.command_timeout);
        let body = AgentExec {
            script: req.script.clone(),
            cwd: req.cwd.display().to_string(),
            env: req.env.clone(),
            timeout_ms: Some(limit.as_millis().max(1) as u64),
        };
        let sent = self
            .http
            .post(format!("{}/v1/exec", self.endpoint))
            .bearer_auth(&self.token)
            .json(&body)
            .timeout(limit + self.config.request_margin)
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
                return Err(format!("the Tier-1 pod {} {why}", self.pod));
            }
        };
        let status = r.status();
        if !status.is_success() {
            let text = r.text().await.unwrap_or_default();
            if status.is_server_error() {
                self.mark_gone(&format!("answered {status}"));
            }
            return Err(format!(
                "the Tier-1 pod {} refused the command ({status}): {text}",
                self.pod
            ));
        }
        let answer: AgentExecResult = r.json().await.map_err(|e| {
            self.mark_gone(&format!("sent an unreadable answer ({e})"));
            format!("the Tier-1 pod {} sent an unreadable answer: {e}", self.pod)
        })?;
        let decode = |field: &str, s: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| {
                    format!(
                        "the Tier-1 pod {} sent bad base64 in {field}: {e}",
                        self.pod
                    )
                })
        };
        Ok(ExecResult {
            stdout: decode("stdoutB64", &answer.stdout_b64)?,
            stderr: decode("stderrB64", &answer.stderr_b64)?,
            state: decode("stateB64", &answer.state_b64)?,
            exit_code: answer.exit_code,
            timed_out: answer.timed_out,
            truncated: answer.truncated,
            duration: Duration::from_millis(answer.duration_ms),
        })
    }

    /// `GET /v1/changes` and the merge into the worker's tracked mounts.
    async fn merge(&self) -> Result<(workspace::ApplyReport, u64), String> {
        if let Some(why) = self.gone() {
            return Err(format!(
                "the Tier-1 pod {} {why}; nothing was merged back",
                self.pod
            ));
        }
        let r = self
            .http
            .get(format!("{}/v1/changes", self.endpoint))
            .bearer_auth(&self.token)
            .timeout(self.config.changes_timeout)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "fetching the changes from the Tier-1 pod {}: {e}; nothing was merged back",
                    self.pod
                )
            })?;
        let status = r.status();
        if !status.is_success() {
            let text = r.text().await.unwrap_or_default();
            return Err(format!(
                "the Tier-1 pod {} refused its changes ({status}): {text}; nothing was merged back",
                self.pod
            ));
        }
        let archive = r.bytes().await.map_err(|e| {
            format!(
                "reading the changes from the Tier-1 pod {}: {e}; nothing was merged back",
                self.pod
            )
        })?;
        let returned = archive.len() as u64;
        let spec = self.worker_spec.clone();
        let base = self.worker_base.clone();
        let report = tokio::task::spawn_blocking(move || {
            workspace::apply(&spec, &archive[..], &base, &ApplyOptions::default())
        })
        .await
        .map_err(|e| format!("merge task: {e}"))?
        .map_err(|e| format!("merging the Tier-1 changes: {e}"))?;
        Ok((report, returned))
    }
}

#[async_trait]
impl CommandExecutor for PodShell {
    fn tier(&self) -> u8 {
        1
    }

    fn opened(&self) -> Option<Value> {
        Some(self.opened.clone())
    }

    async fn execute(&self, req: ExecRequest) -> ExecResult {
        let _turn = self.queue.lock().await;
        if let Some(why) = self.gone() {
            return ExecResult::fault(&format!(
                "the Tier-1 pod {} {why}; this turn's commands cannot run there",
                self.pod
            ));
        }
        let started = Instant::now();
        let mut result = self
            .send(&req)
            .await
            .unwrap_or_else(|e| ExecResult::fault(&e));
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
    async fn dispose(&self) -> Result<DisposeReport, String> {
        let _turn = self.queue.lock().await;
        let merged = self.merge().await;
        let deleted = self.api.delete(&self.turn).await;
        let pod_ms = self.started.elapsed().as_millis() as u64;
        let mut report = DisposeReport::default();
        let mut returned = 0;
        match merged {
            Ok((applied, bytes)) => {
                returned = bytes;
                report.problems.extend(applied.rejected.iter().map(|r| {
                    format!(
                        "merge rejected {}: {}",
                        r.harness_path.display(),
                        serde_json::to_string(&r.reason).unwrap_or_default()
                    )
                }));
                report.file_changes = applied.applied;
            }
            Err(e) => report.problems.push(e),
        }
        if let Err(e) = deleted {
            report.problems.push(format!(
                "ending the Tier-1 sandbox of pod {} failed: {e}",
                self.pod
            ));
        }
        report.usage = Some(json!({
            "provider": "pod",
            "pod": self.pod,
            "source": self.opened["source"],
            "missReason": self.opened["missReason"],
            "podMs": pod_ms,
            "provisionMs": self.provisioned.as_millis() as u64,
            "commands": self.commands.load(Ordering::Relaxed),
            "durationMs": self.busy_ms.load(Ordering::Relaxed),
            "bytesHandedOver": self.handed_over,
            "bytesReturned": returned,
        }));
        Ok(report)
    }
}
