//! Helpers for the tests that drive the real `kube-harness local …` binary in a temp directory.
#![allow(dead_code)]

pub mod bound;
pub mod pod_like;

use std::path::Path;
use std::process::{Command, Output};

/// The binary under test: this build's, or the one `KH_ATTACK_BIN` names (to show an attack
/// succeeding against an older build, as the attack files' headers say was done).
pub fn bin() -> std::path::PathBuf {
    std::env::var_os("KH_ATTACK_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_kube-harness").into())
}

/// The binary, run in `dir` (its data dir is `dir/.little-harness`), with quiet logs.
pub fn kh(dir: &Path) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(dir).env("KUBE_HARNESS_LOG", "error");
    c
}

/// `kube-harness local exec --session SESSION --tier1 none -- SCRIPT` in `dir`, with `HOME` there.
/// `--tier1 none`: a script the classifier escalates must not run on the host's Tier-1 (which is
/// no boundary); it is refused instead, so an attack ran on Tier-0 or not at all. The attack
/// files add their bound (`bound::Bound::hold`) and uid.
pub fn local_exec(dir: &Path, session: &str, script: &str) -> Command {
    let mut cmd = kh(dir);
    cmd.args([
        "local",
        "exec",
        "--session",
        session,
        "--tier1",
        "none",
        "--",
    ])
    .arg(script)
    .env("HOME", dir);
    cmd
}

/// A data directory for `uid` (owned by it; root's when `None`).
pub fn home(uid: Option<u32>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if let Some(uid) = uid {
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid)).unwrap();
    }
    dir
}

/// `kube-harness local exec --session s1 EXTRA -- SCRIPT`.
pub fn exec(dir: &Path, extra: &[&str], script: &str) -> Output {
    kh(dir)
        .args(["local", "exec", "--session", "s1"])
        .args(extra)
        .args(["--", script])
        .output()
        .unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// An outcome for an assertion message.
pub fn show(o: &Output) -> String {
    format!(
        "exit={:?} stdout={:?} stderr={:?}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}
