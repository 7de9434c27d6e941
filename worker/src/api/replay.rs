//! Replay: a step (runId + stepKey) that the session log shows as completed is answered from the
//! log, not run again; one that started and never completed is reported, never re-run.

use super::log::LogForwarder;
use super::model::ExecResponse;
use kube_harness_protocol::trace::{CommandCompleted, ContentRef};
use kube_harness_protocol::CommandOutcome;
use kube_harness_session_log_client::replay::{find_step, StepOutcome, COMMAND_STARTED};
use kube_harness_session_log_client::{ClientError, StoredEvent};
use kube_harness_workspace::WorkspaceSpec;
use serde_json::{Map, Value};
use std::path::Path;

/// What the worker does with a step.
#[derive(Debug)]
pub enum Replay {
    /// Completed before: here is the recorded result.
    Recorded(Box<ExecResponse>),
    /// Started, never completed, and not known to this process as "not run".
    Incomplete(StoredEvent),
    /// Safe to run.
    Run,
}

/// Looks the step up. The lookup is [`find_step`] over the events from the step's LAST start on,
/// so a command the runtime ran twice (the emulation-gap retry on a higher tier) answers with its
/// final result, and a step whose start this process refused to run (the log was down after the
/// start was committed) may run.
pub async fn lookup(
    log: &LogForwarder,
    spec: &WorkspaceSpec,
    run: &str,
    step_key: &str,
) -> Result<Replay, ClientError> {
    let events = log.client().read_all(run).await?;
    let last_start = events.iter().rposition(|e| {
        e.event_type == COMMAND_STARTED
            && e.payload.get("stepKey").and_then(Value::as_str) == Some(step_key)
    });
    let tail = &events[last_start.unwrap_or(0)..];
    Ok(match find_step(tail, step_key) {
        StepOutcome::Completed { completed, .. } => {
            Replay::Recorded(Box::new(recorded(&completed.payload, spec, run)))
        }
        StepOutcome::Incomplete { started } => {
            if log.was_not_run(run, &started.append_idempotency_key) {
                Replay::Run
            } else {
                Replay::Incomplete(started)
            }
        }
        StepOutcome::NotStarted => Replay::Run,
    })
}

/// Rebuilds the exec response from a `command.completed` payload. Output that was too large to
/// ride inline is read back from its `/artifacts/trace/…` file, and only if that file is still
/// what was recorded: its length, and its SHA-256 where the reference has one (commands can write
/// `/artifacts`, so a later command could have rewritten it). Otherwise the output is empty, the
/// response is `truncated`, and `replayProblems` says why. A record that is not a
/// `command.completed` of this version answers 126 with why, never a guess.
fn recorded(payload: &Map<String, Value>, spec: &WorkspaceSpec, run: &str) -> ExecResponse {
    let response = |outcome, replay_problems| ExecResponse {
        outcome,
        classification: None,
        events: Vec::new(),
        replayed: true,
        run_id: run.to_string(),
        log_pending: 0,
        replay_problems,
        stdout_file: None,
        stderr_file: None,
        output_problems: Vec::new(),
    };
    let done: CommandCompleted = match serde_json::from_value(Value::Object(payload.clone())) {
        Ok(done) => done,
        Err(e) => {
            let problem = format!("the recorded result could not be read: {e}");
            let outcome = CommandOutcome {
                stdout: String::new(),
                stderr: format!("kube-harness: {problem}\n"),
                exit_code: 126,
                tier: 0,
                timed_out: false,
                truncated: true,
            };
            return response(outcome, vec![problem]);
        }
    };
    let mut problems = Vec::new();
    let mut output = |field: &str,
                      inline: Option<String>,
                      cut: bool,
                      reference: Option<ContentRef>|
     -> (String, bool) {
        if let Some(text) = inline {
            return (text, cut);
        }
        let Some(ContentRef {
            content_ref,
            bytes,
            sha256,
        }) = reference
        else {
            problems.push(format!(
                "{field}: the recorded result has neither the output nor a reference to it"
            ));
            return (String::new(), true);
        };
        let Some(payload) = read_artifact(spec, &content_ref, bytes) else {
            // The payload file is gone: say so rather than pretend the output was empty.
            problems.push(format!(
                "{field}: the recorded output {content_ref} is missing or no longer the recorded size"
            ));
            return (String::new(), true);
        };
        if let Some(want) = sha256 {
            use sha2::Digest;
            let got = hex::encode(sha2::Sha256::digest(&payload));
            if !got.eq_ignore_ascii_case(&want) {
                problems.push(format!(
                    "{field}: the recorded output {content_ref} was changed after it was recorded (SHA-256 mismatch); not returned"
                ));
                return (String::new(), true);
            }
        }
        (String::from_utf8_lossy(&payload).into_owned(), false)
    };
    let (stdout, out_cut) = output(
        "stdout",
        done.stdout,
        done.stdout_truncated,
        done.stdout_ref,
    );
    let (stderr, err_cut) = output(
        "stderr",
        done.stderr,
        done.stderr_truncated,
        done.stderr_ref,
    );
    let outcome = CommandOutcome {
        stdout,
        stderr,
        exit_code: done.exit_code,
        tier: done.tier,
        timed_out: done.timed_out,
        truncated: done.truncated || out_cut || err_cut,
    };
    response(outcome, problems)
}

/// Reads a harness path (`/artifacts/trace/…`) through the mount table. Commands write that
/// mount: below its root nothing is followed through a symlink (`safe_fs`), only a regular file
/// is read, and at most the `bytes` the event recorded (a file of another size is not the
/// payload: `None`).
fn read_artifact(spec: &WorkspaceSpec, harness: &str, bytes: u64) -> Option<Vec<u8>> {
    use kube_harness_workspace::safe_fs;
    use std::io::Read;
    let harness = Path::new(harness);
    if harness.components().any(|c| {
        !matches!(
            c,
            std::path::Component::RootDir | std::path::Component::Normal(_)
        )
    }) {
        return None;
    }
    let mount = spec.mount_for(harness)?;
    let rel = harness.strip_prefix(&mount.harness_path).ok()?;
    let root = safe_fs::open_root(&mount.backing_path).ok()?;
    let file = safe_fs::open_regular_beneath(&root, rel).ok()?;
    let mut buf = Vec::new();
    file.take(bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .ok()?;
    if bytes != buf.len() as u64 {
        return None;
    }
    Some(buf)
}
