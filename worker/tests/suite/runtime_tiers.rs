//! Both tiers for real: the Tier-0 sandbox and the local Tier-1 (host toolchain in a mount
//! namespace), with the workspace handed over and merged back.

use super::runtime_support::{fixture, Setup};
use kube_harness_runtime::{event::kind, TraceEvent};
use std::collections::BTreeSet;

fn tiered() -> Setup {
    Setup {
        tier1: true,
        ..Setup::default()
    }
}

fn of(events: &[TraceEvent], k: &str) -> Vec<TraceEvent> {
    events.iter().filter(|e| e.kind == k).cloned().collect()
}

#[tokio::test]
async fn git_escalates_runs_on_tier1_and_the_repository_is_merged_back() {
    let f = fixture(tiered());
    let out = f.turn.exec("echo seed > /session/seed.txt").await;
    assert_eq!(out.tier, 0);
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
    let out = f.turn.exec("pwd && cat ../seed.txt").await;
    assert_eq!(
        (out.stdout.as_str(), out.tier),
        ("/session/r\nseed\n", 1),
        "cwd crossed the switch; sticky"
    );
    assert!(
        !f.session_root.join("session/r").exists(),
        "Tier-1 works on a copy until the turn ends"
    );
    let usage = f.turn.end().await;
    assert!(
        f.session_root.join("session/r/.git/HEAD").is_file(),
        "merged back"
    );
    assert_eq!(
        std::fs::read_to_string(f.session_root.join("session/r/f")).unwrap(),
        "x\n"
    );
    let events = f.events.events();
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
    assert_eq!(usage["stayedOnTier0"], false);
    assert_eq!(usage["higherTier"]["provider"], "local-host");
    assert_eq!(usage["higherTier"]["commands"], 2);
    assert!(usage["higherTier"]["bytesHandedOver"].as_u64().unwrap() > 0);
    assert!(usage["higherTier"]["bytesReturned"].as_u64().unwrap() > 0);
    // The usage event comes after the merge's file events.
    let last_file = events
        .iter()
        .rposition(|e| e.kind == kind::FILE_CREATED)
        .unwrap();
    let usage_at = events
        .iter()
        .position(|e| e.kind == kind::TURN_USAGE)
        .unwrap();
    assert!(last_file < usage_at);
}

#[tokio::test]
async fn both_tiers_emit_command_events_of_the_same_shape() {
    let f = fixture(tiered());
    f.turn.exec("echo one").await;
    f.turn.exec("make --version > /dev/null; echo two").await;
    let events = f.events.events();
    for k in [kind::COMMAND_STARTED, kind::COMMAND_COMPLETED] {
        let shapes: BTreeSet<Vec<String>> = of(&events, k)
            .iter()
            .map(|e| e.data.as_object().unwrap().keys().cloned().collect())
            .collect();
        let tiers: BTreeSet<u64> = of(&events, k)
            .iter()
            .map(|e| e.data["tier"].as_u64().unwrap())
            .collect();
        assert_eq!(tiers, BTreeSet::from([0, 1]));
        assert_eq!(shapes.len(), 1, "{k}: {shapes:?}");
    }
}

#[tokio::test]
async fn the_seed_case_leaves_build_intact_on_tier0_and_runs_on_tier1() {
    let f = fixture(tiered());
    f.turn
        .exec("mkdir -p /session/build && echo keep > /session/build/keep")
        .await;
    let out = f.turn.exec("rm -rf build && cargo build").await;
    assert_eq!(out.tier, 1);
    assert!(
        out.stderr.contains("Cargo.toml"),
        "cargo ran on Tier-1: {}",
        out.stderr
    );
    assert!(
        f.session_root.join("session/build/keep").exists(),
        "Tier-0 never ran the rm"
    );
    f.turn.end().await;
    assert!(
        !f.session_root.join("session/build").exists(),
        "Tier-1's rm is merged back at the end"
    );
    let deleted = of(&f.events.events(), kind::FILE_DELETED);
    assert!(deleted
        .iter()
        .any(|e| e.data["path"] == "/session/build/keep"));
}

