//! Attacks on the local inspection commands (`kube-harness local files/artifacts`) from inside a
//! session: the real binary, the real Tier-0 sandbox, a temp data dir. The commands list trees a
//! command wrote; a file name must not drive the operator's terminal, a symlink must be listed
//! and never entered, and a tree deeper than PATH_MAX must still list. Runs as root.

use std::path::Path;
use std::process::Output;

use super::support::kh;

fn exec(dir: &Path, script: &str) -> Output {
    let out = kh(dir)
        .args([
            "local",
            "exec",
            "--session",
            "s1",
            "--tier1",
            "none",
            "--",
            script,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn inspect(dir: &Path, what: &str) -> (Option<i32>, Vec<u8>, String) {
    let out = kh(dir).args(["local", what, "s1"]).output().unwrap();
    (
        out.status.code(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A file named with terminal escape sequences (clear screen, set the window title) and a
/// backslash: `local files` prints the name escaped, never the raw ESC bytes.
#[test]
fn escape_sequences_in_file_names_do_not_reach_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    exec(
        tmp.path(),
        r"touch /session/$'\e[2J\e]0;owned\a' /session/$'back\\slash' /session/$'bad\xff'",
    );
    let (code, stdout, stderr) = inspect(tmp.path(), "files");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stdout.contains(&0x1b) && !stdout.contains(&0x07),
        "{stdout:?}"
    );
    let text = String::from_utf8(stdout).unwrap();
    let lines: Vec<&str> = text.lines().map(str::trim_start).collect();
    assert_eq!(
        lines,
        [
            r"0 /session/\u{1b}[2J\u{1b}]0;owned\u{7}",
            r"0 /session/back\\slash",
            r"0 /session/bad\xff",
        ]
    );
}

/// `/artifacts/etc` a symlink to the host's /etc: listed as the symlink (its size is the
/// target's length), nothing below /etc listed.
#[test]
fn a_symlink_to_a_host_dir_is_listed_not_entered() {
    let tmp = tempfile::tempdir().unwrap();
    exec(tmp.path(), "ln -s /etc /artifacts/etc");
    let (code, stdout, stderr) = inspect(tmp.path(), "artifacts");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8(stdout).unwrap(),
        "         4 /artifacts/etc\n"
    );
}

/// A tree whose paths are longer than PATH_MAX (255-byte names, 20 deep, made relative to the
/// cwd): listing it by path used to fail ("File name too long"), so a command could hide every
/// file from `local files`.
#[test]
fn a_tree_longer_than_path_max_still_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "d".repeat(255);
    exec(
        tmp.path(),
        &format!(
            "echo top > /session/top.txt; (cd /session && for i in $(seq 1 20); do mkdir {name} && cd {name}; done && echo deep > f.txt)"
        ),
    );
    let (code, stdout, stderr) = inspect(tmp.path(), "files");
    assert_eq!(code, Some(0), "{stderr}");
    let text = String::from_utf8(stdout).unwrap();
    let deep = format!("/session/{}/f.txt", vec![name.as_str(); 20].join("/"));
    let lines: Vec<&str> = text.lines().map(str::trim_start).collect();
    assert_eq!(lines, [format!("5 {deep}").as_str(), "4 /session/top.txt"]);
}
