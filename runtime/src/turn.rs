//! One turn: classify each command, run it on Tier-0 or the higher tier, escalate lazily and
//! stickily, retry once after an emulation gap, refuse with 126 when escalation is impossible, and
//! at the end dispose the tiers (merge-back file events) and report usage.

use super::event::{Emitter, Payload};
use super::executor::{CommandExecutor, ExecRequest, NextTier, TierError};
use super::wire;
use super::{file_event, state, CommandOutcome, Tracker, REFUSED_EXIT_CODE};
use kube_harness_classify::{self as classify, ClassifyOptions, Decision, UNJUDGED};
use kube_harness_protocol::trace::{
    CommandCompleted, CommandStarted, ContentRef, DisposeFailed, EscalationDetail,
    EscalationSignal, FileSource, HigherTierUsage, Reason, TierEscalated, TierFigures, TierRefused,
    TrackingSkipped, TurnUsage,
};
use kube_harness_workspace::{FileChange, WorkspaceSpec};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How a turn runs its commands.
pub struct TurnConfig {
    pub workspace: WorkspaceSpec,
    pub classify: ClassifyOptions,
    /// stdout/stderr larger than this go to `/artifacts/trace/…` and the event carries a contentRef.
    pub inline_output_limit: usize,
}

struct TurnState {
    cwd: PathBuf,
    env: BTreeMap<String, String>,
    higher: Option<Arc<dyn CommandExecutor>>,
    tier0: TierFigures,
    higher_figures: TierFigures,
    escalations: Vec<TierEscalated>,
    refusals: u64,
}

/// One command as a caller hands it to a turn: everything that belongs to this command alone
/// travels with it (never through setters on the turn or its tiers).
#[derive(Debug, Clone, Default)]
pub struct Step<'a> {
    pub script: &'a str,
    /// The caller's step key, on the command's started, completed and refused events
    /// (`data.stepKey`), so a session log can answer "did this step run?".
    pub step_key: Option<&'a str>,
    /// This command's time limit on whichever tier runs it (`None`: the tier's default).
    pub timeout: Option<Duration>,
    /// Where its output also goes as it runs (see [`ExecRequest::output`]).
    pub output: Option<kube_harness_sandbox::OutputTap>,
}

impl<'a> Step<'a> {
    pub fn new(script: &'a str) -> Self {
        Step {
            script,
            ..Step::default()
        }
    }
}

/// What a turn reports for one command: its outcome, and the classification the turn acted on
/// (so a caller that explains the decision does not classify again).
#[derive(Debug, Clone)]
pub struct Executed {
    pub outcome: CommandOutcome,
    pub classification: classify::Classification,
}

/// The command did not run: its [`StartGate`] refused (its start could not be recorded).
/// Nothing was counted and no completed event claims a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("command not run: {0}")]
pub struct NotRun(pub String);

/// Consulted once per command, after `command.started` is emitted and before the command reaches
/// its tier. A host that must not run commands it could not record (the worker with a session
/// log) makes the started event durable here; `Err(reason)` keeps the command from running, and
/// the turn answers [`NotRun`] with it.
#[async_trait::async_trait]
pub trait StartGate: Send {
    async fn before_run(&mut self) -> Result<(), NotRun>;
}

/// Why a turn could not escalate; the refusal (exit 126) says it.
#[derive(Debug, thiserror::Error)]
enum EscalateError {
    #[error("escalation required but no higher tier is configured")]
    NoHigherTier,
    #[error("the higher tier could not be provisioned: {0}")]
    Provision(#[from] TierError),
}

/// A turn in progress. Commands from parallel calls queue: one runs at a time.
pub struct Turn {
    config: TurnConfig,
    emitter: Emitter,
    tier0: Arc<dyn CommandExecutor>,
    next_tier: Option<Arc<dyn NextTier>>,
    tracker: Option<Arc<dyn Tracker>>,
    state: Mutex<TurnState>,
}

impl Turn {
    pub fn new(
        config: TurnConfig,
        emitter: Emitter,
        tier0: Arc<dyn CommandExecutor>,
        next_tier: Option<Arc<dyn NextTier>>,
        tracker: Option<Arc<dyn Tracker>>,
        cwd: PathBuf,
        env: BTreeMap<String, String>,
    ) -> Self {
        Turn {
            config,
            emitter,
            tier0,
            next_tier,
            tracker,
            state: Mutex::new(TurnState {
                cwd,
                env,
                higher: None,
                tier0: TierFigures::default(),
                higher_figures: TierFigures::default(),
                escalations: Vec::new(),
                refusals: 0,
            }),
        }
    }

