//! Attack (issue 12): one large export breaks a session for good.
//!
//! Exported variables are carried from one command to the next. One of 140,000 bytes is over the
//! kernel's bound for one environment string (MAX_ARG_STRLEN, 128 KiB), and many of 100,000
//! bytes together are over ARG_MAX (2 MiB): every later command of the session then failed with
//! 126 `sandbox setup failed: exec /usr/bin/bash: error (errno 7)`, even `unset X`, and the
//! variable stayed in the session's state.json for good. Now what is carried is bounded (one
//! variable, and all together), what is left out is said on the command's stderr, and a state
//! that already holds such a value is dropped by the next command with the same kind of note.
//! Through the real `kube-harness local exec` (Tier-0 and the local Tier-1) and the real
//! `kube-harness worker` over loopback.

use kube_harness_worker::api::model::ExecRequest;
use kube_harness_worker::api::WorkerClient;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::support::{exec, show, text};

const BIG_EXPORT: &str = r#"export X=$(head -c 140000 /dev/zero | tr "\0" a); echo set"#;
const X_NOTE: &str = "kube-harness: not carried to the next command: X (140,003 bytes; one variable may take at most 122,880 bytes)\n";

#[test]
fn one_large_export_does_not_break_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let first = exec(tmp.path(), &[], BIG_EXPORT);
    assert_eq!(
        (
            first.status.code(),
            text(&first.stdout),
            text(&first.stderr)
        ),
        (Some(0), "set\n".into(), X_NOTE.into()),
        "{}",
        show(&first)
    );
    for _ in 0..2 {
        let next = exec(tmp.path(), &[], r#"echo "${#X}"; echo ok"#);
        assert_eq!(
            (next.status.code(), text(&next.stdout), text(&next.stderr)),
            (Some(0), "0\nok\n".into(), String::new()),
            "{}",
            show(&next)
        );
    }
}

#[test]
fn many_large_variables_in_a_saved_state_are_bounded_together() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(exec(tmp.path(), &[], "true").status.code(), Some(0));
    // 24 variables of 100,000 bytes: each under the one-variable bound, 2.4 MB together (over
    // ARG_MAX), as a state.json an older version saved may hold them. The largest go first (all
    // equal here: by name), until at most 192 KiB is left: one of them.
    let state = tmp.path().join(".little-harness/sessions/s1/state.json");
    let env: serde_json::Map<String, serde_json::Value> = (10..34)
        .map(|i| (format!("V{i}"), "v".repeat(99_995).into()))
        .collect();
    let old = serde_json::json!({"cwd": "/session", "env": env});
    std::fs::write(&state, serde_json::to_vec(&old).unwrap()).unwrap();

    let next = exec(tmp.path(), &[], "env | grep -o '^V[0-9]*='; echo ok");
    assert_eq!(
        (next.status.code(), text(&next.stdout)),
        (Some(0), "V33=\nok\n".into()),
        "{}",
        show(&next)
    );
    let notes: Vec<String> = text(&next.stderr).lines().map(String::from).collect();
    assert_eq!(
        notes,
        (10..33)
            .map(|i| format!("kube-harness: not carried to this command: V{i} (100,000 bytes; all carried variables together may take at most 196,608 bytes; the largest are left out first)"))
            .collect::<Vec<_>>(),
        "{}",
        show(&next)
    );
    let again = exec(tmp.path(), &[], "env | grep -o '^V[0-9]*='");
    assert_eq!(
        (
            again.status.code(),
            text(&again.stdout),
            text(&again.stderr)
        ),
        (Some(0), "V33=\n".into(), String::new()),
        "{}",
        show(&again)
    );
}

#[test]
fn exports_over_the_state_reports_cap_are_said_not_silently_lost() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(
        exec(tmp.path(), &[], "export KEEP=k").status.code(),
        Some(0)
    );
    // 2.4 MB of exports: the state report (capped at 256 KiB on every tier) is cut, so nothing
    // of this command's state can be carried, and that is said.
    let first = exec(
        tmp.path(),
        &[],
        r#"mkdir -p /session/d; cd /session/d; v=$(head -c 99995 /dev/zero | tr "\0" v); for i in $(seq 10 33); do export V$i=$v; done; echo set"#,
    );
    assert_eq!(
        (first.status.code(), text(&first.stdout), text(&first.stderr)),
        (
            Some(0),
            "set\n".into(),
            "kube-harness: not carried to the next command: this command's working directory and exported variables (its state report was over the size cap or unreadable); the next command starts with the state this one started with\n".into()
        ),
        "{}",
        show(&first)
    );
    let next = exec(
        tmp.path(),
        &[],
        "pwd; echo $KEEP; echo $(env | grep -c '^V[0-9]*=')",
    );
    assert_eq!(
        (next.status.code(), text(&next.stdout)),
        (Some(0), "/session\nk\n0\n".into()),
        "{}",
        show(&next)
    );
}

