//! `kube-harness worker` the way the pod runs it, built by hand on this host (needs root): a
//! private mount namespace and a fresh read-only root holding only read-only system directories,
//! the workspace bind-mounted at the canonical paths (the PVC), `/.agents` read-only (the skills
//! ConfigMap), a tmpfs at `/tmp` (the emptyDir, TMPDIR), an empty environment, uid 65532 and
//! `--workspace-root /`, so the sandbox presents the workspace directly (no namespaces of its own).

use super::support::pod_like::PodLike;
use kube_harness_worker::api::model::ExecRequest;
use std::process::Command;

#[test]
fn the_worker_runs_as_in_the_pod() {
    if not_root() {
        eprintln!("skipped: needs root to build the pod-like root");
        return;
    }
    let mut pod = PodLike::start(65532, "", None, &[("README.md", "skill\n")]);
    let client = pod.client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            pod.ready().await;
            let r = client
                .exec(&ExecRequest::new(
                    "id -u; echo hi > /session/a.txt; cat /session/a.txt; cat /.agents/README.md; touch $TMPDIR/t && echo tmp-ok",
                ))
                .await
                .unwrap();
            assert_eq!(r.outcome.stdout, "65532\nhi\nskill\ntmp-ok\n", "{}", r.outcome.stderr);
            for (script, what) in [
                ("touch /etc/x", "read-only root"),
                ("touch /app/y", "read-only root"),
                ("touch /.agents/z", "read-only skills"),
                ("ls /", "landlock: only the workspace and tools"),
            ] {
                let r = client.exec(&ExecRequest::new(script)).await.unwrap();
                assert_ne!(r.outcome.exit_code, 0, "{what}: {script} should fail");
            }
            let r = client.exec(&ExecRequest::new("make --version")).await.unwrap();
            assert_eq!(r.outcome.exit_code, 126);

            // A directory the worker (same uid, not root) cannot read makes every snapshot of
            // the workspace fail: file events would be missing without a word. The worker keeps
            // running commands but is not ready, and says why, until it can read again.
            let r = client
                .exec(&ExecRequest::new("mkdir /session/locked && chmod 000 /session/locked"))
                .await
                .unwrap();
            assert_eq!(r.outcome.exit_code, 0, "{}", r.outcome.stderr);
            let seen = serde_json::to_string(&r.events).unwrap();
            assert!(
                seen.contains("fileTrackingSkipped") && seen.contains("/session/locked"),
                "the locked directory is named as skipped: {seen}"
            );
            let err = client.readyz().await.unwrap_err().to_string();
            assert!(err.contains("503") && err.contains("file tracking failed"), "{err}");
            // The rest of the workspace is still tracked meanwhile: a write is a file event, and
            // the locked directory is named as skipped (it blinded every later command before).
            let r = client
                .exec(&ExecRequest::new("echo x > /session/after; chmod 000 /session/a.txt"))
                .await
                .unwrap();
            let seen = serde_json::to_string(&r.events).unwrap();
            assert!(
                seen.contains("harness.file.created") && seen.contains("/session/after"),
                "{seen}"
            );
            assert!(
                seen.contains("fileTrackingSkipped") && seen.contains("/session/a.txt"),
                "the locked file is named (and its mode change reported): {seen}"
            );
            let r = client
                .exec(&ExecRequest::new("chmod 644 /session/a.txt"))
                .await
                .unwrap();
            assert_eq!(r.outcome.exit_code, 0, "{}", r.outcome.stderr);
            let r = client.exec(&ExecRequest::new("chmod 755 /session/locked")).await.unwrap();
            assert_eq!(r.outcome.exit_code, 0, "{}", r.outcome.stderr);
            client.readyz().await.unwrap();
        });
    }));
    let status = pod.stop();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert!(
        status.success(),
        "SIGTERM ends the worker cleanly: {status:?}"
    );
    assert_eq!(
        std::fs::read_to_string(pod.volume("session").join("a.txt")).unwrap(),
        "hi\n",
        "the file is on the volume"
    );
}

fn not_root() -> bool {
    // No libc dependency in this crate: ask `id`.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() != "0")
        .unwrap_or(true)
}
