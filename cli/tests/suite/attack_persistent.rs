//! `project:` Persistent Dir sources against the path rules the docs state for every source: not
//! in the data directory's `sessions/` folder, not reached through a symlink, not containing the
//! data directory, and nothing written on a path error (issue 12, round 4: found from outside
//! with the docs and the binary). Each turn runs the real `kube-harness local exec` with the data
//! directory inside the project (`proj/.lh`) and a victim session holding `s.txt`.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::support::{kh, show, text};

const SECRET: &str = "VICTIM-SECRET";

/// `tmp/proj` with the data directory `proj/.lh` and a victim session whose `/session/s.txt` is
/// the secret. Returns (tmp, proj, data dir).
fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    let data = proj.join(".lh");
    std::fs::create_dir_all(&proj).unwrap();
    let o = kh(&proj)
        .args(["local", "--data-dir", ".lh", "exec", "--session", "victim"])
        .args(["--tier1", "none", "--"])
        .arg(format!("echo {SECRET} > /session/s.txt"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        std::fs::read_to_string(data.join("sessions/victim/session/s.txt")).unwrap(),
        format!("{SECRET}\n")
    );
    (tmp, proj, data)
}

/// `kube-harness local --data-dir .lh EXTRA exec --session SESSION --tier1 none
/// --persistent-dir DIR… -- SCRIPT`, run in `proj`.
fn exec_in(proj: &Path, extra: &[&str], session: &str, dirs: &[&str], script: &str) -> Output {
    let mut c = kh(proj);
    c.args(["local", "--data-dir", ".lh"]).args(extra);
    c.args(["exec", "--session", session, "--tier1", "none"]);
    for d in dirs {
        c.args(["--persistent-dir", d]);
    }
    c.args(["--", script]).output().unwrap()
}

/// A refused turn: exit 2 with a path error naming `why`, the secret not printed, and nothing
/// written for the session (no folder, so no checkout and no staging directory either).
fn assert_refused(o: &Output, why: &str, data: &Path, session: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", show(o));
    let err = text(&o.stderr);
    assert!(err.contains("path error: "), "{}", show(o));
    assert!(err.contains(why), "wanted {why:?}: {}", show(o));
    assert!(!text(&o.stdout).contains(SECRET), "{}", show(o));
    let left = data.join("sessions").join(session);
    assert!(
        !left.exists(),
        "a refused turn left {:?}",
        walkdir_names(&left)
    );
}

fn walkdir_names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            out.push(e.path().display().to_string());
            if out.len() > 20 {
                return out;
            }
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push(e.path());
            }
        }
    }
    out
}

/// (a) A `project:` source naming another session's folder directly (the project root above the
/// data directory). Before: the turn printed the victim's file.
#[test]
fn a_project_source_inside_another_session_is_a_path_error() {
    let (_tmp, proj, data) = project();
    let o = exec_in(
        &proj,
        &["--project-root", ".."],
        "att",
        &["/persistent/p=project:proj/.lh/sessions/victim/session"],
        "cat /persistent/p/s.txt",
    );
    assert_refused(&o, "sessions/ folder", &data, "att");
    // The data directory's sessions/ folder itself, and the data directory, are refused too.
    for (src, why) in [
        ("project:.lh/sessions", "sessions/ folder"),
        ("project:.lh/sessions/victim", "sessions/ folder"),
        ("project:.lh", "contains the data directory"),
    ] {
        let o = exec_in(
            &proj,
            &[],
            "att",
            &[&format!("/persistent/p={src}")],
            "cat /persistent/p/s.txt /persistent/p/session/s.txt",
        );
        assert_refused(&o, why, &data, "att");
    }
}

