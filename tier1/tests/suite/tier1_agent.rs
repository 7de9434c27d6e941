//! The Tier-1 agent as a real process over loopback: bind, commands with cwd/env carried through
//! the fd-3 state report, the change archive merged back, one-use bind, bad input, time limits
//! that kill the whole tree, and an environment that keeps the agent's own secrets from scripts.
//! Runs as root (the agent presents a temp workspace root through a mount namespace).

use super::tier1_support::{
    apply_changes, b64_field, sleeping_after_grace, spawn_agent, spec_of, workspace_root,
    AGENT_TOKEN,
};
use kube_harness_runtime::state;
use kube_harness_workspace::{self as workspace, PackOptions, PackReport};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

async fn put(url: &str, body: Vec<u8>) -> (u16, Value) {
    let r = http()
        .put(format!("{url}/v1/workspace"))
        .bearer_auth(AGENT_TOKEN)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn exec_raw(url: &str, body: Value) -> (u16, Value) {
    let r = http()
        .post(format!("{url}/v1/exec"))
        .bearer_auth(AGENT_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Runs a wrapped script; returns (stdout, stderr, exit code, the parsed state report).
async fn exec(
    url: &str,
    script: &str,
    cwd: &str,
    env: &std::collections::BTreeMap<String, String>,
) -> (String, String, i64, Value) {
    let (status, v) = exec_raw(
        url,
        json!({"script": state::wrap(script), "cwd": cwd, "env": env, "timeoutMs": 30000}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let text = |f: &str| b64_field(&v, f);
    (
        text("stdoutB64"),
        text("stderrB64"),
        v["exitCode"].as_i64().unwrap(),
        json!(text("stateB64")),
    )
}

/// A Tier-0-like workspace with a few files, packed as the worker hands it over.
fn source() -> (tempfile::TempDir, Vec<u8>, PackReport) {
    let tmp = workspace_root();
    std::fs::create_dir_all(tmp.path().join("session/sub")).unwrap();
    std::fs::write(tmp.path().join("session/a.txt"), "alpha\n").unwrap();
    std::fs::write(tmp.path().join("session/sub/gone.txt"), "bye\n").unwrap();
    std::fs::write(tmp.path().join("persistent/notes.md"), "notes\n").unwrap();
    let mut archive = Vec::new();
    let report =
        workspace::pack(&spec_of(tmp.path()), &PackOptions::default(), &mut archive).unwrap();
    (tmp, archive, report)
}

fn parse_state(v: &Value) -> (String, std::collections::BTreeMap<String, String>) {
    let (cwd, env) = state::parse(v.as_str().unwrap().as_bytes()).expect("a state report");
    (cwd.display().to_string(), env)
}

#[tokio::test]
async fn bind_commands_and_changes_round_trip_into_the_source_workspace() {
    let root = tempfile::tempdir().unwrap();
    let agent = spawn_agent(root.path(), &[]);
    let (src, archive, packed) = source();
    let (status, bound) = put(&agent.url, archive).await;
    assert_eq!(status, 200, "{bound}");
    assert_eq!(bound["files"], packed.entries);
    assert_eq!(bound["bytes"], packed.total_bytes);
    assert_eq!(
        std::fs::read_to_string(agent.host("/session/a.txt")).unwrap(),
        "alpha\n"
    );
    assert!(
        std::fs::read_dir(agent.host("/session"))
            .unwrap()
            .all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".kube-harness")),
        "no staging left in the workspace"
    );

    let none = Default::default();
    let (out, err, code, st) = exec(
        &agent.url,
        "cd sub && export GREETING='hi there' && echo made > new.txt && rm gone.txt && pwd",
        "/session",
        &none,
    )
    .await;
    assert_eq!((out.as_str(), code), ("/session/sub\n", 0), "{err}");
    let (cwd, env) = parse_state(&st);
    assert_eq!(cwd, "/session/sub");
    assert_eq!(env["GREETING"], "hi there");
    let (out, _, code, _) = exec(
        &agent.url,
        "echo \"$GREETING\"; pwd; cat /session/a.txt",
        &cwd,
        &env,
    )
    .await;
    assert_eq!((out.as_str(), code), ("hi there\n/session/sub\nalpha\n", 0));
    let (_, _, code, st) = exec(&agent.url, "exit 3", &cwd, &env).await;
    assert_eq!(code, 3);
    assert_eq!(
        parse_state(&st).0,
        "/session/sub",
        "state is reported on exit N too"
    );

    let changes = http()
        .get(format!("{}/v1/changes", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(changes.status(), 200);
    assert_eq!(changes.headers()["content-type"], "application/x-tar");
    let changes = changes.bytes().await.unwrap();
    let applied = apply_changes(src.path(), &changes, &packed.snapshot);
    assert_eq!(
        applied,
        [
            "Deleted /session/sub/gone.txt",
            "Created /session/sub/new.txt"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(src.path().join("session/sub/new.txt")).unwrap(),
        "made\n"
    );
    assert!(!src.path().join("session/sub/gone.txt").exists());
}

#[tokio::test]
async fn bind_is_one_use_and_input_errors_are_clear_4xx() {
    let root = tempfile::tempdir().unwrap();
    let agent = spawn_agent(root.path(), &[]);
    let (_src, archive, _) = source();

    // No token: 401.
    let r = http()
        .put(format!("{}/v1/workspace", agent.url))
        .body(archive.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Exec before bind: 409, nothing runs.
    let (status, v) = exec_raw(
        &agent.url,
        json!({"script": "touch /session/ran", "cwd": "/session"}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("not-bound"))
    );
    assert!(!agent.host("/session/ran").exists());

    // A truncated archive and garbage: 400, nothing placed, still unbound.
    for bad in [
        archive[..archive.len() / 2].to_vec(),
        b"not a tar".repeat(200),
    ] {
        let (status, v) = put(&agent.url, bad).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (400, Some("bad-archive")),
            "{v}"
        );
        for m in ["session", "artifacts", "persistent"] {
            let left: Vec<_> = std::fs::read_dir(root.path().join(m))
                .map(|d| d.map(|e| e.unwrap().file_name()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "{m} after a refused archive: {left:?}");
        }
    }
    let (status, _) = exec_raw(&agent.url, json!({"script": "true", "cwd": "/session"})).await;
    assert_eq!(status, 409);

    // A good archive binds; a second bind is 409.
    let (status, _) = put(&agent.url, archive.clone()).await;
    assert_eq!(status, 200);
    let (status, v) = put(&agent.url, archive).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("already-bound"))
    );

    // Bad exec requests.
    for (body, want) in [
        (json!({"script": "true", "cwd": "session"}), 400),
        (
            json!({"script": "true", "cwd": "/session", "timeoutMs": 0}),
            400,
        ),
        (
            json!({"script": "true", "cwd": "/session", "bogus": 1}),
            400,
        ),
        (json!({"script": "true"}), 400),
        (
            json!({"script": "true", "cwd": "/", "env": {"A=B": "x"}}),
            400,
        ),
        (
            json!({"script": "x".repeat(5 << 20), "cwd": "/session"}),
            413,
        ),
        (
            json!({"script": "x".repeat(130 * 1024), "cwd": "/session"}),
            200,
        ),
    ] {
        let (status, v) = exec_raw(&agent.url, body).await;
        assert_eq!(status, want, "{v}");
    }
    let r = http()
        .post(format!("{}/v1/exec", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = http()
        .get(format!("{}/readyz", agent.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["bound"], true);
}

#[tokio::test]
async fn an_archive_over_the_limit_is_413_and_leaves_the_agent_unbound() {
    let root = tempfile::tempdir().unwrap();
    let agent = spawn_agent(root.path(), &[("KH_TEST_AGENT_MAX_ARCHIVE", "4096")]);
    let src = workspace_root();
    std::fs::write(src.path().join("session/big"), vec![7u8; 64 << 10]).unwrap();
    let mut archive = Vec::new();
    workspace::pack(&spec_of(src.path()), &PackOptions::default(), &mut archive).unwrap();
    let (status, v) = put(&agent.url, archive).await;
    assert_eq!(status, 413, "{v}");
    assert!(!agent.host("/session/big").exists());
    let (status, _) = exec_raw(&agent.url, json!({"script": "true", "cwd": "/session"})).await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn the_time_limit_and_the_end_of_a_command_kill_everything_it_started() {
    let root = tempfile::tempdir().unwrap();
    let agent = spawn_agent(root.path(), &[]);
    let (_src, archive, _) = source();
    assert_eq!(put(&agent.url, archive).await.0, 200);

    let started = Instant::now();
    let (status, v) = exec_raw(
        &agent.url,
        json!({
            "script": "sleep 3101 & setsid sleep 3102 & sleep 3103",
            "cwd": "/session",
            "timeoutMs": 1000,
        }),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["exitCode"].as_i64(), v["timedOut"].as_bool()),
        (Some(124), Some(true))
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for marker in ["3101", "3102", "3103"] {
        assert_eq!(
            sleeping_after_grace(marker),
            Vec::<i32>::new(),
            "sleep {marker} survived the time limit"
        );
    }

    // A command that ends normally leaves nothing behind either, even what escaped its group.
    let (status, v) = exec_raw(
        &agent.url,
        json!({"script": "setsid sleep 3104 > /dev/null 2>&1 &", "cwd": "/session"}),
    )
    .await;
    assert_eq!((status, v["exitCode"].as_i64()), (200, Some(0)), "{v}");
    assert_eq!(
        sleeping_after_grace("3104"),
        Vec::<i32>::new(),
        "an escaped process survived its command"
    );
}

#[tokio::test]
async fn scripts_see_the_image_environment_but_not_the_agents_own_settings() {
    let root = tempfile::tempdir().unwrap();
    let agent = spawn_agent(
        root.path(),
        &[
            ("KH_SECRET", "s3cret-value"),
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("IMAGE_TOOLCHAIN_HOME", "/opt/toolchain"),
        ],
    );
    let (_src, archive, _) = source();
    assert_eq!(put(&agent.url, archive).await.0, 200);
    let env = std::collections::BTreeMap::from([
        ("FROM_SESSION".to_string(), "yes".to_string()),
        ("PATH".to_string(), "/nowhere".to_string()),
    ]);
    let (out, err, code, _) = exec(
        &agent.url,
        "env; cat /proc/$$/environ | tr '\\0' '\\n'",
        "/session",
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("s3cret-value"), "{out}");
    assert!(!out.contains("KH_"), "{out}");
    assert!(!out.contains("KUBERNETES_"), "{out}");
    assert!(out.contains("IMAGE_TOOLCHAIN_HOME=/opt/toolchain"), "{out}");
    assert!(out.contains("FROM_SESSION=yes"), "{out}");
    assert!(
        !out.contains("PATH=/nowhere"),
        "tier-owned PATH is the image's: {out}"
    );
    assert!(Path::new(&agent.host("/session")).is_dir());
}

async fn put_replace(url: &str, body: Vec<u8>) -> (u16, Value) {
    let r = http()
        .put(format!("{url}/v1/workspace?replace=true"))
        .bearer_auth(AGENT_TOKEN)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// A pod kept for its session's next turn (docs/tier1.md, "Lifetimes"): the next turn's bind
/// (`?replace=true`) first empties the tracked mounts of everything the last turn left, removing
/// a symlink out of the workspace without following it, then binds and is checked as any bind;
/// the changes are since the new bind. Refused while a command runs; a plain second bind is still
/// one use.
#[tokio::test]
async fn a_replacing_bind_serves_the_next_turn_with_nothing_of_the_last_workspace() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), "outside\n").unwrap();
    let agent = spawn_agent(root.path(), &[]);
    let (_first, archive, _) = source();
    assert_eq!(put(&agent.url, archive).await.0, 200);
    let none = Default::default();
    let script = format!(
        "echo last > /session/turn1.txt && mkdir -p /artifacts/d/e && echo x > /artifacts/d/e/f && ln -s {} /session/out && chmod 000 /artifacts/d",
        outside.path().display()
    );
    let (_, err, code, _) = exec(&agent.url, &script, "/session", &none).await;
    assert_eq!(code, 0, "{err}");

    // Refused while a command runs.
    let busy = {
        let url = agent.url.clone();
        tokio::spawn(async move {
            exec_raw(&url, json!({"script": "sleep 2", "cwd": "/session"})).await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let next = workspace_root();
    std::fs::write(next.path().join("session/b.txt"), "beta\n").unwrap();
    let mut archive2 = Vec::new();
    let packed2 = workspace::pack(
        &spec_of(next.path()),
        &PackOptions::default(),
        &mut archive2,
    )
    .unwrap();
    let (status, v) = put_replace(&agent.url, archive2.clone()).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("busy")),
        "{v}"
    );
    assert_eq!(busy.await.unwrap().0, 200);

    let (status, bound) = put_replace(&agent.url, archive2.clone()).await;
    assert_eq!(status, 200, "{bound}");
    assert_eq!(
        (bound["files"].as_u64(), bound["bytes"].as_u64()),
        (Some(packed2.entries), Some(packed2.total_bytes))
    );
    for gone in [
        "/session/turn1.txt",
        "/session/a.txt",
        "/session/out",
        "/artifacts/d",
        "/persistent/notes.md",
    ] {
        assert!(
            std::fs::symlink_metadata(agent.host(gone)).is_err(),
            "{gone} survived the replacing bind"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep")).unwrap(),
        "outside\n",
        "the symlink was removed, not followed"
    );
    let (out, _, _, _) = exec(
        &agent.url,
        "ls -A /session /artifacts /persistent; echo made > /session/c.txt",
        "/session",
        &none,
    )
    .await;
    assert_eq!(out, "/artifacts:\n\n/persistent:\n\n/session:\nb.txt\n");
    let changes = http()
        .get(format!("{}/v1/changes", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        apply_changes(next.path(), &changes, &packed2.snapshot),
        ["Created /session/c.txt"]
    );
    // Without `replace` a bind is still one use.
    let (status, v) = put(&agent.url, archive2).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("already-bound"))
    );
}
