//! The binary as a kubectl plugin: linked as `kubectl-harness`, it answers `kubectl harness …`
//! with the session commands only, and real kubectl finds it on PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory holding `kubectl-harness`, a symlink to the built binary.
fn plugin_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl-harness");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kube-harness"), &link).unwrap();
    (dir, link)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn linked_as_kubectl_harness_it_offers_the_session_commands_only() {
    let (_dir, plugin) = plugin_dir();
    let help = Command::new(&plugin).arg("--help").output().unwrap();
    assert!(help.status.success(), "{}", text(&help));
    let out = text(&help);
    assert!(out.contains("kubectl harness"), "{out}");
    for shown in [
        "exec", "sessions", "cp", "end-turn", "commit", "ping", "trace", "doctor",
    ] {
        assert!(
            out.contains(&format!("  {shown}")),
            "{shown} missing: {out}"
        );
    }
    for hidden in ["operator", "worker", "session-log", "ledger", "crdgen"] {
        assert!(
            !out.contains(&format!("  {hidden}")),
            "{hidden} shown: {out}"
        );
    }
    let refused = Command::new(&plugin)
        .args(["worker", "--help"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("unrecognized subcommand 'worker'"),
        "{}",
        text(&refused)
    );
    let cp = Command::new(&plugin)
        .args(["cp", "--help"])
        .output()
        .unwrap();
    assert!(
        cp.status.success() && text(&cp).contains("SESSION:/session"),
        "{}",
        text(&cp)
    );
    // Under its own name the binary is unchanged.
    let own = Command::new(env!("CARGO_BIN_EXE_kube-harness"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(text(&own).contains("  operator"), "{}", text(&own));
}

/// kubectl itself finds the plugin on PATH (when kubectl is installed: the test cluster's build
/// has one; otherwise this part is said, not silently passed).
#[test]
fn real_kubectl_runs_it_as_kubectl_harness() {
    let kubectl = ["/usr/bin/kubectl", "/usr/local/bin/kubectl"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists());
    let Some(kubectl) = kubectl else {
        eprintln!("kubectl is not installed here: only the argv[0] dispatch was tested");
        return;
    };
    let (dir, _) = plugin_dir();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new(kubectl)
        .args(["harness", "--help"])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("kubectl harness"), "{}", text(&o));
}
