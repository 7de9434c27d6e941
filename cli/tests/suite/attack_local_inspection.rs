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

/// Issue 29, 6b: invisible and format characters in a name (a zero-width space, a line and a
/// paragraph separator, a no-break and an ideographic space, a byte order mark, the Arabic letter
/// mark, a word joiner, a Hangul filler) are escaped like the bidi overrides, so two listed names
/// never look alike; a plain space and visible non-ASCII stay as they are. Failed before the fix:
/// U+200B and the rest printed raw.
#[test]
fn invisible_characters_in_file_names_are_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    // UTF-8 by octal bytes: the sandbox's locale need not be UTF-8.
    exec(
        tmp.path(),
        r#"cd /session && for c in '\342\200\213' '\342\200\250' '\342\200\251' '\302\240' '\343\200\200' '\357\273\277' '\330\234' '\342\201\240' '\341\205\237'; do touch "a$(printf "$c")b"; done; touch 'plain space' "$(printf 'caf\303\251')""#,
    );
    let (code, stdout, stderr) = inspect(tmp.path(), "files");
    assert_eq!(code, Some(0), "{stderr}");
    let text = String::from_utf8(stdout).unwrap();
    let mut lines: Vec<&str> = text.lines().map(str::trim_start).collect();
    lines.sort();
    let mut want = vec![
        r"0 /session/a\u{200b}b",
        r"0 /session/a\u{2028}b",
        r"0 /session/a\u{2029}b",
        r"0 /session/a\u{a0}b",
        r"0 /session/a\u{3000}b",
        r"0 /session/a\u{feff}b",
        r"0 /session/a\u{61c}b",
        r"0 /session/a\u{2060}b",
        r"0 /session/a\u{115f}b",
        "0 /session/café",
        "0 /session/plain space",
    ];
    want.sort();
    assert_eq!(lines, want);
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
