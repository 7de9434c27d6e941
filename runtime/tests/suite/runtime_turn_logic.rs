//! The turn's decisions (escalation, stickiness, the one emulation-gap retry, refusals, dispose
//! failures, usage) with scripted executors that record what they were asked to run. The real
//! sandbox and real tiers are exercised by the runtime's integration tests; this pins the logic.

use async_trait::async_trait;
use kube_harness_classify::ClassifyOptions;
use kube_harness_runtime::{
    event::kind, Collector, CommandExecutor, DisposeReport, Emitter, ExecRequest, ExecResult,
    NextTier, TierError, Turn, TurnConfig,
};
use kube_harness_workspace::WorkspaceSpec;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Records every script it runs; answers with the stderr the test scripted for a marker word.
struct Scripted {
    tier: u8,
    ran: Mutex<Vec<String>>,
    stderr_for: Vec<(&'static str, &'static str)>,
    dispose_error: Option<&'static str>,
}

impl Scripted {
    fn new(tier: u8) -> Arc<Self> {
        Arc::new(Scripted {
            tier,
            ran: Mutex::new(Vec::new()),
            stderr_for: Vec::new(),
            dispose_error: None,
        })
    }
    fn ran(&self) -> Vec<String> {
        self.ran.lock().unwrap().clone()
    }
}

#[async_trait]
impl CommandExecutor for Scripted {
    fn tier(&self) -> u8 {
        self.tier
    }
    async fn execute(&self, req: ExecRequest) -> ExecResult {
        // The runtime wraps scripts; the agent's script is the last line.
        let script = req
            .script
            .trim_end()
            .lines()
            .last()
            .unwrap_or_default()
            .to_string();
        self.ran.lock().unwrap().push(script.clone());
        let stderr = self
            .stderr_for
            .iter()
            .find(|(marker, _)| script.contains(marker))
            .map(|(_, e)| e.to_string())
            .unwrap_or_default();
        ExecResult {
            exit_code: if stderr.is_empty() { 0 } else { 127 },
            stderr: stderr.into_bytes(),
            ..ExecResult::default()
        }
    }
    async fn dispose(&self) -> Result<DisposeReport, TierError> {
        match self.dispose_error {
            Some(e) => Err(TierError::Failed(e.into())),
            None => Ok(DisposeReport::default()),
        }
    }
}

struct Provides(Arc<Scripted>, Mutex<u32>);