    /// The tier the turn's commands run on now: 0 until it escalates.
    pub async fn tier(&self) -> u8 {
        let st = self.state.lock().await;
        st.higher.as_ref().map_or(0, |h| h.tier())
    }

    /// A file the host wrote into the tracked mounts between two commands (an upload through the
    /// worker API): its `harness.file.*` event with source `upload`, and a fresh baseline for the
    /// file tracking, so that the next command does not report the same change as its own.
    pub async fn record_upload(&self, changes: &[FileChange]) {
        // Between commands: a running command holds the state.
        let _st = self.state.lock().await;
        for change in changes {
            self.emitter.emit(file_event(change, 0, FileSource::Upload));
        }
        // Closes the run of file events (and counts what the bound left out).
        self.emitter.flush_file_events();
        if let Some(tracker) = &self.tracker {
            let _ = tracker.snapshot();
        }
    }

    /// The cwd and exported variables the next command will start with.
    pub async fn shell_state(&self) -> (PathBuf, BTreeMap<String, String>) {
        let st = self.state.lock().await;
        (st.cwd.clone(), st.env.clone())
    }

    /// Runs one command of the turn with the tiers' default time limit. Never fails: every
    /// fault is an exit code and stderr.
    pub async fn exec(&self, script: &str) -> CommandOutcome {
        match self.exec_step(Step::new(script), None).await {
            Ok(executed) => executed.outcome,
            // Without a gate nothing refuses to run; defined all the same.
            Err(NotRun(reason)) => refused_outcome(0, &format!("command not run: {reason}")),
        }
    }

    /// Runs one [`Step`]. With a `gate`, the command runs only once the gate accepted its start
    /// (`Err(NotRun)` otherwise); every other fault is an exit code and stderr.
    pub async fn exec_step(
        &self,
        step: Step<'_>,
        mut gate: Option<&mut dyn StartGate>,
    ) -> Result<Executed, NotRun> {
        let mut st = self.state.lock().await;
        let classification = classify::classify(step.script, &self.config.classify);
        let outcome = self
            .decide_and_run(&mut st, &step, &classification, &mut gate)
            .await?;
        Ok(Executed {
            outcome,
            classification,
        })
    }

    async fn decide_and_run(
        &self,
        st: &mut TurnState,
        step: &Step<'_>,
        classification: &classify::Classification,
        gate: &mut Option<&mut dyn StartGate>,
    ) -> Result<CommandOutcome, NotRun> {
        let Step {
            script, step_key, ..
        } = *step;
        let current_tier = st.higher.as_ref().map_or(0, |h| h.tier());
        if classification.decision == Decision::Refuse {
            let blocked: Vec<String> = classification
                .reasons
                .iter()
                .filter_map(|r| match r {
                    classify::Reason::PolicyBlocked { command, rule } if command == UNJUDGED => {
                        Some(format!(
                            "{command}: {rule}{}",
                            unjudged_what(classification)
                        ))
                    }
                    classify::Reason::PolicyBlocked { command, .. } => Some(command.clone()),
                    _ => None,
                })
                .collect();
            let reason = format!("refused by policy: {}", blocked.join(", "));
            return Ok(self.refuse(
                st,
                script,
                step_key,
                current_tier,
                &reason,
                wire::reasons(&classification.reasons),
            ));
        }
        if st.higher.is_none() && classification.decision == Decision::Escalate {
            let reasons = wire::reasons(&classification.reasons);
            let detail = EscalationDetail::Reasons(reasons.clone());
            if let Err(reason) = self
                .escalate(st, EscalationSignal::Classification, detail)
                .await
            {
                return Ok(self.refuse(st, script, step_key, 0, &reason.to_string(), reasons));
            }
        }
        let before = (st.cwd.clone(), st.env.clone());
        let outcome = self.run(st, step, gate).await?;
        if outcome.tier == 0 {
            if let Some(gap) = classify::detect_emulation_gap(outcome.stderr.as_str()) {
                // Before any retry, policy: what the gaps name, and what the script hides.
                if let Some((reason, reasons)) = self.retry_refusal(classification, &outcome.stderr)
                {
                    return Ok(self.refuse(st, script, step_key, 0, &reason, reasons));
                }
                // The only retry: stderr is script-writable, so one escalation per command, and a
                // command on the higher tier is never retried again.
                let gap = wire::gap(&gap);
                let detail = EscalationDetail::Gap(gap.clone());
                match self
                    .escalate(st, EscalationSignal::EmulationGap, detail)
                    .await
                {
                    Ok(()) => {
                        (st.cwd, st.env) = before;
                        return self.run(st, step, gate).await;
                    }
                    Err(reason) => {
                        self.emitter.emit(Payload::TierRefused(TierRefused {
                            command: script.to_string(),
                            tier: 0,
                            reason: reason.to_string(),
                            reasons: None,
                            signal: Some(EscalationSignal::EmulationGap),
                            gap: Some(gap),
                            step_key: step_key.map(str::to_string),
                            extra: Default::default(),
                        }));
                        st.refusals = st.refusals.saturating_add(1);
                    }
                }
            }
        }
        Ok(outcome)
    }

