//! `PodTier1` end to end: a real turn (the real Tier-0 sandbox) escalates to a real Tier-1 agent
//! process over loopback. The operator's tier API is a small stand-in here (the client is what
//! is under test; the real operator is tested on the cluster): it starts an agent process per
//! sandbox, answers Pending then Ready (or Failed, 503, never Ready), and kills the agent on
//! DELETE, as deleting the pod would.

use super::tier1_support::stand_in::{operator, pod_tier, Mode};
use super::tier1_support::{turn_at, turn_with, TurnFixture};
use kube_harness_runtime::{event::kind, CommandOutcome, TraceEvent};
use serde_json::json;
use std::time::{Duration, Instant};

/// A turn whose pod tier (operator at `url`, `provision` deadline) refuses `git status`: 126, on
/// Tier-0. Returns the turn, the outcome and how long the refusal took.
async fn refused_git(url: &str, provision: Duration) -> (TurnFixture, CommandOutcome, Duration) {
    let f = turn_with(pod_tier(url, provision));
    let started = Instant::now();
    let out = f.turn.exec("git status").await;
    assert_eq!((out.exit_code, out.tier), (126, 0), "{}", out.stderr);
    (f, out, started.elapsed())
}

fn of(events: &[TraceEvent], k: &str) -> Vec<TraceEvent> {
    events.iter().filter(|e| e.kind == k).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_escalates_to_a_pod_and_the_repository_is_merged_back() {
    assert!(
        std::process::Command::new("git")
            .arg("--version")
            .output()
            .is_ok(),
        "git must be installed for this test (apt-get install -y git)"
    );
    let (op, url) = operator(Mode::Ready, true).await;
    let f = turn_with(pod_tier(&url, Duration::from_secs(30)));
    let out = f.turn.exec("echo seed > /session/seed.txt").await;
    assert_eq!((out.tier, out.exit_code), (0, 0), "{}", out.stderr);
    let out = f
        .turn
        .exec("git init -q r && cd r && echo x > f && git add f && git -c user.name=a -c user.email=a@b commit -qm m && git log --oneline | wc -l")
        .await;
    assert_eq!(
        (out.stdout.trim(), out.exit_code, out.tier),
        ("1", 0, 1),
        "{}",
        out.stderr
    );
    let out = f
        .turn
        .exec("pwd && cat ../seed.txt && export LATER=1")
        .await;
    assert_eq!(
        (out.stdout.as_str(), out.tier),
        ("/session/r\nseed\n", 1),
        "cwd crossed to the pod; sticky"
    );
    assert!(
        !f.root.join("session/r").exists(),
        "the pod works on its own copy until the end"
    );
    let agent_pids = op.agent_pids();
    let usage = f.turn.end().await;

    assert!(f.root.join("session/r/.git/HEAD").is_file(), "merged back");
    assert_eq!(
        std::fs::read_to_string(f.root.join("session/r/f")).unwrap(),
        "x\n"
    );
    let events = f.events.events();
    let escalated = of(&events, kind::TIER_ESCALATED);
    assert_eq!(escalated.len(), 1);
    assert_eq!(
        escalated[0].data["sandbox"],
        json!({"source": "ordinary", "missReason": "stock_empty", "pod": escalated[0].data["sandbox"]["pod"]})
    );
    assert!(escalated[0].data["sandbox"]["pod"]
        .as_str()
        .unwrap()
        .starts_with("t1-"));
    let escalated_at = events
        .iter()
        .position(|e| e.kind == kind::TIER_ESCALATED)
        .unwrap();
    let first_tier1 = events
        .iter()
        .position(|e| e.kind == kind::COMMAND_STARTED && e.data["tier"] == 1)
        .unwrap();
    assert!(
        escalated_at < first_tier1,
        "the sandbox's source is reported before its first command"
    );
    let merged: Vec<_> = of(&events, kind::FILE_CREATED)
        .into_iter()
        .filter(|e| e.data["source"] == "merge")
        .collect();
    assert!(
        merged
            .iter()
            .any(|e| e.data["path"] == "/session/r/.git/HEAD"),
        "{merged:?}"
    );
    let last_file = events
        .iter()
        .rposition(|e| e.kind.starts_with("harness.file."))
        .unwrap();
    let usage_at = events
        .iter()
        .position(|e| e.kind == kind::TURN_USAGE)
        .unwrap();
    assert!(last_file < usage_at);
    assert!(
        of(&events, kind::DISPOSE_FAILED).is_empty(),
        "{:?}",
        of(&events, kind::DISPOSE_FAILED)
    );

    let higher = &usage["higherTier"];
    assert_eq!(higher["provider"], "pod");
    assert_eq!(higher["source"], "ordinary");
    assert_eq!(higher["missReason"], "stock_empty");
    assert_eq!(higher["commands"], 2);
    assert!(higher["bytesHandedOver"].as_u64().unwrap() > 0);
    assert!(higher["bytesReturned"].as_u64().unwrap() > 0);
    assert!(higher["podMs"].as_u64().unwrap() >= higher["provisionMs"].as_u64().unwrap());
    let book = op.book.lock().unwrap();
    assert_eq!(book.posts, 2, "the 500 was retried once");
    assert_eq!(
        book.workspace_bytes[1],
        higher["bytesHandedOver"].as_u64().unwrap()
    );
    assert_eq!(book.deleted.len(), 1, "the sandbox was ended");
    assert!(book.agents.is_empty());
    drop(book);
    for pid in agent_pids {
        assert!(super::tier1_support::process_gone(pid as i32));
    }
}

/// Issue 29, 6d, through a pod: the agent leaves a symlink that points out of the workspace out
/// of its change archive, and the worker's merge reports it (`harness.runtime.dispose.failed`,
/// naming the link and its target) instead of dropping it silently. Failed before the fix: no
/// event, and nothing anywhere said the link was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_out_of_the_workspace_is_left_out_of_the_merge_and_reported() {
    let (_op, url) = operator(Mode::Ready, true).await;
    let f = turn_with(pod_tier(&url, Duration::from_secs(30)));
    let out = f
        .turn
        .exec("git --version > /dev/null; ln -s /etc/shadow /session/sh; echo in > /session/in.txt")
        .await;
    assert_eq!((out.tier, out.exit_code), (1, 0), "{}", out.stderr);
    f.turn.end().await;
    let events = f.events.events();
    let failed: Vec<String> = of(&events, kind::DISPOSE_FAILED)
        .iter()
        .map(|e| e.data["error"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].contains("/session/sh") && failed[0].contains("/etc/shadow"),
        "{failed:?}"
    );
    assert!(std::fs::symlink_metadata(f.root.join("session/sh")).is_err());
    assert_eq!(
        std::fs::read_to_string(f.root.join("session/in.txt")).unwrap(),
        "in\n",
        "the rest is merged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_killed_mid_command_is_126_and_the_turn_still_ends_cleanly() {
    let (op, url) = operator(Mode::Ready, false).await;
    let f = turn_with(pod_tier(&url, Duration::from_secs(30)));
    std::fs::write(f.root.join("session/keep.txt"), "keep\n").unwrap();
    let started = Instant::now();
    let killer = {
        let op = op.clone();
        async move {
            // Wait for the command to be running on the pod, then kill the agent.
            while op.agent_pids().is_empty() || started.elapsed() < Duration::from_secs(1) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
            op.kill_agents();
        }
    };
    let (out, ()) = tokio::join!(
        f.turn
            .exec("git --version > /dev/null && touch /session/on-pod && sleep 15"),
        killer
    );
    assert_eq!((out.exit_code, out.tier), (126, 1), "{}", out.stderr);
    assert!(
        out.stderr.starts_with("kube-harness: the Tier-1 pod t1-"),
        "{}",
        out.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // Later commands of the turn are refused at once, not sent to a dead address.
    let quick = Instant::now();
    let out = f.turn.exec("echo more").await;
    assert_eq!((out.exit_code, out.tier), (126, 1), "{}", out.stderr);
    assert!(quick.elapsed() < Duration::from_secs(2));
    let usage = f.turn.end().await;
    let failed = of(&f.events.events(), kind::DISPOSE_FAILED);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].data["error"]
        .as_str()
        .unwrap()
        .contains("nothing was merged back"));
    assert_eq!(usage["higherTier"]["provider"], "pod");
    assert_eq!(
        op.deleted().len(),
        1,
        "the sandbox is ended even though the pod died"
    );
    assert_eq!(
        std::fs::read_to_string(f.root.join("session/keep.txt")).unwrap(),
        "keep\n"
    );
    assert!(!f.root.join("session/on-pod").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sandbox_is_126_with_the_operators_reason_and_tier0_goes_on() {
    let (op, url) = operator(Mode::Failed, false).await;
    let (f, out, _) = refused_git(&url, Duration::from_secs(30)).await;
    assert!(out.stderr.starts_with("kube-harness: "), "{}", out.stderr);
    assert!(out.stderr.contains("Unschedulable"), "{}", out.stderr);
    assert!(
        out.stderr.contains("0/3 nodes are available"),
        "{}",
        out.stderr
    );
    assert_eq!(op.deleted().len(), 1, "a failed sandbox is ended");
    let out = f.turn.exec("echo still-here").await;
    assert_eq!((out.stdout.as_str(), out.tier), ("still-here\n", 0));
    let usage = f.turn.end().await;
    assert_eq!(usage["stayedOnTier0"], true);
    assert_eq!(usage["refusals"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncertain_claim_is_refused_not_guessed() {
    let (op, url) = operator(Mode::Uncertain, false).await;
    let (_f, out, took) = refused_git(&url, Duration::from_secs(30)).await;
    assert!(out.stderr.contains("503"), "{}", out.stderr);
    assert!(took < Duration::from_secs(10), "no retrying a 503");
    assert_eq!(op.book.lock().unwrap().posts, 1);
    assert_eq!(op.deleted().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_never_ready_is_refused_at_the_deadline() {
    let (op, url) = operator(Mode::NeverReady, false).await;
    let (_f, out, took) = refused_git(&url, Duration::from_secs(1)).await;
    assert!(out.stderr.contains("not ready within 1s"), "{}", out.stderr);
    assert!(took < Duration::from_secs(5), "{:?}", took);
    assert_eq!(op.deleted().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_that_is_not_there_is_retried_until_the_deadline() {
    // A port nothing listens on: connection refused at every attempt. Not a port freed here:
    // another test of this binary binding 127.0.0.1:0 meanwhile could get it (and did: this
    // test's worker then opened sandboxes on the stand-in of an_uncertain_claim…).
    let url = "http://127.0.0.1:1".to_string();
    let (_f, out, took) = refused_git(&url, Duration::from_secs(1)).await;
    assert!(out.stderr.contains("not ready within 1s"), "{}", out.stderr);
    assert!(
        out.stderr.contains("ending the sandbox also failed"),
        "{}",
        out.stderr
    );
    assert!(took < Duration::from_secs(10), "{:?}", took);
}

/// A pod kept for the session's next turn (the operator answers `reused`): the next turn binds
/// its own workspace over the last one on the same agent (`?replace=true`), so what Tier-0 deleted
/// between the turns is not there, and what the turn changes merges back as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_pods_next_turn_binds_its_own_workspace_over_the_last() {
    let (op, url) = operator(Mode::Keep, false).await;
    let tier = pod_tier(&url, Duration::from_secs(30));
    let f = turn_with(tier.clone());
    let out = f.turn.exec("git init -q r && echo one > r/f").await;
    assert_eq!((out.exit_code, out.tier), (0, 1), "{}", out.stderr);
    f.turn.end().await;
    assert!(f.root.join("session/r/f").is_file(), "merged back");
    let next = turn_at(&f.root, tier.clone(), f.events.clone());
    let out = next.exec("rm r/f && echo two > r/g").await;
    assert_eq!((out.exit_code, out.tier), (0, 0), "{}", out.stderr);
    next.end().await;
    let last = turn_at(&f.root, tier, f.events.clone());
    let out = last
        .exec("git -C r status --porcelain && echo three > r/h")
        .await;
    assert_eq!(
        (out.stdout.as_str(), out.exit_code, out.tier),
        ("?? g\n", 0, 1),
        "the kept agent holds this turn's workspace only: {}",
        out.stderr
    );
    last.end().await;
    assert_eq!(
        std::fs::read_to_string(f.root.join("session/r/h")).unwrap(),
        "three\n"
    );
    assert!(!f.root.join("session/r/f").exists());
    let events = f.events.events();
    let escalated = of(&events, kind::TIER_ESCALATED);
    assert_eq!(escalated.len(), 2);
    assert!(escalated[0].data["sandbox"].get("reused").is_none());
    assert_eq!(escalated[1].data["sandbox"]["reused"], true);
    assert!(
        of(&events, kind::DISPOSE_FAILED).is_empty(),
        "{:?}",
        of(&events, kind::DISPOSE_FAILED)
    );
    let book = op.book.lock().unwrap();
    assert_eq!((book.kept_turns.len(), book.agents.len()), (2, 1));
}