#[test]
fn a_saved_state_holding_an_oversized_variable_is_dropped_with_a_note_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(exec(tmp.path(), &[], "true").status.code(), Some(0));
    // What an older version saved after the attacker's export.
    let state = tmp.path().join(".little-harness/sessions/s1/state.json");
    assert!(state.is_file(), "{}", state.display());
    let old =
        serde_json::json!({"cwd": "/session", "env": {"X": "a".repeat(140_000), "KEEP": "k"}});
    std::fs::write(&state, serde_json::to_vec(&old).unwrap()).unwrap();

    let next = exec(tmp.path(), &[], r#"echo "${#X} $KEEP""#);
    assert_eq!(
        (next.status.code(), text(&next.stdout), text(&next.stderr)),
        (
            Some(0),
            "0 k\n".into(),
            "kube-harness: not carried to this command: X (140,003 bytes; one variable may take at most 122,880 bytes)\n".into()
        ),
        "{}",
        show(&next)
    );
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(
        (saved["env"].get("X"), saved["env"]["KEEP"].as_str()),
        (None, Some("k"))
    );
}

#[test]
fn a_large_export_on_the_local_tier1_is_not_carried_either() {
    let tmp = tempfile::tempdir().unwrap();
    // `git` escalates the command to the local Tier-1 shell.
    let first = exec(
        tmp.path(),
        &["--json"],
        &format!("git --version > /dev/null; {BIG_EXPORT}"),
    );
    let answer: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap_or_default();
    assert_eq!(
        (
            first.status.code(),
            answer["tier"].as_u64(),
            answer["stdout"].as_str(),
            answer["stderr"].as_str()
        ),
        (Some(0), Some(1), Some("set\n"), Some(X_NOTE)),
        "{}",
        show(&first)
    );
    let next = exec(tmp.path(), &[], r#"echo "${#X}"; echo ok"#);
    assert_eq!(
        (next.status.code(), text(&next.stdout)),
        (Some(0), "0\nok\n".into()),
        "{}",
        show(&next)
    );
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn through_the_worker_api_a_large_export_is_not_carried() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    for dir in ["session", "artifacts", "persistent"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let token = tmp.path().join("token");
    std::fs::write(&token, "carried-token-1\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _worker = Running(
        Command::new(env!("CARGO_BIN_EXE_kube-harness"))
            .args(["worker", "--session", "carried"])
            .arg("--token-file")
            .arg(&token)
            .env("KH_WORKER_LISTEN", format!("127.0.0.1:{port}"))
            .env("KH_WORKER_WORKSPACE_ROOT", &root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let client = WorkerClient::new(format!("http://127.0.0.1:{port}"), "carried-token-1").unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.readyz().await.is_err() {
            assert!(Instant::now() < deadline, "the worker never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let r = client.exec(&ExecRequest::new(BIG_EXPORT)).await.unwrap();
        assert_eq!(
            (
                r.outcome.exit_code,
                r.outcome.stdout.as_str(),
                r.outcome.stderr.as_str()
            ),
            (0, "set\n", X_NOTE)
        );
        let next = ExecRequest::new(r#"echo "${#X}"; echo ok"#);
        let r = client.exec(&next).await.unwrap();
        assert_eq!(
            (r.outcome.exit_code, r.outcome.stdout.as_str()),
            (0, "0\nok\n"),
            "{}",
            r.outcome.stderr
        );
        // And in the next turn, which starts from the state the worker kept.
        client.end_turn().await.unwrap();
        let r = client.exec(&next).await.unwrap();
        assert_eq!(
            (r.outcome.exit_code, r.outcome.stdout.as_str()),
            (0, "0\nok\n"),
            "{}",
            r.outcome.stderr
        );
    });
}
