//! `kube-harness worker` as a real process: flags and `KH_WORKER_*` variables, exec over loopback
//! with the typed client, and a real SIGTERM that lets the running command finish.

use super::support::{kh, text};
use kube_harness_worker::api::model::ExecRequest;
use kube_harness_worker::api::WorkerClient;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kube-harness"))
}

struct Running {
    child: Child,
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(root: &std::path::Path, token_file: &std::path::Path) -> Running {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = bin()
        .args(["worker", "--session", "cli-s", "--deny-command", "docker"])
        .arg("--token-file")
        .arg(token_file)
        .env("KH_WORKER_LISTEN", format!("127.0.0.1:{port}"))
        .env("KH_WORKER_WORKSPACE_ROOT", root)
        .env("KH_WORKER_SAME_SESSION", "reject")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Running {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    for dir in ["ws/session", "ws/artifacts", "ws/persistent"] {
        std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
    }
    let token = tmp.path().join("token");
    std::fs::write(&token, "cli-token-99\n").unwrap();
    (tmp, token)
}

#[test]
fn serves_exec_and_stops_cleanly_on_sigterm() {
    let (tmp, token) = workspace();
    let root = tmp.path().join("ws");
    let mut worker = start(&root, &token);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = WorkerClient::new(&worker.url, "cli-token-99").unwrap();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.readyz().await.is_err() {
            assert!(Instant::now() < deadline, "the worker never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let r = client
            .exec(&ExecRequest::new(
                "echo hi > /session/a.txt && cat /session/a.txt",
            ))
            .await
            .unwrap();
        assert_eq!(
            (r.outcome.stdout.as_str(), r.outcome.exit_code),
            ("hi\n", 0)
        );
        assert_eq!(
            std::fs::read_to_string(root.join("session/a.txt")).unwrap(),
            "hi\n"
        );
        let r = client
            .exec(&ExecRequest::new("make --version"))
            .await
            .unwrap();
        assert_eq!(r.outcome.exit_code, 126);
        assert!(r.outcome.stderr.contains("Tier-1"), "{}", r.outcome.stderr);
        let r = client.exec(&ExecRequest::new("docker ps")).await.unwrap();
        assert!(
            r.outcome.stderr.contains("refused by policy: docker"),
            "{}",
            r.outcome.stderr
        );
        assert_eq!(client.status().await.unwrap().session, "cli-s");

        let slow = client.clone();
        let running = tokio::spawn(async move {
            slow.exec(&ExecRequest::new(
                "sleep 1; echo late > /session/late; echo done",
            ))
            .await
        });
        while !client.status().await.unwrap().busy {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // KH_WORKER_SAME_SESSION=reject took effect.
        let busy = client.exec(&ExecRequest::new("true")).await.unwrap_err();
        assert_eq!(busy.code(), Some("session-busy"));
        let killed = Command::new("kill")
            .args(["-TERM", &worker.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let r = running.await.unwrap().unwrap();
        assert_eq!(
            (r.outcome.stdout.as_str(), r.outcome.exit_code),
            ("done\n", 0)
        );
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = worker.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(root.join("session/late").exists());
}

#[test]
fn bad_configuration_is_refused_at_start() {
    let (tmp, token) = workspace();
    // `kube-harness worker ARGS --token-file TOKEN` without the variables named: exit 2, and
    // stderr, which must name what is wrong.
    let refused = |args: &[&str], unset: &[&str]| -> String {
        let mut cmd = bin();
        cmd.arg("worker").args(args).arg("--token-file").arg(&token);
        for var in unset {
            cmd.env_remove(var);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        stderr
    };
    assert!(refused(&["--tier", "2"], &[]).contains("0..=1"));
    assert!(
        refused(&["--escalation", "pod"], &["KH_WORKER_TIER_API_URL"]).contains("--tier-api-url")
    );
    refused(&["--escalation", "tier1"], &[]);
    let scope = ["--session-log-run-scope", "ns:uid"];
    assert!(refused(&scope, &["KH_WORKER_SESSION_LOG_URL"]).contains("needs --session-log-url"));
    let bad_scope = [
        "--session-log-url",
        "http://127.0.0.1:9",
        "--session-log-run-scope",
        "ns/uid",
    ];
    assert!(refused(&bad_scope, &[]).contains("--session-log-run-scope"));

    let out = bin()
        .args(["worker", "--token-file"])
        .arg(tmp.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read token file"));
    let out = bin()
        .args(["worker"])
        .env_remove("KH_WORKER_TOKEN_FILE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--token-file is required");
}

/// `kube-harness cp` both ways against a real worker process (`--worker-url`): the bytes come
/// back equal, a download leaves no partial file on failure, and a refusal is exit 2 with the
/// worker's reason.
#[test]
fn cp_moves_a_file_in_and_out() {
    let (tmp, token) = workspace();
    let root = tmp.path().join("ws");
    let worker = start(&root, &token);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = WorkerClient::new(&worker.url, "cli-token-99").unwrap();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.readyz().await.is_err() {
            assert!(Instant::now() < deadline, "the worker never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let cp = |src: &str, dst: &str| {
        bin()
            .args(["cp", "--worker-url", &worker.url, "--token-file"])
            .arg(&token)
            .args([src, dst])
            .output()
            .unwrap()
    };
    let data: Vec<u8> = (0..(2 << 20)).map(|i: u32| (i * 31 % 251) as u8).collect();
    let up = tmp.path().join("up.bin");
    std::fs::write(&up, &data).unwrap();
    let o = cp(up.to_str().unwrap(), "cli-s:/session/in/up.bin");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(root.join("session/in/up.bin")).unwrap(), data);
    let down = tmp.path().join("down.bin");
    let o = cp("cli-s:/session/in/up.bin", down.to_str().unwrap());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&down).unwrap(), data);
    // A missing remote file: exit 2, the reason, and nothing at the local name.
    let missing = tmp.path().join("missing.bin");
    let o = cp("cli-s:/session/nope", missing.to_str().unwrap());
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not-found"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!missing.exists());
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // A directory, both ways, as one tar.
    let tree = tmp.path().join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    std::fs::write(tree.join("a/b/deep.txt"), "deep").unwrap();
    std::os::unix::fs::symlink("a/b/deep.txt", tree.join("link")).unwrap();
    let o = cp(tree.to_str().unwrap(), "cli-s:/session/tree");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(root.join("session/tree/a/b/deep.txt")).unwrap(),
        "deep"
    );
    assert!(std::fs::symlink_metadata(root.join("session/tree/link"))
        .unwrap()
        .file_type()
        .is_symlink());
    let back = tmp.path().join("back");
    let o = cp("cli-s:/session/tree", back.to_str().unwrap());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(back.join("a/b/deep.txt")).unwrap(),
        "deep"
    );
    assert_eq!(
        std::fs::read_link(back.join("link")).unwrap(),
        std::path::Path::new("a/b/deep.txt")
    );
    // Climbing out: refused by the worker.
    let o = cp(up.to_str().unwrap(), "cli-s:/session/../etc/x");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad-path"));
}

/// The skills keeper of a Tier-1 pod listens on loopback only: anything else is refused at its
/// start (exit 2), as is a missing directory.
#[test]
fn the_skills_keeper_refuses_to_listen_beyond_loopback() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let out = kh(tmp.path())
        .args(["skills-keeper", "--listen", "0.0.0.0:0", "--dir", dir])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("loopback only"),
        "{}",
        text(&out.stderr)
    );
    let out = kh(tmp.path())
        .args([
            "skills-keeper",
            "--listen",
            "127.0.0.1:0",
            "--dir",
            "/nonexistent/kh",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a directory"),
        "{}",
        text(&out.stderr)
    );
}
