//! `kube-harness local …` end to end: real processes, the real Tier-0 sandbox, a temp data dir.

use std::process::Stdio;

use super::support::{exec, kh, text};

#[test]
fn exec_prints_output_exits_with_the_command_and_keeps_session_state() {
    let tmp = tempfile::tempdir().unwrap();
    let out = exec(
        tmp.path(),
        &[],
        "echo hi > /session/a.txt && cat /session/a.txt && cd /session && export X=1",
    );
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("hi\n", Some(0)),
        "{}",
        text(&out.stderr)
    );
    assert!(tmp
        .path()
        .join(".little-harness/sessions/s1/session/a.txt")
        .is_file());
    let out = exec(tmp.path(), &[], "pwd; echo $X; exit 7");
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("/session\n1\n", Some(7))
    );
    let out = exec(tmp.path(), &["--json", "--tier1", "none"], "git status");
    assert_eq!(out.status.code(), Some(126));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["exitCode"], 126);
    assert!(json["stderr"]
        .as_str()
        .unwrap()
        .starts_with("kube-harness: "));
    assert!(json["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "harness.tier.refused"));
    let out = exec(
        tmp.path(),
        &[],
        "git init -q /session/repo && git -C /session/repo status --short | wc -l",
    );
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("0", Some(0)),
        "{}",
        text(&out.stderr)
    );
    assert!(
        tmp.path()
            .join(".little-harness/sessions/s1/session/repo/.git")
            .is_dir(),
        "merged back from the local Tier-1"
    );
    let trace = kh(tmp.path())
        .args(["local", "trace", "s1", "--format", "json"])
        .output()
        .unwrap();
    let trace = text(&trace.stdout);
    assert_eq!(
        trace
            .lines()
            .filter(|l| l.contains("harness.turn.usage"))
            .count(),
        4
    );
    assert!(trace.contains("harness.tier.escalated"));
    let sessions = kh(tmp.path()).args(["local", "sessions"]).output().unwrap();
    assert_eq!(text(&sessions.stdout), "s1\n");
    let files = text(
        &kh(tmp.path())
            .args(["local", "files", "s1"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(files.contains("         3 /session/a.txt"), "{files}");
    assert!(files.contains("/session/repo/.git/HEAD"), "{files}");
    let diff = text(
        &kh(tmp.path())
            .args(["local", "diff", "s1", "--path", "/session/a.txt"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(
        diff.contains("created") && diff.contains("source=\"command\""),
        "{diff}"
    );
    let outcomes = text(
        &kh(tmp.path())
            .args(["local", "outcomes"])
            .output()
            .unwrap()
            .stdout,
    );
    assert_eq!(outcomes.lines().count(), 4, "{outcomes}");
    assert!(
        outcomes.lines().nth(1).unwrap().contains("commands=[7@t0]"),
        "{outcomes}"
    );
    assert!(
        outcomes.lines().nth(2).unwrap().contains("refused=1"),
        "{outcomes}"
    );
    assert!(
        outcomes
            .lines()
            .nth(3)
            .unwrap()
            .contains("stayedOnTier0=false"),
        "{outcomes}"
    );
    assert_eq!(
        kh(tmp.path())
            .args(["local", "doctor", "s1"])
            .status()
            .unwrap()
            .code(),
        Some(0)
    );
}

#[test]
fn same_session_reject_fails_while_a_turn_runs_and_queue_waits() {
    let tmp = tempfile::tempdir().unwrap();
    exec(tmp.path(), &[], "true");
    let slow = kh(tmp.path())
        .args([
            "local",
            "exec",
            "--session",
            "s1",
            "--",
            "sleep 2; echo slow",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let rejected = exec(tmp.path(), &["--same-session", "reject"], "echo second");
    assert_eq!(rejected.status.code(), Some(2));
    assert!(
        text(&rejected.stderr).contains("is running a turn"),
        "{}",
        text(&rejected.stderr)
    );
    let queued = exec(tmp.path(), &["--same-session", "queue"], "echo queued");
    assert_eq!(text(&queued.stdout), "queued\n");
    let slow = slow.wait_with_output().unwrap();
    assert_eq!(text(&slow.stdout), "slow\n");
}

#[test]
fn persistent_dirs_follow_their_commit_policy_and_path_errors_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join(".little-harness");
    std::fs::create_dir_all(data.join("kb")).unwrap();
    std::fs::write(data.join("kb/fact.md"), "water is wet\n").unwrap();
    std::fs::create_dir_all(tmp.path().join("docs")).unwrap();
    std::fs::write(tmp.path().join("docs/readme.md"), "docs\n").unwrap();
    let dirs = [
        "--persistent-dir",
        "/persistent/kb=kb:read-only",
        "--persistent-dir",
        "/persistent/user=users/u1:after-turn",
        "--persistent-dir",
        "/persistent/draft=drafts/d1:manual",
        "--persistent-dir",
        "/persistent/docs=project:docs:read-only",
    ];
    let out = exec(tmp.path(), &dirs, "cat /persistent/kb/fact.md /persistent/docs/readme.md; echo note > /persistent/user/n.md; echo d > /persistent/draft/d.md; echo x > /persistent/kb/new.md");
    assert_eq!(text(&out.stdout), "water is wet\ndocs\n");
    assert_ne!(
        out.status.code(),
        Some(0),
        "writing into a read-only Persistent Dir fails"
    );
    assert!(!data.join("kb/new.md").exists());
    assert_eq!(
        std::fs::read_to_string(data.join("users/u1/n.md")).unwrap(),
        "note\n",
        "after-turn committed"
    );
    assert!(
        !data.join("drafts/d1/d.md").exists(),
        "manual is not committed automatically"
    );
    let json = exec(tmp.path(), &[dirs[4], dirs[5], "--json"], "true");
    let turn_dirs: Vec<_> = std::fs::read_dir(data.join("sessions/s1/manual-commits"))
        .unwrap()
        .collect();
    assert_eq!(turn_dirs.len(), 2, "{}", text(&json.stderr));
    let first_turn = std::fs::read_dir(data.join("sessions/s1/manual-commits"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .min()
        .unwrap();
    let status = kh(tmp.path())
        .args([
            "local",
            "commit",
            "--session",
            "s1",
            "--turn",
            &first_turn,
            "--persistent-dir",
            "/persistent/draft=drafts/d1:manual",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::read_to_string(data.join("drafts/d1/d.md")).unwrap(),
        "d\n"
    );

    for bad in [
        "/persistent/x=/etc",
        "/persistent/x=../outside",
        "/persistent/x=.",
        "/persistent/x=project:../outside",
    ] {
        let out = exec(
            tmp.path(),
            &["--persistent-dir", bad],
            "echo should-not-run > /session/ran.txt",
        );
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            text(&out.stderr).contains("path error"),
            "{bad}: {}",
            text(&out.stderr)
        );
        assert!(!data.join("sessions/s1/session/ran.txt").exists());
        assert!(!tmp.path().join("outside").exists());
    }
}

/// The session's skills (`.agents/` of its data directory) on the local Tier-1, through the real
/// binary: an escalated command reads them at `/.agents` and cannot change them (a read-only
/// copy), and nothing of them is merged back.
#[test]
fn skills_are_read_only_on_the_local_tier1_and_never_merged_back() {
    let tmp = tempfile::tempdir().unwrap();
    let out = exec(tmp.path(), &[], "true");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let skills = tmp
        .path()
        .join(".little-harness/sessions/s1/.agents/skills");
    std::fs::write(skills.join("review.md"), "# Review\n").unwrap();
    let out = exec(
        tmp.path(),
        &["--json"],
        "git --version > /dev/null && cat /.agents/skills/review.md && \
         { echo forged > /.agents/skills/review.md || echo refused; } && \
         { chmod 666 /.agents/skills/review.md || echo refused; } && \
         { rm /.agents/skills/review.md || echo refused; }",
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (json["stdout"].as_str(), json["tier"].as_i64()),
        (Some("# Review\nrefused\nrefused\nrefused\n"), Some(1)),
        "{json:#}"
    );
    assert!(
        json["stderr"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{json:#}"
    );
    assert_eq!(
        std::fs::read_to_string(skills.join("review.md")).unwrap(),
        "# Review\n"
    );
}