    /// Why a Tier-0 command that showed an emulation gap must not be retried on the higher tier,
    /// if it must not. The retry runs the whole script again where every program exists, so the
    /// policy must hold for what the script could run there, not only for what it visibly names:
    ///
    /// - every command a gap line names (all of them: stderr is script-writable, so the first
    ///   line may be a forgery covering the real one) is classified under the turn's policy; a
    ///   denied one refuses the retry, with its name in the reason;
    /// - with any deny policy, the retry is refused in any case: what the script runs beyond its
    ///   visible commands (code in python or node, or in a tool that is a script of theirs such as
    ///   yq; values evaluated at run time) is invisible to classification and would run on the
    ///   higher tier, behind a forged harmless gap line. On Tier-0 itself the denied commands
    ///   cannot run at all (they are left out of its tool set).
    fn retry_refusal(
        &self,
        classification: &classify::Classification,
        stderr: &str,
    ) -> Option<(String, Vec<Reason>)> {
        let options = &self.config.classify;
        let mut named: Vec<String> = Vec::new();
        for line in stderr.lines() {
            if let Some(gap) = classify::detect_emulation_gap(line) {
                if !named.contains(&gap.command) {
                    named.push(gap.command);
                }
            }
        }
        for command in &named {
            let verdict = classify::classify(command, options);
            if verdict.decision == Decision::Refuse {
                let reason = format!(
                    "refused by policy: {command} (named by an emulation gap; not retried on a higher tier)"
                );
                return Some((reason, wire::reasons(&verdict.reasons)));
            }
        }
        let has_policy = !options.policy.deny_commands.is_empty() || options.policy.rule.is_some();
        has_policy.then(|| {
            let reason = "not retried on a higher tier under a deny policy: the retry would run the whole script again where classification cannot check what it runs".to_string();
            (reason, wire::reasons(&classification.reasons))
        })
    }

    /// Ends the turn: disposes the higher tier (its merge-back becomes file events), then Tier-0,
    /// then reports usage. Dispose failures are events, never errors.
    pub async fn end(self) -> Value {
        let dispose_failed = |tier: u8, error: &str| {
            Payload::DisposeFailed(DisposeFailed {
                tier,
                error: error.to_string(),
            })
        };
        let mut st = self.state.into_inner();
        let mut higher_usage = None;
        if let Some(higher) = st.higher.take() {
            match higher.dispose().await {
                Ok(report) => {
                    for change in &report.file_changes {
                        self.emitter
                            .emit(file_event(change, higher.tier(), FileSource::Merge));
                    }
                    for problem in &report.problems {
                        self.emitter.emit(dispose_failed(higher.tier(), problem));
                    }
                    higher_usage = report.usage;
                }
                Err(error) => self
                    .emitter
                    .emit(dispose_failed(higher.tier(), &error.to_string())),
            }
        }
        if let Err(error) = self.tier0.dispose().await {
            self.emitter.emit(dispose_failed(0, &error.to_string()));
        }
        let escalated = !st.escalations.is_empty();
        let higher = if escalated {
            Some(match higher_usage {
                Some(usage) => usage,
                // A tier that reports no usage of its own is measured from its command durations.
                None => HigherTierUsage::Unknown(st.higher_figures.clone()),
            })
        } else {
            None
        };
        let usage = Payload::TurnUsage(TurnUsage {
            stayed_on_tier0: !escalated,
            tier0: st.tier0,
            higher_tier: higher,
            escalations: st.escalations,
            refusals: st.refusals,
        });
        let (_, data) = usage.clone().into_parts();
        self.emitter.emit(usage);
        data
    }

