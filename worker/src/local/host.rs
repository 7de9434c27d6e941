//! One turn on the local host: lock the session, load its Persistent Dirs, run the script through
//! the tiered runtime over the Tier-0 sandbox, append the trace, commit by policy, and remember the
//! shell state (cwd, exported variables) for the session's next turn.

use super::data_dir::{io, DataDir, LocalError};
use super::lock::{SameSession, TurnGuard};
use super::persistent::{mirror, CommitPolicy, PersistentDir, Place};
use super::trace::FileTrace;
use kube_harness_classify::{ClassifyOptions, Policy, RuntimeToggles};
use kube_harness_runtime::{
    Collector, CommandOutcome, Emitter, NextTier, Tier0Executor, TraceEvent, Turn, TurnConfig,
    WorkspaceTracker,
};
use kube_harness_sandbox::{Presentation, SandboxConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Everything `kube-harness local exec` configures.
#[derive(Clone)]
pub struct LocalTurn {
    pub session: String,
    pub runtime: RuntimeToggles,
    pub deny: Vec<String>,
    pub same_session: SameSession,
    pub max_concurrent_sessions: Option<usize>,
    pub persistent_dirs: Vec<PersistentDir>,
    pub project_root: PathBuf,
    pub next_tier: Option<Arc<dyn NextTier>>,
}

/// What a turn returns to the caller.
pub struct TurnResult {
    pub outcome: CommandOutcome,
    pub events: Vec<TraceEvent>,
    pub turn_id: String,
}

/// The session's shell state between turns (`state.json`).
#[derive(Debug, Default, Serialize, Deserialize)]
struct ShellState {
    cwd: Option<PathBuf>,
    env: BTreeMap<String, String>,
}

/// Runs one script as one turn. Errors are setup errors (bad session id, path rules, a busy
/// session with `reject`, a host without the sandbox's kernel features); once the command starts,
/// every fault is in the outcome.
pub async fn run_turn(
    data: &DataDir,
    turn: &LocalTurn,
    script: &str,
) -> Result<TurnResult, LocalError> {
    // Path rules first: a bad Persistent Dir writes nothing, not even the session's folder.
    for d in &turn.persistent_dirs {
        d.resolve(data.root(), &turn.project_root)?;
    }
    let session = data.session(&turn.session)?;
    let _guard = TurnGuard::acquire(
        data.root(),
        &session,
        turn.same_session,
        turn.max_concurrent_sessions,
    )?;
    let mut read_only = Vec::new();
    // Resolved again under the lock: another session's commit may have changed a source's path.
    let sources: Vec<(PersistentDir, Place)> = turn
        .persistent_dirs
        .iter()
        .map(|d| {
            d.resolve(data.root(), &turn.project_root)
                .map(|src| (d.clone(), src))
        })
        .collect::<Result<_, _>>()?;
    for (dir, source) in &sources {
        mirror(source, &dir.checkout_place(&session))?;
        if dir.commit == CommitPolicy::ReadOnly {
            read_only.push(dir.harness_dir.clone());
        }
    }
    let spec = session.workspace(turn.runtime, read_only);
    let tier0 = Tier0Executor::new(
        SandboxConfig::new(spec.clone(), Presentation::Namespace).with_denied(&turn.deny),
    )
    .map_err(|e| LocalError::Sandbox(e.to_string()))?;
    let state_path = session.root.join("state.json");
    let state: ShellState = std::fs::read(&state_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let turn_id = turn_id();
    let trace = FileTrace::open(&session.trace_path())
        .map_err(io(format!("opening {}", session.trace_path().display())))?;
    let collector = Arc::new(Collector::default());
    let emitter = Emitter::new(
        &session.id,
        &turn_id,
        vec![Arc::new(trace), collector.clone()],
    );
    let runtime = Turn::new(
        TurnConfig {
            workspace: spec.clone(),
            classify: ClassifyOptions {
                runtime: turn.runtime,
                policy: Policy {
                    deny_commands: turn.deny.clone(),
                    rule: None,
                },
                matrix: None,
            },
            inline_output_limit: 16 * 1024,
        },
        emitter,
        Arc::new(tier0),
        turn.next_tier.clone(),
        Some(Arc::new(WorkspaceTracker::new(spec))),
        state.cwd.unwrap_or_else(|| PathBuf::from("/session")),
        // Saved by an older version, the state may still hold start-up code variables.
        state
            .env
            .into_iter()
            .filter(|(k, _)| kube_harness_runtime::state::carried(k))
            .collect(),
    );
    let outcome = runtime.exec(script).await;
    let (cwd, env) = runtime.shell_state().await;
    runtime.end().await;
    for dir in &turn.persistent_dirs {
        match dir.commit {
            CommitPolicy::ReadOnly => {}
            CommitPolicy::AfterTurn => {
                // Under the same rules as the load, resolved again: this turn's earlier commits
                // (or another session's) may have put a symlink on the source's path.
                let source = dir.resolve(data.root(), &turn.project_root)?;
                mirror(&dir.checkout_place(&session), &source)?
            }
            CommitPolicy::Manual => mirror(
                &dir.checkout_place(&session),
                &dir.pending_place(&session, &turn_id),
            )?,
        }
    }
    let saved = serde_json::to_vec_pretty(&ShellState {
        cwd: Some(cwd),
        env,
    })
    .expect("state serializes");
    std::fs::write(&state_path, saved).map_err(io(format!("writing {}", state_path.display())))?;
    Ok(TurnResult {
        outcome,
        events: collector.events(),
        turn_id,
    })
}

/// Commits a `manual` Persistent Dir as it was at the end of `turn_id`.
pub fn commit_manual(
    data: &DataDir,
    session_id: &str,
    turn_id: &str,
    dir: &PersistentDir,
    project_root: &Path,
) -> Result<(), LocalError> {
    let session = data.existing_session(session_id)?;
    // A turn id names a directory under manual-commits/: a plain name, as the host makes them.
    let plain = !turn_id.is_empty()
        && turn_id.len() <= 128
        && turn_id != "."
        && turn_id != ".."
        && turn_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !plain {
        return Err(LocalError::Path(format!(
            "turn {turn_id:?} is not a turn id (1-128 of [A-Za-z0-9_.-])"
        )));
    }
    let source = dir.resolve(data.root(), project_root)?;
    let pending = dir.pending_place(&session, turn_id);
    if !pending.path().is_dir() {
        return Err(LocalError::Path(format!(
            "no manual commit of {} for turn {turn_id:?} in session {session_id:?}",
            dir.harness_dir.display()
        )));
    }
    mirror(&pending, &source)
}

/// Sortable and unique enough for one machine: time in microseconds and the process id.
fn turn_id() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!("turn_{micros}_{}", std::process::id())
}
