//! Persistent Dirs through real workers (docs/worker-api.md "Persistent Dirs"): two sessions'
//! workers over one source volume, each with its own workspace, as two pods mounting one claim.
//! Loads at a turn's start, commits by policy at its end, the first-commit-wins rule, manual
//! commits, and what a hostile command does to its checkout.

use super::api_support::{config, start_with, TestWorker};
use kube_harness_worker::api::model::{
    CommitOutcome, CommitRequest, ExecRequest, PersistentCommit,
};
use kube_harness_worker::api::WorkerClientError;
use std::path::{Path, PathBuf};

/// A session's worker with `dirs` over the shared `sources` (one volume per dir name below it).
async fn session(sources: &Path, dirs: &[&str], read_only: &[&str]) -> TestWorker {
    let (tmp, mut config) = config();
    config.sources_root = sources.to_path_buf();
    config.manual_root = tmp.path().join("manual-commits");
    config.persistent_dirs = dirs.iter().map(|d| d.parse().unwrap()).collect();
    config.read_only_prefixes = read_only.iter().map(PathBuf::from).collect();
    start_with(tmp, config).await
}

async fn run(w: &TestWorker, script: &str) -> (i32, String) {
    let r = w.client.exec(&ExecRequest::new(script)).await.unwrap();
    (r.outcome.exit_code, r.outcome.stdout + &r.outcome.stderr)
}

/// Ends the turn; its id and the Persistent Dir reports.
async fn end(w: &TestWorker) -> (String, Vec<PersistentCommit>) {
    let t = w.client.end_turn().await.unwrap().turn.unwrap();
    (t.turn_id, t.persistent)
}

fn outcomes(reports: &[PersistentCommit]) -> Vec<(&str, CommitOutcome)> {
    reports
        .iter()
        .map(|r| (r.dir.as_str(), r.outcome))
        .collect()
}

fn volumes(names: &[&str]) -> tempfile::TempDir {
    let sources = tempfile::tempdir().unwrap();
    for n in names {
        std::fs::create_dir_all(sources.path().join(n)).unwrap();
    }
    sources
}