#[tokio::test]
async fn a_forged_emulation_gap_escalates_and_retries_exactly_once() {
    let f = fixture(tiered());
    let forge = "echo run >> /session/runs.txt; echo 'bash: cargo: command not found' >&2";
    let out = f.turn.exec(forge).await;
    assert_eq!(out.tier, 1);
    assert!(
        out.stderr.contains("command not found"),
        "the forged line again, not retried again"
    );
    let usage = f.turn.end().await;
    assert_eq!(usage["tier0"]["commands"], 1);
    assert_eq!(usage["higherTier"]["commands"], 1);
    assert_eq!(usage["escalations"].as_array().unwrap().len(), 1);
    assert_eq!(usage["escalations"][0]["signal"], "emulation-gap");
    // Once on Tier-0 (kept in the worker's tree) and once on Tier-1 (merged back over it).
    let runs = std::fs::read_to_string(f.session_root.join("session/runs.txt")).unwrap();
    assert_eq!(runs, "run\nrun\n");
}

#[tokio::test]
async fn a_merge_that_must_reject_changes_is_a_dispose_failure_and_the_turn_still_completes() {
    let f = fixture(Setup {
        read_only: vec!["/persistent/company"],
        ..tiered()
    });
    // Tier-1 has no landlock: it can write the copy of a read-only prefix; the merge refuses it.
    let out = f.turn.exec("make --version > /dev/null; echo changed > /persistent/company/kb.md; echo ok > /session/ok.txt").await;
    assert_eq!((out.tier, out.exit_code), (1, 0), "{}", out.stderr);
    let usage = f.turn.end().await;
    let failed = of(&f.events.events(), kind::DISPOSE_FAILED);
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].data["error"]
            .as_str()
            .unwrap()
            .contains("merge rejected /persistent/company/kb.md"),
        "{failed:?}"
    );
    assert_eq!(
        std::fs::read_to_string(f.session_root.join("persistent/company/kb.md")).unwrap(),
        "kb\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.session_root.join("session/ok.txt")).unwrap(),
        "ok\n",
        "the rest is merged"
    );
    assert!(of(&f.events.events(), kind::FILE_CREATED)
        .iter()
        .any(|e| e.data["path"] == "/session/ok.txt"));
    assert_eq!(
        usage["stayedOnTier0"], false,
        "the usage event is still emitted"
    );
}

/// Issue 29, 6d: symlinks a Tier-1 command made that point out of the workspace are not merged
/// back, and the turn says so: one `harness.runtime.dispose.failed` each, naming the link and its
/// target, beside the merged file events. Failed before the fix: they vanished without an event.
#[tokio::test]
async fn symlinks_out_of_the_workspace_are_left_out_of_the_merge_and_reported() {
    let f = fixture(tiered());
    let out = f
        .turn
        .exec("make --version > /dev/null; ln -s /etc/passwd /session/pw; ln -s ../../../.. /session/up; echo ok > /session/ok.txt; ln -s ok.txt /session/in")
        .await;
    assert_eq!((out.tier, out.exit_code), (1, 0), "{}", out.stderr);
    f.turn.end().await;
    let failed: Vec<String> = of(&f.events.events(), kind::DISPOSE_FAILED)
        .iter()
        .map(|e| e.data["error"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    for (link, target) in [
        ("/session/pw", "/etc/passwd"),
        ("/session/up", "../../../.."),
    ] {
        assert!(
            failed
                .iter()
                .any(|e| e.contains(link) && e.contains(target)),
            "{link} not reported: {failed:?}"
        );
    }
    assert!(std::fs::symlink_metadata(f.session_root.join("session/pw")).is_err());
    assert!(std::fs::symlink_metadata(f.session_root.join("session/up")).is_err());
    assert_eq!(
        std::fs::read_link(f.session_root.join("session/in")).unwrap(),
        std::path::Path::new("ok.txt"),
        "a link inside is merged"
    );
}

#[tokio::test]
async fn denied_commands_are_refused_on_the_higher_tier_too() {
    let f = fixture(Setup {
        deny: vec!["docker"],
        ..tiered()
    });
    let out = f
        .turn
        .exec("make --version > /dev/null && echo on-tier1")
        .await;
    assert_eq!((out.stdout.as_str(), out.tier), ("on-tier1\n", 1));
    let out = f.turn.exec("ls; docker ps").await;
    assert_eq!((out.exit_code, out.tier), (126, 1));
    assert_eq!(out.stderr, "kube-harness: refused by policy: docker\n");
    let usage = f.turn.end().await;
    assert_eq!(usage["refusals"], 1);
    assert_eq!(
        usage["higherTier"]["commands"], 1,
        "the refused command never ran"
    );
}