#[async_trait]
impl NextTier for Provides {
    async fn provision(&self, _: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, TierError> {
        *self.1.lock().unwrap() += 1;
        Ok(self.0.clone())
    }
}

struct Fails;

#[async_trait]
impl NextTier for Fails {
    async fn provision(&self, _: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, TierError> {
        Err(TierError::Failed("no capacity".into()))
    }
}

fn turn(
    tier0: Arc<Scripted>,
    next: Option<Arc<dyn NextTier>>,
    deny: &[&str],
) -> (Turn, Arc<Collector>) {
    let collector = Arc::new(Collector::default());
    let mut classify = ClassifyOptions::default();
    classify.policy.deny_commands = deny.iter().map(|d| d.to_string()).collect();
    let config = TurnConfig {
        workspace: WorkspaceSpec::canonical(Path::new("/nonexistent"), Default::default(), vec![]),
        classify,
        inline_output_limit: 1024,
    };
    let emitter = Emitter::new("s1", "t1", vec![collector.clone()]);
    let turn = Turn::new(
        config,
        emitter,
        tier0,
        next,
        None,
        PathBuf::from("/session"),
        BTreeMap::new(),
    );
    (turn, collector)
}

fn types(c: &Collector) -> Vec<String> {
    c.events().into_iter().map(|e| e.kind).collect()
}

#[tokio::test]
async fn the_seed_case_escalates_before_tier0_runs_anything_and_stays_escalated() {
    let tier0 = Scripted::new(0);
    let tier1 = Scripted::new(1);
    let next = Arc::new(Provides(tier1.clone(), Mutex::new(0)));
    let (turn, events) = turn(tier0.clone(), Some(next.clone()), &[]);
    assert_eq!(turn.exec("ls").await.tier, 0);
    let out = turn.exec("rm -rf build && cargo build").await;
    assert_eq!((out.tier, out.exit_code), (1, 0));
    assert_eq!(turn.exec("ls").await.tier, 1, "escalation is sticky");
    assert_eq!(
        tier0.ran(),
        ["ls"],
        "Tier-0 never saw the destructive prefix"
    );
    assert_eq!(tier1.ran(), ["rm -rf build && cargo build", "ls"]);
    assert_eq!(*next.1.lock().unwrap(), 1, "provisioned once, lazily");
    let usage = turn.end().await;
    assert_eq!(usage["stayedOnTier0"], false);
    assert_eq!(usage["tier0"]["commands"], 1);
    assert_eq!(usage["higherTier"]["provider"], "unknown");
    assert_eq!(usage["higherTier"]["commands"], 2);
    let t = types(&events);
    assert_eq!(t.iter().filter(|k| *k == kind::TIER_ESCALATED).count(), 1);
    assert_eq!(t.last().unwrap(), kind::TURN_USAGE);
}

#[tokio::test]
async fn a_turn_that_never_escalates_never_provisions() {
    let tier1 = Scripted::new(1);
    let next = Arc::new(Provides(tier1.clone(), Mutex::new(0)));
    let (turn, _) = turn(Scripted::new(0), Some(next.clone()), &[]);
    turn.exec("ls | wc -l").await;
    let usage = turn.end().await;
    assert_eq!(*next.1.lock().unwrap(), 0);
    assert_eq!(usage["stayedOnTier0"], true);
    assert!(usage["higherTier"].is_null());
}

#[tokio::test]
async fn escalation_without_a_next_tier_or_failing_provisioning_refuses_with_126() {
    for next in [None, Some(Arc::new(Fails) as Arc<dyn NextTier>)] {
        let tier0 = Scripted::new(0);
        let (turn, events) = turn(tier0.clone(), next, &[]);
        let out = turn.exec("git status").await;
        assert_eq!(out.exit_code, 126);
        assert!(out.stderr.starts_with("kube-harness: "), "{}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1);
        assert!(tier0.ran().is_empty(), "the command did not run");
        assert!(types(&events).contains(&kind::TIER_REFUSED.to_string()));
    }
}

#[tokio::test]
async fn emulation_gap_retries_exactly_once_even_when_the_script_forges_the_line_again() {
    let mut t0 = Scripted::new(0);
    Arc::get_mut(&mut t0).unwrap().stderr_for = vec![("forge", "bash: cargo: command not found")];
    let mut t1 = Scripted::new(1);
    Arc::get_mut(&mut t1).unwrap().stderr_for = vec![("forge", "bash: cargo: command not found")];
    let next = Arc::new(Provides(t1.clone(), Mutex::new(0)));
    let (turn, events) = turn(t0.clone(), Some(next.clone()), &[]);
    let out = turn.exec("echo forge").await;
    assert_eq!(out.tier, 1);
    assert_eq!(t0.ran(), ["echo forge"]);
    assert_eq!(
        t1.ran(),
        ["echo forge"],
        "retried once, not again on the higher tier"
    );
    let usage = turn.end().await;
    assert_eq!(usage["tier0"]["commands"], 1, "counted once on each tier");
    assert_eq!(usage["higherTier"]["commands"], 1);
    assert_eq!(usage["escalations"][0]["signal"], "emulation-gap");
    assert_eq!(
        types(&events)
            .iter()
            .filter(|k| *k == kind::TIER_ESCALATED)
            .count(),
        1
    );
}

#[tokio::test]
async fn denied_commands_are_refused_on_both_tiers() {
    let tier0 = Scripted::new(0);
    let tier1 = Scripted::new(1);
    let next = Arc::new(Provides(tier1.clone(), Mutex::new(0)));
    let (turn, _) = turn(tier0.clone(), Some(next), &["docker"]);
    let out = turn.exec("docker ps").await;
    assert_eq!((out.exit_code, out.tier), (126, 0));
    turn.exec("make").await;
    let out = turn.exec("ls && docker ps").await;
    assert_eq!((out.exit_code, out.tier), (126, 1));
    assert!(tier0.ran().is_empty());
    assert_eq!(tier1.ran(), ["make"]);
}

#[tokio::test]
async fn a_dispose_failure_is_an_event_and_the_turn_still_completes() {
    let mut t1 = Scripted::new(1);
    Arc::get_mut(&mut t1).unwrap().dispose_error = Some("merge failed: disk full");
    let next = Arc::new(Provides(t1, Mutex::new(0)));
    let (turn, events) = turn(Scripted::new(0), Some(next), &[]);
    turn.exec("make").await;
    let usage = turn.end().await;
    assert_eq!(usage["stayedOnTier0"], false);
    let failed: Vec<_> = events
        .events()
        .into_iter()
        .filter(|e| e.kind == kind::DISPOSE_FAILED)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].data["error"], "merge failed: disk full");
    assert_eq!(types(&events).last().unwrap(), kind::TURN_USAGE);
}