#[tokio::test]
async fn an_after_turn_commit_is_seen_by_the_next_session() {
    let src = volumes(&["notes"]);
    let a = session(src.path(), &["notes:after-turn:team/notes"], &[]).await;
    let (code, out) = run(
        &a,
        "ls -A /persistent/notes; echo hi > /persistent/notes/a.txt",
    )
    .await;
    assert_eq!(
        (code, out.as_str()),
        (0, ""),
        "an empty source loads as an empty dir"
    );
    let (_, reports) = end(&a).await;
    assert_eq!(outcomes(&reports), [("notes", CommitOutcome::Committed)]);
    assert_eq!(
        std::fs::read_to_string(src.path().join("notes/team/notes/a.txt")).unwrap(),
        "hi\n"
    );
    let b = session(src.path(), &["notes:after-turn:team/notes"], &[]).await;
    assert_eq!(
        run(&b, "cat /persistent/notes/a.txt").await,
        (0, "hi\n".into())
    );
    // The generation file lives beside the dir, not in what sessions see.
    assert_eq!(
        run(&b, "ls -A /persistent/notes").await,
        (0, "a.txt\n".into())
    );
    // A turn that changed nothing there copies nothing: the source is the same directory.
    let before = std::fs::metadata(src.path().join("notes/team/notes")).unwrap();
    let (_, reports) = end(&b).await;
    assert_eq!(outcomes(&reports), [("notes", CommitOutcome::Unchanged)]);
    let after = std::fs::metadata(src.path().join("notes/team/notes")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(before.ino(), after.ino());
}

#[tokio::test]
async fn a_read_only_dir_is_loaded_every_turn_and_refuses_writes() {
    let src = volumes(&["kb"]);
    std::fs::create_dir_all(src.path().join("kb/kb")).unwrap();
    std::fs::write(src.path().join("kb/kb/guide.md"), "v1").unwrap();
    let a = session(src.path(), &["kb:read-only"], &[]).await;
    let b = session(src.path(), &["kb:read-only"], &[]).await;
    for w in [&a, &b] {
        assert_eq!(
            run(w, "cat /persistent/kb/guide.md").await,
            (0, "v1".into())
        );
        let (code, _) = run(w, "echo x > /persistent/kb/guide.md").await;
        assert_ne!(code, 0, "a write to a read-only dir succeeded");
        let (code, _) = run(
            w,
            "touch /persistent/kb/new; rm -f /persistent/kb/guide.md; ls /persistent/kb/new",
        )
        .await;
        assert_ne!(code, 0, "a read-only dir was changed");
        let (_, reports) = end(w).await;
        assert!(reports.is_empty(), "{reports:?}");
    }
    assert_eq!(
        std::fs::read_to_string(src.path().join("kb/kb/guide.md")).unwrap(),
        "v1"
    );
    // The source changed between turns: the next turn sees it.
    std::fs::write(src.path().join("kb/kb/guide.md"), "v2").unwrap();
    assert_eq!(
        run(&a, "cat /persistent/kb/guide.md").await,
        (0, "v2".into())
    );
    end(&a).await;
}

#[tokio::test]
async fn a_manual_dir_is_committed_only_when_asked() {
    let src = volumes(&["drafts"]);
    let w = session(src.path(), &["drafts:manual"], &[]).await;
    run(&w, "echo one > /persistent/drafts/d.txt").await;
    let (first, reports) = end(&w).await;
    assert_eq!(outcomes(&reports), [("drafts", CommitOutcome::Kept)]);
    run(&w, "echo two > /persistent/drafts/d.txt").await;
    let (_second, _) = end(&w).await;
    let committed = src.path().join("drafts/drafts/d.txt");
    assert!(
        !committed.exists(),
        "a manual dir was committed without being asked"
    );
    // The first turn's version, not the last.
    let c = w
        .client
        .commit_persistent(&CommitRequest {
            dir: "drafts".into(),
            turn_id: first.clone(),
        })
        .await
        .unwrap();
    assert_eq!(c.outcome, CommitOutcome::Committed);
    assert_eq!(std::fs::read_to_string(&committed).unwrap(), "one\n");
    // Unknown turn, unknown dir, a turn id that is a path: 404, nothing written.
    for (dir, turn) in [
        ("drafts", "turn_0_nope"),
        ("nope", first.as_str()),
        ("drafts", "../../x"),
    ] {
        let e = w
            .client
            .commit_persistent(&CommitRequest {
                dir: dir.into(),
                turn_id: turn.into(),
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&e, WorkerClientError::Api { status: 404, .. }),
            "{dir} {turn}: {e}"
        );
    }
}

#[tokio::test]
async fn the_first_commit_wins_and_the_loser_is_kept_for_a_manual_commit() {
    let src = volumes(&["notes"]);
    let a = session(src.path(), &["notes:after-turn"], &[]).await;
    let b = session(src.path(), &["notes:after-turn"], &[]).await;
    // Both load the same (empty) source, then both change it.
    run(&a, "echo a > /persistent/notes/a").await;
    run(&b, "echo b > /persistent/notes/b").await;
    let (_, ra) = end(&a).await;
    assert_eq!(outcomes(&ra), [("notes", CommitOutcome::Committed)]);
    let (turn_b, rb) = end(&b).await;
    assert_eq!(outcomes(&rb), [("notes", CommitOutcome::Conflict)]);
    assert!(
        rb[0]
            .message
            .as_deref()
            .unwrap()
            .contains("kube-harness commit"),
        "{rb:?}"
    );
    let source = src.path().join("notes/notes");
    assert!(
        source.join("a").exists() && !source.join("b").exists(),
        "the loser overwrote the winner"
    );
    // B's next turn loads A's commit; its own next commit goes through.
    assert_eq!(run(&b, "ls /persistent/notes").await, (0, "a\n".into()));
    end(&b).await;
    // Asked for, B's kept version is written over A's.
    let c = b
        .client
        .commit_persistent(&CommitRequest {
            dir: "notes".into(),
            turn_id: turn_b,
        })
        .await
        .unwrap();
    assert_eq!(c.outcome, CommitOutcome::Committed);
    assert!(!source.join("a").exists() && source.join("b").exists());
}

#[tokio::test]
async fn a_read_only_prefix_holds_after_every_load() {
    // A load replaces the checkout's directories, so the landlock rules bound to the old ones
    // must be rebuilt: the prefix must still be read-only, and the directory beside it
    // writable, on the second turn as on the first. (Nothing can be created directly in
    // /persistent/notes itself, which is on the way to the prefix: docs/security-model.md.)
    let src = volumes(&["notes"]);
    std::fs::create_dir_all(src.path().join("notes/notes/policy")).unwrap();
    std::fs::create_dir_all(src.path().join("notes/notes/work")).unwrap();
    std::fs::write(src.path().join("notes/notes/policy/rules.md"), "keep").unwrap();
    let w = session(
        src.path(),
        &["notes:after-turn"],
        &["/persistent/notes/policy"],
    )
    .await;
    let other = session(src.path(), &["notes:after-turn"], &[]).await;
    for turn in 1..=3 {
        let (code, out) = run(
            &w,
            &format!("echo {turn} > /persistent/notes/work/t{turn} && echo ok"),
        )
        .await;
        assert_eq!(
            (code, out.as_str()),
            (0, "ok\n"),
            "turn {turn}: a writable file was refused"
        );
        let (code, _) = run(&w, "echo x > /persistent/notes/policy/rules.md").await;
        assert_ne!(code, 0, "turn {turn}: the read-only prefix was written");
        let (_, reports) = end(&w).await;
        assert_eq!(outcomes(&reports), [("notes", CommitOutcome::Committed)]);
        // Another session commits after turn 1, so turn 2 loads again (turn 3 loads nothing:
        // the source is as turn 2 committed it, and the sandbox built for turn 2 serves).
        if turn == 1 {
            run(&other, "echo o > /persistent/notes/work/o").await;
            let (_, reports) = end(&other).await;
            assert_eq!(outcomes(&reports), [("notes", CommitOutcome::Committed)]);
        }
    }
    let source = src.path().join("notes/notes");
    assert_eq!(
        std::fs::read_to_string(source.join("policy/rules.md")).unwrap(),
        "keep"
    );
    for f in ["t1", "o", "t2", "t3"] {
        assert!(source.join("work").join(f).exists(), "{f}");
    }
}

#[tokio::test]
async fn attack_a_checkout_swapped_for_a_symlink_is_not_committed_through() {
    let src = volumes(&["notes"]);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    let w = session(src.path(), &["notes:after-turn"], &[]).await;
    run(&w, "echo a > /persistent/notes/a").await;
    end(&w).await;
    // The checkout itself replaced by a symlink to a directory the host can see.
    let script = format!(
        "rm -rf /persistent/notes; ln -s {} /persistent/notes; ln -s /etc/passwd /persistent/x; echo done",
        outside.path().display()
    );
    let (_, out) = run(&w, &script).await;
    assert!(out.contains("done"), "{out}");
    let (_, reports) = end(&w).await;
    assert_eq!(
        outcomes(&reports),
        [("notes", CommitOutcome::Failed)],
        "{reports:?}"
    );
    let source = src.path().join("notes/notes");
    assert!(
        source.join("a").exists(),
        "the source lost its last good commit"
    );
    assert!(
        !source.join("secret").exists(),
        "the commit copied through the symlink"
    );
    // A symlink inside the tree is committed as a symlink, never followed.
    run(
        &w,
        "ln -s /etc/passwd /persistent/notes/pw; echo b > /persistent/notes/b",
    )
    .await;
    let (_, reports) = end(&w).await;
    assert_eq!(
        outcomes(&reports),
        [("notes", CommitOutcome::Committed)],
        "{reports:?}"
    );
    let pw = std::fs::symlink_metadata(source.join("pw")).unwrap();
    assert!(pw.file_type().is_symlink());
}

#[tokio::test]
async fn a_mounted_dir_is_read_only_and_never_loaded() {
    let src = volumes(&[]);
    let (tmp, mut config) = config();
    // What the pod mounts at /persistent/kb (a ConfigMap), there before the worker starts.
    std::fs::create_dir_all(tmp.path().join("persistent/kb")).unwrap();
    std::fs::write(tmp.path().join("persistent/kb/k"), "v").unwrap();
    config.sources_root = src.path().to_path_buf();
    config.persistent_dirs = vec!["kb:mounted".parse().unwrap()];
    let w = start_with(tmp, config).await;
    assert_eq!(run(&w, "cat /persistent/kb/k").await, (0, "v".into()));
    let (code, _) = run(&w, "echo x > /persistent/kb/k").await;
    assert_ne!(code, 0);
    let (_, reports) = end(&w).await;
    assert!(reports.is_empty());
    let e = w
        .client
        .commit_persistent(&CommitRequest {
            dir: "kb".into(),
            turn_id: "t".into(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, WorkerClientError::Api { status: 409, .. }),
        "{e}"
    );
}
