//! `kube-harness worker` the way the pod runs it, built by hand on this host (needs root): a
//! private mount namespace and a fresh read-only root holding only read-only system directories,
//! the workspace bind-mounted at the canonical paths (the PVC), `/.agents` read-only (the skills
//! ConfigMap), a tmpfs at `/tmp` (the emptyDir, TMPDIR), an empty environment, an unprivileged
//! uid and `--workspace-root /`, so the sandbox presents the workspace directly (no namespaces of
//! its own): the mode every worker pod runs in.

use super::bound::Bound;
use kube_harness_worker::api::WorkerClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
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
  chown "$UID_:$UID_" "$POD/pvc/$d"
  mount --bind "$POD/pvc/$d" "$R/$d"
done
mount --bind "$POD/skills" "$R/.agents"
mount -o remount,bind,ro "$R/.agents"
cp "$BIN" "$R/app/kube-harness"
echo pod-token > "$R/app/token"
mount -o remount,ro "$R"
exec chroot "$R" setpriv --reuid "$UID_" --regid "$UID_" --clear-groups \
  env -i TMPDIR=/tmp /app/kube-harness worker --token-file /app/token --session pod --listen "$LISTEN" $EXTRA
"#;

/// A running pod-like worker; killed on drop if [`PodLike::stop`] was not called.
pub struct PodLike {
    pod: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
}

impl PodLike {
    /// Starts the worker as `uid` with the worker flags `extra` (space-separated), inside `bound`
    /// when given; `skills` are the files of `/.agents`.
    pub fn start(uid: u32, extra: &str, bound: Option<&Bound>, skills: &[(&str, &str)]) -> PodLike {
        let pod = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(pod.path().join("skills")).unwrap();
        for (name, text) in skills {
            std::fs::write(pod.path().join("skills").join(name), text).unwrap();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "bash", "-c", SETUP])
            .env("POD", pod.path())
            .env("BIN", super::bin())
            .env("LISTEN", format!("127.0.0.1:{port}"))
            .env("UID_", uid.to_string())
            .env("EXTRA", extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(bound) = bound {
            bound.hold(&mut cmd, None);
        }
        PodLike {
            pod,
            child: Some(cmd.spawn().unwrap()),
            port,
        }
    }

    pub fn client(&self) -> WorkerClient {
        WorkerClient::new(format!("http://127.0.0.1:{}", self.port), "pod-token").unwrap()
    }

    /// Waits until `/readyz` answers.
    pub async fn ready(&self) {
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.readyz().await.is_err() {
            assert!(Instant::now() < deadline, "the worker never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The PVC's directory behind `/session` (or `artifacts`, `persistent`).
    pub fn volume(&self, name: &str) -> PathBuf {
        self.pod.path().join("pvc").join(name)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGTERM, then SIGKILL after 20 s; the worker's exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("stopped once");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn path(&self) -> &Path {
        self.pod.path()
    }
}

impl Drop for PodLike {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
