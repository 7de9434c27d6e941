//! The session's skills across a real turn (the real Tier-0 sandbox) that escalates: through
//! `PodTier1` to a real agent (the tier API a stand-in), and to the local host's Tier-1. Both
//! show what Tier-0 shows at `/.agents`, read-only, from a copy of their own: a command there
//! never changes the session's skills and nothing of `/.agents` is merged back. A kept pod's
//! next turn shows that turn's skills only; skills over their limit refuse the escalation before
//! any pod is asked for.

use super::tier1_support::stand_in::{operator, pod_tier, Mode};
use super::tier1_support::{all_refused, turn_at, workspace_root, CHANGE_SKILLS};
use kube_harness_runtime::{event::kind, Collector, NextTier};
use kube_harness_tier1::LocalTier1;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A Tier-0 workspace root with the skill `.agents/review/SKILL.md` saying `content`.
fn root_with_skill(content: &str) -> tempfile::TempDir {
    let root = workspace_root();
    write_skill(root.path(), "review", content);
    root
}

fn write_skill(root: &Path, name: &str, content: &str) {
    std::fs::create_dir_all(root.join(".agents").join(name)).unwrap();
    std::fs::write(root.join(".agents").join(name).join("SKILL.md"), content).unwrap();
}

/// No file event of the turn names a path under /.agents.
fn no_skill_events(events: &Collector) {
    let touched: Vec<_> = events
        .events()
        .into_iter()
        .filter(|e| e.kind.starts_with("harness.file."))
        .filter(|e| {
            e.data["path"]
                .as_str()
                .unwrap_or("")
                .starts_with("/.agents")
        })
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
}

/// Escalates (git) in a turn over `root` with `next`, reads the skill, tries every change.
async fn read_and_attack(root: &Path, next: Arc<dyn NextTier>, events: Arc<Collector>) {
    let turn = turn_at(root, next, events.clone());
    let out = turn
        .exec(&format!(
            "git --version > /dev/null && {{\n{CHANGE_SKILLS}\n}}"
        ))
        .await;
    assert_eq!((out.exit_code, out.tier), (0, 1), "{}", out.stderr);
    // The local Tier-1 runs as root in its namespace; a pod's agent as 65532: refused alike.
    assert_eq!(out.stdout, all_refused("# Review\n"));
    turn.end().await;
    let disposed: Vec<_> = events
        .events()
        .into_iter()
        .filter(|e| e.kind == kind::DISPOSE_FAILED)
        .collect();
    assert!(disposed.is_empty(), "{disposed:?}");
    assert_eq!(
        std::fs::read_to_string(root.join(".agents/review/SKILL.md")).unwrap(),
        "# Review\n"
    );
    no_skill_events(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_turn_reads_the_sessions_skills_read_only_and_its_next_turn_gets_its_own() {
    let (op, url) = operator(Mode::Keep, false).await;
    let tier = pod_tier(&url, Duration::from_secs(30));
    let root = root_with_skill("# Review\n");
    let events = Arc::new(Collector::default());
    read_and_attack(root.path(), tier.clone(), events.clone()).await;

    // Between the turns the session's skills change: the kept pod shows the new ones only.
    write_skill(root.path(), "review", "# Review, v2\n");
    write_skill(root.path(), "lint", "# Lint\n");
    let turn = turn_at(root.path(), tier.clone(), events.clone());
    let out = turn
        .exec("git --version > /dev/null && cat /.agents/*/SKILL.md && ls -A /.agents")
        .await;
    assert_eq!(
        (out.stdout.as_str(), out.tier),
        ("# Lint\n# Review, v2\nlint\nreview\n", 1),
        "{}",
        out.stderr
    );
    turn.end().await;
    // And none once the session has none.
    std::fs::remove_dir_all(root.path().join(".agents")).unwrap();
    std::fs::create_dir(root.path().join(".agents")).unwrap();
    let turn = turn_at(root.path(), tier, events.clone());
    let out = turn
        .exec("git --version > /dev/null && ls -A /.agents | wc -l")
        .await;
    assert_eq!((out.stdout.trim(), out.tier), ("0", 1), "{}", out.stderr);
    turn.end().await;
    no_skill_events(&events);
    let book = op.book.lock().unwrap();
    assert_eq!((book.kept_turns.len(), book.agents.len()), (3, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_tier1_shows_a_copy_of_the_skills_read_only() {
    let root = root_with_skill("# Review\n");
    let events = Arc::new(Collector::default());
    read_and_attack(root.path(), Arc::new(LocalTier1::default()), events.clone()).await;
    // Its commands run as root: one that makes /.agents writable again in its own namespace
    // reaches only the copy it was shown, never the session's skills.
    let turn = turn_at(root.path(), Arc::new(LocalTier1::default()), events.clone());
    let out = turn
        .exec("git --version > /dev/null && mount -o remount,bind,rw /.agents && echo forged > /.agents/review/SKILL.md && cat /.agents/review/SKILL.md")
        .await;
    assert_eq!((out.exit_code, out.tier), (0, 1), "{}", out.stderr);
    assert_eq!(out.stdout, "forged\n");
    turn.end().await;
    assert_eq!(
        std::fs::read_to_string(root.path().join(".agents/review/SKILL.md")).unwrap(),
        "# Review\n"
    );
    no_skill_events(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_over_their_limit_refuse_the_escalation_before_any_pod_is_asked_for() {
    let (op, url) = operator(Mode::Ready, false).await;
    let root = root_with_skill("# Review\n");
    let big = std::fs::File::create(root.path().join(".agents/review/huge.md")).unwrap();
    big.set_len(kube_harness_tier1::skills::MAX_SKILLS_BYTES + 1)
        .unwrap();
    let turn = turn_at(
        root.path(),
        pod_tier(&url, Duration::from_secs(30)),
        Arc::new(Collector::default()),
    );
    let out = turn.exec("git status").await;
    assert_eq!((out.exit_code, out.tier), (126, 0), "{}", out.stderr);
    assert!(
        out.stderr.contains("packing the skills under /.agents"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("over the limit"), "{}", out.stderr);
    turn.end().await;
    assert_eq!(op.book.lock().unwrap().posts, 0);
}
