//! Attacks on the host process's own file access inside trees a command writes (issue 12, 1 and
//! 2): a command plants a symlink (or an absurd tree) where the host later reads, writes, walks
//! or copies, and the host must neither follow the link nor fail for good. Real sandbox runs,
//! real files, the real worker API and session log on loopback. Runs as root.

use super::runtime_support::{fixture, Setup};
use kube_harness_classify::RuntimeToggles;
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_runtime::event::kind;
use kube_harness_runtime::TraceEvent;
use kube_harness_worker::local::{self, DataDir, LocalError, LocalTurn, PersistentDir};
use std::path::Path;

/// A host directory outside every mount, with one file in it, and its listing.
fn host_dir(tmp: &Path) -> std::path::PathBuf {
    let dir = tmp.join("host-secrets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret.txt"), "host secret\n").unwrap();
    dir
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn completed(events: &[TraceEvent]) -> &TraceEvent {
    events
        .iter()
        .rfind(|e| e.kind == kind::COMMAND_COMPLETED)
        .expect("a command.completed event")
}

/// Issue 12.1: `/artifacts/trace` replaced by a symlink to a host directory, then more output
/// than fits inline. The host must not create the payload file in the host directory; the output
/// rides inline, truncated, instead.
#[tokio::test]
async fn trace_dir_symlinked_to_a_host_dir_gets_no_payload_written_through_it() {
    let f = fixture(Setup::default());
    let host = host_dir(f._tmp.path());
    let script = format!(
        "rm -rf /artifacts/trace; ln -s {} /artifacts/trace; head -c 20000 /dev/zero | tr '\\0' A",
        host.display()
    );
    let out = f.turn.exec(&script).await;
    assert_eq!(
        (out.exit_code, out.stdout.len()),
        (0, 20000),
        "{}",
        out.stderr
    );
    assert_eq!(
        listing(&host),
        ["secret.txt"],
        "nothing written into the host dir"
    );
    let events = f.events.events();
    let done = completed(&events);
    assert!(done.data.get("stdoutRef").is_none(), "{}", done.data);
    assert_eq!(done.data["stdoutTruncated"], true);
    assert_eq!(done.data["stdout"].as_str().unwrap(), "A".repeat(4096));
    // The symlink is still the command's, untouched.
    assert_eq!(
        std::fs::read_link(f.session_root.join("artifacts/trace")).unwrap(),
        host
    );
}

/// The same with `trace` a regular file: inline and truncated, the file untouched.
#[tokio::test]
async fn trace_name_taken_by_a_file_keeps_output_inline() {
    let f = fixture(Setup::default());
    let out = f
        .turn
        .exec("rm -rf /artifacts/trace; echo mine > /artifacts/trace; seq 1 3000")
        .await;
    assert_eq!(out.exit_code, 0);
    let events = f.events.events();
    assert_eq!(completed(&events).data["stdoutTruncated"], true);
    assert_eq!(
        std::fs::read_to_string(f.session_root.join("artifacts/trace")).unwrap(),
        "mine\n"
    );
}

/// The worker API's replay reads a recorded step's large output back from `/artifacts/trace`.
/// A later command swaps that payload for a symlink to a host file of the same size: the replay
/// must not return the host file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_does_not_read_a_payload_swapped_for_a_symlink_to_a_host_file() {
    let log = super::api_support::TestLog::start().await;
    let (tmp, mut cfg) = super::api_support::config();
    cfg.session_log = Some(log.config());
    let w = super::api_support::start_with(tmp, cfg).await;
    let secrets = tempfile::tempdir().unwrap();
    let secret = secrets.path().join("secret.bin");
    std::fs::write(&secret, "S".repeat(20000)).unwrap();

    let req = ExecRequest::new("head -c 20000 /dev/zero | tr '\\0' A").step("run-1", "big");
    let first = w.client.exec(&req).await.unwrap();
    assert_eq!(first.outcome.stdout, "A".repeat(20000));
    let swap = format!(
        "f=$(ls /artifacts/trace/*.stdout.txt) && rm \"$f\" && ln -s {} \"$f\"",
        secret.display()
    );
    let out = w.client.exec(&ExecRequest::new(&swap)).await.unwrap();
    assert_eq!(out.outcome.exit_code, 0, "{}", out.outcome.stderr);

    let again = w.client.exec(&req).await.unwrap();
    assert!(again.replayed);
    assert!(!again.outcome.stdout.contains('S'), "the host file leaked");
    assert_eq!(
        (again.outcome.stdout.as_str(), again.outcome.truncated),
        ("", true)
    );
}

