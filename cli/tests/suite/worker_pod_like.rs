//! `kube-harness worker` the way the pod runs it, built by hand on this host (needs root): a
//! private mount namespace and a fresh read-only root holding only read-only system directories,
//! the workspace bind-mounted at the canonical paths (the PVC), `/.agents` read-only (the skills
//! ConfigMap), a tmpfs at `/tmp` (the emptyDir, TMPDIR), an empty environment, uid 65532 and
//! `--workspace-root /`, so the sandbox presents the workspace directly (no namespaces of its own).

use kube_harness_worker::api::model::ExecRequest;
use kube_harness_worker::api::WorkerClient;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SETUP: &str = r#"
set -e
R="$POD/root"
mkdir -p "$R"
mount -t tmpfs tmpfs "$R"
for d in usr bin lib lib64 lib32 libx32 etc sbin; do
  [ -e "/$d" ] || continue
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$R/$d"
  else mkdir -p "$R/$d"; mount --bind "/$d" "$R/$d"; mount -o remount,bind,ro "$R/$d"; fi
done
mkdir -p "$R/proc" "$R/dev" "$R/tmp" "$R/app" "$R/.agents"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
for d in session artifacts persistent; do
  mkdir -p "$R/$d" "$POD/pvc/$d"
  chown 65532:65532 "$POD/pvc/$d"
  mount --bind "$POD/pvc/$d" "$R/$d"
done
mount --bind "$POD/skills" "$R/.agents"
mount -o remount,bind,ro "$R/.agents"
cp "$BIN" "$R/app/kube-harness"
echo pod-token > "$R/app/token"
mount -o remount,ro "$R"
exec chroot "$R" setpriv --reuid 65532 --regid 65532 --clear-groups \
  env -i TMPDIR=/tmp /app/kube-harness worker --token-file /app/token --session pod --listen "$LISTEN"
"#;

#[test]
fn the_worker_runs_as_in_the_pod() {
    if not_root() {
        eprintln!("skipped: needs root to build the pod-like root");
        return;
    }
    let pod = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(pod.path().join("skills")).unwrap();
    std::fs::write(pod.path().join("skills/README.md"), "skill\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "bash", "-c", SETUP])
        .env("POD", pod.path())
        .env("BIN", env!("CARGO_BIN_EXE_kube-harness"))
        .env("LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let client = WorkerClient::new(format!("http://127.0.0.1:{port}"), "pod-token").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(20);
            while client.readyz().await.is_err() {
                assert!(Instant::now() < deadline, "the worker never became ready");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
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
            let err = client.readyz().await.unwrap_err().to_string();
            assert!(err.contains("503") && err.contains("file tracking failed"), "{err}");
            let r = client.exec(&ExecRequest::new("chmod 755 /session/locked")).await.unwrap();
            assert_eq!(r.outcome.exit_code, 0, "{}", r.outcome.stderr);
            client.readyz().await.unwrap();
        });
    }));
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert!(
        status.success(),
        "SIGTERM ends the worker cleanly: {status:?}"
    );
    assert_eq!(
        std::fs::read_to_string(pod.path().join("pvc/session/a.txt")).unwrap(),
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
