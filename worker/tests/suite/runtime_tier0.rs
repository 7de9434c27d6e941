//! The runtime over the real Tier-0 sandbox (namespaces, landlock, seccomp): what the agent sees,
//! what the trace records, and that classification protects the workspace before anything runs.

use super::runtime_support::{fixture, Setup};
use kube_harness_runtime::event::kind;

#[tokio::test]
async fn commands_see_canonical_paths_and_keep_cwd_and_exports() {
    let f = fixture(Setup::default());
    let out = f
        .turn
        .exec("echo hi > /session/a.txt && cat /session/a.txt")
        .await;
    assert_eq!(
        (out.stdout.as_str(), out.exit_code, out.tier),
        ("hi\n", 0, 0),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(f.session_root.join("session/a.txt")).unwrap(),
        "hi\n"
    );
    f.turn
        .exec("mkdir -p /session/sub && cd /session/sub && export FOO='a b' && BAR=local")
        .await;
    let out = f.turn.exec("pwd; echo \"$FOO|$BAR\"").await;
    assert_eq!(
        out.stdout, "/session/sub\na b|\n",
        "cwd and exported variables carry over, plain ones do not"
    );
    let created: Vec<_> = f
        .events
        .events()
        .into_iter()
        .filter(|e| e.kind == kind::FILE_CREATED)
        .collect();
    assert!(
        created.iter().any(|e| e.data["path"] == "/session/a.txt"),
        "{created:?}"
    );
    assert!(created.iter().any(|e| e.data["path"] == "/session/sub"));
}

/// Each command is compared with the state after the previous one (no walk before it): its own
/// changes are reported with it, once; a file edited by hand between two commands is reported
/// with the second, once.
#[tokio::test]
async fn file_events_belong_to_the_command_after_which_they_were_seen() {
    let f = fixture(Setup::default());
    let paths_of = |kind_: &str| -> Vec<String> {
        f.events
            .events()
            .into_iter()
            .filter(|e| e.kind == kind_)
            .map(|e| e.data["path"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    f.turn.exec("echo one > /session/one.txt").await;
    assert_eq!(paths_of(kind::FILE_CREATED), ["/session/one.txt"]);
    f.turn.exec("true").await;
    assert_eq!(paths_of(kind::FILE_CREATED).len(), 1, "nothing new");
    std::fs::write(f.session_root.join("session/by-hand.txt"), "x").unwrap();
    f.turn.exec("echo two >> /session/one.txt").await;
    assert_eq!(
        paths_of(kind::FILE_CREATED),
        ["/session/one.txt", "/session/by-hand.txt"]
    );
    assert_eq!(paths_of(kind::FILE_MODIFIED), ["/session/one.txt"]);
    f.turn.exec("rm /session/by-hand.txt").await;
    f.turn.exec("true").await;
    assert_eq!(paths_of(kind::FILE_DELETED), ["/session/by-hand.txt"]);
}

#[tokio::test]
async fn the_parent_environment_is_invisible() {
    std::env::set_var("KH_TEST_SECRET_TOKEN", "hunter2");
    let f = fixture(Setup::default());
    let out = f.turn.exec("env; echo \"[$KH_TEST_SECRET_TOKEN]\"").await;
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
    assert!(out.stdout.contains("[]"));
}

#[tokio::test]
async fn escalation_without_a_higher_tier_refuses_before_the_destructive_prefix() {
    let f = fixture(Setup::default());
    f.turn
        .exec("mkdir -p /session/build && touch /session/build/keep")
        .await;
    let out = f.turn.exec("rm -rf /session/build && cargo build").await;
    assert_eq!(out.exit_code, 126);
    assert_eq!(out.stderr.lines().count(), 1);
    assert!(out.stderr.starts_with("kube-harness: "));
    assert!(
        f.session_root.join("session/build/keep").exists(),
        "build was left intact"
    );
    let out = f.turn.exec("ls /session/build").await;
    assert_eq!(out.stdout, "keep\n");
}

#[tokio::test]
async fn denied_commands_are_refused_and_large_output_goes_to_artifacts() {
    let f = fixture(Setup {
        deny: vec!["rm"],
        ..Setup::default()
    });
    let out = f.turn.exec("rm -f /session/x").await;
    assert_eq!(out.exit_code, 126);
    assert!(
        out.stderr.contains("refused by policy: rm"),
        "{}",
        out.stderr
    );
    let out = f.turn.exec("seq 1 5000").await;
    assert_eq!(out.stdout.lines().count(), 5000);
    let done = f
        .events
        .events()
        .into_iter()
        .rfind(|e| e.kind == kind::COMMAND_COMPLETED)
        .unwrap();
    let content_ref = done.data["stdoutRef"]["contentRef"]
        .as_str()
        .expect("large stdout is referenced");
    assert!(content_ref.starts_with("/artifacts/trace/"));
    let stored = f.session_root.join(content_ref.trim_start_matches('/'));
    assert_eq!(std::fs::read_to_string(stored).unwrap(), out.stdout);
    assert!(
        !f.events
            .events()
            .iter()
            .any(|e| e.kind == kind::FILE_CREATED
                && e.data["path"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("/artifacts/trace")),
        "trace payloads are not reported as agent file changes"
    );
    let usage = f.turn.end().await;
    assert_eq!(usage["stayedOnTier0"], true);
    assert_eq!(usage["refusals"], 1);
}