fn local_turn(dirs: &[&str]) -> LocalTurn {
    LocalTurn {
        session: "s1".into(),
        runtime: RuntimeToggles::default(),
        deny: Vec::new(),
        same_session: Default::default(),
        max_concurrent_sessions: None,
        persistent_dirs: dirs
            .iter()
            .map(|d| PersistentDir::parse(d).unwrap())
            .collect(),
        project_root: std::env::temp_dir(),
        next_tier: None,
    }
}

/// Issue 12.2: `/persistent/mem` (after-turn) replaced by a symlink to a host directory. The
/// commit must not copy the host directory into the source, so the next turn cannot read it.
#[tokio::test]
async fn persistent_dir_symlinked_to_a_host_dir_is_not_committed_through_it() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host_dir(tmp.path());
    let data = DataDir::open(tmp.path().join("data")).unwrap();
    std::fs::create_dir_all(data.root().join("persistent/mem")).unwrap();
    std::fs::write(data.root().join("persistent/mem/note.md"), "kept\n").unwrap();
    let turn = local_turn(&["/persistent/mem=persistent/mem"]);

    let plant = format!(
        "cat /persistent/mem/note.md && rm -rf /persistent/mem && ln -s {} /persistent/mem",
        host.display()
    );
    let err = match local::run_turn(&data, &turn, &plant).await {
        Ok(r) => panic!(
            "the commit went through the symlink: exit {} {}",
            r.outcome.exit_code, r.outcome.stderr
        ),
        Err(e) => e,
    };
    assert!(matches!(err, LocalError::Path(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("path error: ")
            && msg.contains("persistent/mem: a path component is a symlink")
            && msg.ends_with("nothing was copied"),
        "{msg}"
    );
    assert_eq!(
        listing(&data.root().join("persistent/mem")),
        ["note.md"],
        "the source is unchanged"
    );
    assert_eq!(listing(&host), ["secret.txt"]);

    // The next turn gets the source back at /persistent/mem, and nothing of the host dir.
    let r = local::run_turn(
        &data,
        &turn,
        "cat /persistent/mem/note.md; cat /persistent/mem/secret.txt",
    )
    .await
    .unwrap();
    assert_eq!(r.outcome.stdout, "kept\n");
    assert!(!r.outcome.stdout.contains("host secret"));
    assert_ne!(r.outcome.exit_code, 0);
}

/// The `manual` policy: the end-of-turn copy into `manual-commits/` must not read through a
/// symlink either (else `local commit` would carry the host directory into the source).
#[tokio::test]
async fn manual_persistent_dir_symlinked_to_a_host_dir_keeps_no_copy_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host_dir(tmp.path());
    let data = DataDir::open(tmp.path().join("data")).unwrap();
    let turn = local_turn(&["/persistent/draft=drafts/d1:manual"]);
    let plant = format!(
        "rm -rf /persistent/draft && ln -s {} /persistent/draft",
        host.display()
    );
    let err = local::run_turn(&data, &turn, &plant).await.err();
    assert!(matches!(err, Some(LocalError::Path(_))), "{err:?}");
    let pending = data.root().join("sessions/s1/manual-commits");
    let kept: Vec<_> = walkdir::WalkDir::new(&pending)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == "secret.txt")
        .collect();
    assert!(kept.is_empty(), "{kept:?}");
    assert!(!data.root().join("drafts/d1/secret.txt").exists());
}