/// (b) One session commits a symlink into a `project:` source (`mem/inner ->
/// ../.lh/sessions/victim/session`); another turn names a source through it. Before: it printed
/// the victim's file.
#[test]
fn a_project_source_through_a_committed_symlink_reaches_no_other_session() {
    let (_tmp, proj, data) = project();
    std::fs::create_dir(proj.join("mem")).unwrap();
    let o = exec_in(
        &proj,
        &[],
        "att",
        &["/persistent/mem=project:mem"],
        "ln -s ../.lh/sessions/victim/session /persistent/mem/inner",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // The symlink is committed as a symlink (sources hold what sessions committed).
    assert!(std::fs::symlink_metadata(proj.join("mem/inner"))
        .unwrap()
        .file_type()
        .is_symlink());
    let o = exec_in(
        &proj,
        &[],
        "att2",
        &["/persistent/notes=project:mem/inner"],
        "cat /persistent/notes/s.txt",
    );
    assert_refused(&o, "passes through the symlink", &data, "att2");
    // Below it too.
    let o = exec_in(
        &proj,
        &[],
        "att2",
        &["/persistent/notes=project:mem/inner/deeper"],
        "ls /persistent/notes",
    );
    assert_refused(&o, "passes through the symlink", &data, "att2");
}

/// The commit direction: within one turn, Persistent Dir `a` commits a symlink where `b`'s
/// source path continues (`mem/x -> ../.lh/sessions/victim/session`, `b` = `mem/x/notes`). Before:
/// `b`'s after-turn commit followed it and wrote into the victim session. Now that commit is a
/// path error and the victim is untouched.
#[test]
fn an_after_turn_commit_through_a_symlink_committed_in_the_same_turn_is_refused() {
    let (_tmp, proj, data) = project();
    std::fs::create_dir(proj.join("mem")).unwrap();
    let o = exec_in(
        &proj,
        &[],
        "att",
        &[
            "/persistent/a=project:mem",
            "/persistent/b=project:mem/x/notes",
        ],
        "ln -s ../.lh/sessions/victim/session /persistent/a/x; echo pwned > /persistent/b/f",
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        text(&o.stderr).contains("path error: ") && text(&o.stderr).contains("symlink"),
        "{}",
        show(&o)
    );
    let victim = data.join("sessions/victim/session");
    assert!(!victim.join("notes").exists(), "written into the victim");
    let names: Vec<_> = std::fs::read_dir(&victim)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["s.txt"]);
    // The failed commit left no staging directory beside the symlink it refused either.
    let mem: Vec<_> = std::fs::read_dir(proj.join("mem"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(mem, ["x"]);
}

/// (c) A `project:` source that contains the data directory (and so the checkout it would be
/// copied into). Before: it copied into itself down to the 256-level limit, failed with exit 2
/// and left `.p.staging-*` trees in `sessions/att/persistent/`.
#[test]
fn a_project_source_containing_the_data_directory_is_refused_and_leaves_nothing() {
    let (_tmp, proj, data) = project();
    std::fs::write(proj.join("readme.txt"), "hi").unwrap();
    let o = exec_in(
        &proj,
        &["--project-root", ".."],
        "att",
        &["/persistent/p=project:proj"],
        "cat /persistent/p/.lh/sessions/victim/session/s.txt",
    );
    assert_refused(&o, "contains the data directory", &data, "att");
    let o = exec_in(
        &proj,
        &[],
        "att",
        &["/persistent/p=project:.:read-only"],
        "ls /persistent/p",
    );
    assert_refused(&o, "contains the data directory", &data, "att");
    // An existing session's checkout is not touched by a refused turn either.
    let o = exec_in(&proj, &[], "victim", &["/persistent/p=project:."], "true");
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let left: Vec<_> = std::fs::read_dir(data.join("sessions/victim/persistent"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// An ordinary `project:` source still loads and commits: after-turn (files, a directory and a
/// symlink, which is committed as a symlink) and `manual` through `local commit`.
#[test]
fn an_ordinary_project_source_loads_and_commits() {
    let (_tmp, proj, _data) = project();
    std::fs::create_dir_all(proj.join("docs")).unwrap();
    std::fs::write(proj.join("docs/a.txt"), "alpha\n").unwrap();
    let o = exec_in(
        &proj,
        &[],
        "s1",
        &["/persistent/docs=project:./docs"],
        "cat /persistent/docs/a.txt; echo new > /persistent/docs/b.txt; mkdir /persistent/docs/sub; echo deep > /persistent/docs/sub/c.txt; ln -s a.txt /persistent/docs/l",
    );
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "alpha\n".into()),
        "{}",
        show(&o)
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("docs/b.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("docs/sub/c.txt")).unwrap(),
        "deep\n"
    );
    assert_eq!(
        std::fs::read_link(proj.join("docs/l")).unwrap(),
        Path::new("a.txt")
    );
    // A source that does not exist yet is created on commit, as plain directories.
    let o = kh(&proj)
        .args(["local", "--data-dir", ".lh", "exec", "--session", "s1"])
        .args(["--tier1", "none", "--json"])
        .args([
            "--persistent-dir",
            "/persistent/n=project:notes/today:manual",
        ])
        .args(["--", "echo kept > /persistent/n/k.txt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!proj.join("notes/today/k.txt").exists());
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let turn = json["turnId"].as_str().unwrap();
    let o = kh(&proj)
        .args(["local", "--data-dir", ".lh", "commit", "--session", "s1"])
        .args(["--turn", turn])
        .args([
            "--persistent-dir",
            "/persistent/n=project:notes/today:manual",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        std::fs::read_to_string(proj.join("notes/today/k.txt")).unwrap(),
        "kept\n"
    );
    let names: Vec<_> = std::fs::read_dir(proj.join("notes"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["today"]);
}