    fn refuse(
        &self,
        st: &mut TurnState,
        script: &str,
        step_key: Option<&str>,
        tier: u8,
        reason: &str,
        reasons: Vec<Reason>,
    ) -> CommandOutcome {
        st.refusals = st.refusals.saturating_add(1);
        self.emitter.emit(Payload::TierRefused(TierRefused {
            command: script.to_string(),
            tier,
            reason: reason.to_string(),
            reasons: Some(reasons),
            signal: None,
            gap: None,
            step_key: step_key.map(str::to_string),
            extra: Default::default(),
        }));
        refused_outcome(tier, reason)
    }

    /// Provisions the next tier (lazily: only here) and makes it sticky for the rest of the turn.
    async fn escalate(
        &self,
        st: &mut TurnState,
        signal: EscalationSignal,
        detail: EscalationDetail,
    ) -> Result<(), EscalateError> {
        let Some(next) = &self.next_tier else {
            return Err(EscalateError::NoHigherTier);
        };
        let started = Instant::now();
        let higher = next.provision(&self.config.workspace).await?;
        let record = TierEscalated {
            signal,
            detail,
            to_tier: higher.tier(),
            provision_ms: started.elapsed().as_millis() as u64,
            // Where the sandbox came from (prepared or ordinary, and why), before any command
            // runs.
            sandbox: higher.opened(),
            extra: Default::default(),
        };
        self.emitter.emit(Payload::TierEscalated(record.clone()));
        st.escalations.push(record);
        st.higher = Some(higher);
        Ok(())
    }

    /// Runs the command on the current tier: `command.started`, the gate, the tier, then the
    /// state it reports, its file events and `command.completed`.
    async fn run(
        &self,
        st: &mut TurnState,
        step: &Step<'_>,
        gate: &mut Option<&mut dyn StartGate>,
    ) -> Result<CommandOutcome, NotRun> {
        let Step {
            script,
            step_key,
            timeout,
            ref output,
        } = *step;
        let executor = st.higher.clone().unwrap_or_else(|| self.tier0.clone());
        let tier = executor.tier();
        let cwd = st.cwd.display().to_string();
        self.emitter.emit(Payload::CommandStarted(CommandStarted {
            command: script.to_string(),
            tier,
            cwd: cwd.clone(),
            step_key: step_key.map(str::to_string),
        }));
        if let Some(gate) = gate {
            gate.before_run().await?;
        }
        // A state handed in (a turn's start, a state.json an older version saved) may hold what
        // no command can start with: dropped here, and said on this command's stderr.
        let not_carried_in = state::bound(&mut st.env);
        // Higher tiers work on a copy; their changes come back at dispose.
        let tracker = self.tracker.as_ref().filter(|_| tier == 0);
        let before = tracker.map(|t| t.baseline());
        let started = Instant::now();
        let result = executor
            .execute(ExecRequest {
                script: state::wrap(script),
                cwd: st.cwd.clone(),
                env: st.env.clone(),
                timeout,
                output: output.clone(),
            })
            .await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let mut not_carried_out = Vec::new();
        let mut report_lost = false;
        match state::parse(&result.state) {
            Some((cwd, mut env)) => {
                // Carried only within bounds every later command can start with (issue 12: one
                // 140 KB export made every later command fail with E2BIG).
                not_carried_out = state::bound(&mut env);
                st.cwd = cwd;
                st.env = env;
            }
            // Nothing reported (the script ended in `exec`): the previous state, as documented.
            None if result.state.is_empty() => {}
            // A report cut at the tier's cap (exports of more than 256 KiB) or garbage the script
            // wrote to fd 3: the previous state is kept, and that is said.
            None => report_lost = true,
        }
        let mut untracked = Vec::new();
        if let (Some(tracker), Some(before)) = (tracker, before) {
            let after = tracker.snapshot();
            untracked = tracker.warnings(&before, &after);
            for change in tracker.changes(&before, &after) {
                if self.is_trace_payload(&change.harness_path) {
                    continue;
                }
                self.emitter
                    .emit(file_event(&change, tier, FileSource::Command));
            }
        }
        let figures = if tier == 0 {
            &mut st.tier0
        } else {
            &mut st.higher_figures
        };
        figures.commands = figures.commands.saturating_add(1);
        figures.duration_ms = figures.duration_ms.saturating_add(duration_ms);
        let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
        let mut stderr = String::new();
        for dropped in &not_carried_in {
            stderr.push_str(&dropped.note("this command"));
        }
        stderr.push_str(&String::from_utf8_lossy(&result.stderr));
        for dropped in &not_carried_out {
            stderr.push_str(&dropped.note("the next command"));
        }
        if report_lost {
            stderr.push_str(state::REPORT_LOST_NOTE);
        }
        let (stdout_inline, stdout_ref, stdout_truncated) = self.attach_output("stdout", &stdout);
        let (stderr_inline, stderr_ref, stderr_truncated) = self.attach_output("stderr", &stderr);
        self.emitter
            .emit(Payload::CommandCompleted(CommandCompleted {
                command: script.to_string(),
                tier,
                cwd,
                exit_code: result.exit_code,
                duration_ms,
                timed_out: result.timed_out,
                truncated: result.truncated(),
                step_key: step_key.map(str::to_string),
                // Bounded: a command can make any number of untrackable names.
                file_tracking_skipped: (!untracked.is_empty()).then(|| TrackingSkipped {
                    count: untracked.len() as u64,
                    first: untracked.iter().take(20).cloned().collect(),
                }),
                stdout: stdout_inline,
                stdout_ref,
                stdout_truncated,
                stderr: stderr_inline,
                stderr_ref,
                stderr_truncated,
            }));
        Ok(CommandOutcome {
            stdout,
            stderr,
            exit_code: result.exit_code,
            tier,
            timed_out: result.timed_out,
            truncated: result.truncated(),
        })
    }