/// A nested Persistent Dir (`/persistent/team/notes`) whose parent a command replaced by a
/// symlink to a host directory: the commit refuses to read through it (the source keeps its
/// content), and loading it next turn creates nothing in the host directory (the symlink is
/// replaced by a directory).
#[tokio::test]
async fn nested_persistent_dir_under_a_symlinked_parent_is_not_written_through_it() {
    let tmp = tempfile::tempdir().unwrap();
    let host = host_dir(tmp.path());
    let data = DataDir::open(tmp.path().join("data")).unwrap();
    std::fs::create_dir_all(data.root().join("team/notes")).unwrap();
    std::fs::write(data.root().join("team/notes/n.md"), "n\n").unwrap();
    let turn = local_turn(&["/persistent/team/notes=team/notes"]);
    let plant = format!(
        "cat /persistent/team/notes/n.md && mv /persistent/team /persistent/old && ln -s {} /persistent/team",
        host.display()
    );
    let err = local::run_turn(&data, &turn, &plant).await.err();
    assert!(matches!(err, Some(LocalError::Path(_))), "{err:?}");
    assert_eq!(listing(&data.root().join("team/notes")), ["n.md"]);
    let r = local::run_turn(&data, &turn, "cat /persistent/team/notes/n.md")
        .await
        .unwrap();
    assert_eq!(r.outcome.stdout, "n\n", "{}", r.outcome.stderr);
    assert_eq!(
        listing(&host),
        ["secret.txt"],
        "nothing created in the host dir"
    );
    let session = data.root().join("sessions/s1/persistent");
    assert!(std::fs::symlink_metadata(session.join("team"))
        .unwrap()
        .is_dir());
}

/// A data-dir source inside another session's folder (which that session's commands write)
/// is a path error, like one outside the data directory.
#[tokio::test]
async fn persistent_source_inside_a_session_folder_is_a_path_error() {
    let tmp = tempfile::tempdir().unwrap();
    let data = DataDir::open(tmp.path().join("data")).unwrap();
    data.session("other").unwrap();
    let turn = local_turn(&["/persistent/x=sessions/other/session"]);
    let err = local::run_turn(&data, &turn, "echo ran > /session/ran")
        .await
        .err()
        .expect("a path error");
    assert_eq!(
        err.to_string(),
        "path error: source sessions/other/session is inside the data directory's sessions/ folder, which commands write"
    );
    assert!(!data.root().join("sessions/s1/session/ran").exists());
}

/// A command builds a tree whose paths are longer than PATH_MAX (255-byte names, 20 deep, made
/// relative to the cwd). Walking it by path fails with ENAMETOOLONG, which used to blind the
/// snapshot (no file events for this or any later command); the fd-relative walk reads it.
#[tokio::test]
async fn a_tree_longer_than_path_max_does_not_blind_file_events() {
    let f = fixture(Setup::default());
    let name = "d".repeat(255);
    let script = format!(
        "(cd /session && for i in $(seq 1 20); do mkdir {name} && cd {name}; done && echo deep > f.txt)"
    );
    let out = f.turn.exec(&script).await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    let out = f.turn.exec("echo after > /session/after.txt").await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    let created: Vec<String> = f
        .events
        .events()
        .into_iter()
        .filter(|e| e.kind == kind::FILE_CREATED)
        .map(|e| e.data["path"].as_str().unwrap().to_string())
        .collect();
    assert!(
        created.contains(&"/session/after.txt".to_string()),
        "{created:?}"
    );
    let deep = format!("/session/{}/f.txt", vec![name.as_str(); 20].join("/"));
    assert!(created.contains(&deep), "{} events", created.len());
}
