//! Issue 29, item 2: a deny policy that named an interpreter held for its name only. With
//! `--deny sh --deny dash`, dash still ran: it is the `#!` interpreter of `which`, `egrep`,
//! `fgrep`, `zcat` and `gunzip`, and awk `system()`, sqlite3 `.shell` and python's
//! `subprocess(shell=True)` start it; classification answered `tier0`. With `--deny python3`, yq
//! (a python3 script) stayed in the tool set, and a `usercustomize.py` in the user site under
//! `HOME=/session` ran arbitrary python in every later python. Each case below did on main at
//! fce0842 (run by hand through the old binary with `KH_ATTACK_BIN`, see support::bin).
//!
//! Now a denied interpreter takes out every tool whose interpreter it is and is not executable,
//! hidden shells (`system()`, `.shell`) name `sh` for the deny policy, and Python's user site is
//! off on Tier-0.

use super::support::{exec, show, text};
use std::path::Path;

fn session(home: &Path) -> std::path::PathBuf {
    home.join(".little-harness/sessions/s1/session")
}

/// Whatever reaches dash under `--deny sh --deny dash`: nothing it would write is written.
#[test]
fn a_denied_shell_runs_neither_by_name_nor_as_an_interpreter() {
    let tmp = tempfile::tempdir().unwrap();
    let deny = ["--deny", "sh", "--deny", "dash", "--tier1", "none"];
    for (what, script) in [
        // scripts whose `#!` interpreter is /bin/sh (Debian)
        ("which", "which ls > /session/out"),
        ("egrep", "echo a | egrep a > /session/out"),
        ("zcat", "echo a | gzip | zcat > /session/out"),
        // tools that run their argument with /bin/sh -c
        (
            "awk system()",
            r#"awk 'BEGIN{system("echo ran > /session/out")}'"#,
        ),
        (
            "sqlite3 .shell",
            "sqlite3 :memory: '.shell echo ran > /session/out'",
        ),
        // code classification cannot read
        (
            "python subprocess(shell=True)",
            r#"python3 -c 'import subprocess; subprocess.run("echo ran > /session/out", shell=True)'"#,
        ),
    ] {
        let o = exec(tmp.path(), &deny, script);
        let out = session(tmp.path()).join("out");
        let wrote = std::fs::read_to_string(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        assert_ne!(o.status.code(), Some(0), "{what}: {}", show(&o));
        assert!(
            wrote.is_empty(),
            "{what} ran dash and wrote {wrote:?}: {}",
            show(&o)
        );
    }
    // Hidden shells are refused before anything runs, naming sh.
    let o = exec(
        tmp.path(),
        &deny,
        r#"awk 'BEGIN{system("true")}'; echo after > /session/after"#,
    );
    assert_eq!(o.status.code(), Some(126), "{}", show(&o));
    assert!(
        text(&o.stderr).contains("sh"),
        "the refusal names sh: {}",
        show(&o)
    );
    assert!(!session(tmp.path()).join("after").exists());
    // Everything else is untouched: bash, and tools that are not shell scripts.
    let o = exec(
        tmp.path(),
        &deny,
        "echo a | grep -c a; echo b | awk '{print $1}'",
    );
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "1\nb\n".to_string()),
        "{}",
        show(&o)
    );
}

/// `--deny python3` takes yq (a python3 script) out too; without a deny policy python still
/// runs, but no longer loads code from the user site the session's own commands write.
#[test]
fn a_denied_python_takes_its_scripts_and_no_user_site_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let o = exec(
        tmp.path(),
        &["--deny", "python3", "--tier1", "none"],
        "echo '{}' | yq -r . > /session/out; echo rc=$?",
    );
    let wrote = std::fs::read_to_string(session(tmp.path()).join("out")).unwrap_or_default();
    assert!(wrote.is_empty(), "yq ran python3: {wrote:?} {}", show(&o));
    assert!(!text(&o.stdout).contains("rc=0"), "{}", show(&o));

    // A usercustomize.py in the user site under HOME (/session): python never loads it.
    let site = "/session/.local/lib/python3.$(python3 -c 'import sys; print(sys.version_info[1])')/site-packages";
    let o = exec(
        tmp.path(),
        &[],
        &format!(
            "mkdir -p {site} && echo 'open(\"/session/hooked\", \"w\").write(\"yes\")' > {site}/usercustomize.py && echo 'import os; open(\"/session/pth\", \"w\")' > {site}/x.pth && echo planted"
        ),
    );
    assert_eq!(text(&o.stdout), "planted\n", "{}", show(&o));
    let o = exec(
        tmp.path(),
        &[],
        "python3 -c 'print(1)'; echo '{}' | yq -r .a",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        !session(tmp.path()).join("hooked").exists(),
        "usercustomize.py ran"
    );
    assert!(!session(tmp.path()).join("pth").exists(), "a .pth file ran");
    // Not carried either: a command that turns the user site back on does so for itself only.
    let o = exec(
        tmp.path(),
        &[],
        "export PYTHONNOUSERSITE= PYTHONUSERBASE=/session/.local; true",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = exec(tmp.path(), &[], "python3 -c 'print(2)'");
    assert_eq!(text(&o.stdout), "2\n", "{}", show(&o));
    assert!(
        !session(tmp.path()).join("hooked").exists(),
        "usercustomize.py ran"
    );
}