    /// Small outputs ride inline; large ones are written once under `/artifacts/trace/` and
    /// referenced, so traces stay small and replayable. The reference carries the payload's
    /// length and SHA-256: commands can write `/artifacts`, so replay reads the file back only if
    /// it is still exactly what was recorded.
    ///
    /// Returns the event's `field`, `{field}Ref` and `{field}Truncated`.
    fn attach_output(&self, field: &str, text: &str) -> (Option<String>, Option<ContentRef>, bool) {
        if text.len() <= self.config.inline_output_limit {
            return (Some(text.to_string()), None, false);
        }
        // A `trace` a command replaced by a symlink or a file (or no writable /artifacts) gets
        // the output inline and truncated instead.
        let stored = crate::trace_file::create(&self.config.workspace, &format!("{field}.txt"))
            .ok()
            .and_then(|mut payload| {
                if std::io::Write::write_all(&mut payload.file, text.as_bytes()).is_err() {
                    payload.discard();
                    return None;
                }
                Some(payload.path)
            });
        match stored {
            Some(content_ref) => {
                let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()));
                let content_ref = ContentRef {
                    content_ref,
                    bytes: text.len() as u64,
                    sha256: Some(sha256),
                };
                (None, Some(content_ref), false)
            }
            None => {
                let mut end = self.config.inline_output_limit;
                while !text.is_char_boundary(end) {
                    end = end.saturating_sub(1);
                }
                (Some(text[..end].to_string()), None, true)
            }
        }
    }

    fn is_trace_payload(&self, path: &Path) -> bool {
        path.starts_with(Path::new(kube_harness_workspace::spec::ARTIFACTS).join("trace"))
    }
}

/// A refusal in the seed's shape: exit 126 and one `kube-harness:` stderr line.
fn refused_outcome(tier: u8, reason: &str) -> CommandOutcome {
    let fault = super::executor::fault(reason);
    CommandOutcome {
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&fault.stderr).into_owned(),
        exit_code: REFUSED_EXIT_CODE,
        tier,
        timed_out: false,
        truncated: false,
    }
}

/// What the classifier could not judge, for the refusal line of a fail-closed script: the
/// first dynamic command or opaque script (`: $x`), if one is named.
fn unjudged_what(classification: &classify::Classification) -> String {
    classification
        .reasons
        .iter()
        .find_map(|r| match r {
            classify::Reason::DynamicCommand { command, .. }
            | classify::Reason::OpaqueScript { command } => Some(format!(" on `{command}`")),
            _ => None,
        })
        .unwrap_or_default()
}
