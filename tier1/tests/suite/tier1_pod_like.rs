//! The agent the way a Tier-1 pod runs it, built by hand on this host (needs root): read-only
//! root, the three workspace directories as separate volumes, uid 65532, an empty environment,
//! `--workspace-root /` (commands run directly, no namespace of the agent's own). Binding must
//! place files across volumes (a copy, not a rename) and the round trip must hold.

use super::tier1_support::keeper_proc::spawn_keeper;
use super::tier1_support::{
    all_refused, apply_changes, b64_field, skills_archive, skills_dir, spawn_agent_pod_like,
    spawn_agent_pod_like_with_skills, spec_of, workspace_root, AGENT_TOKEN, CHANGE_SKILLS,
};
use kube_harness_runtime::state;
use kube_harness_workspace::{self as workspace, PackOptions};
use serde_json::{json, Value};

fn not_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() != 0 }
}

#[tokio::test]
async fn a_pod_like_agent_binds_across_volumes_runs_as_65532_and_returns_changes() {
    if not_root() {
        eprintln!("skipped: needs root to build the pod-like root");
        return;
    }
    let src = workspace_root();
    std::fs::create_dir_all(src.path().join("session/src")).unwrap();
    std::fs::write(src.path().join("session/src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(src.path().join("artifacts/out")).unwrap();
    std::fs::write(src.path().join("artifacts/out/a.txt"), "artifact\n").unwrap();
    std::fs::write(src.path().join("persistent/notes.md"), "notes\n").unwrap();
    let mut archive = Vec::new();
    let packed =
        workspace::pack(&spec_of(src.path()), &PackOptions::default(), &mut archive).unwrap();

    let pod = tempfile::tempdir().unwrap();
    let agent = spawn_agent_pod_like(pod.path());
    let http = reqwest::Client::new();
    let r = http
        .put(format!("{}/v1/workspace", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .body(archive)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let bound: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{bound}");
    assert_eq!(bound["files"], packed.entries);
    assert_eq!(
        std::fs::read_to_string(agent.host("/artifacts/out/a.txt")).unwrap(),
        "artifact\n",
        "placed on its own volume"
    );
    for m in ["/session", "/artifacts", "/persistent"] {
        let names: Vec<String> = std::fs::read_dir(agent.host(m))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names.iter().any(|n| n.starts_with(".kube-harness")),
            "{m}: {names:?}"
        );
    }

    let script = state::wrap(
        "id -u; cat /session/src/main.rs /artifacts/out/a.txt; echo more >> /persistent/notes.md; \
         mkdir -p /artifacts/build && echo bin > /artifacts/build/app; rm /session/src/main.rs; \
         touch /etc/kh-escape 2>/dev/null && echo root-writable; cd /session/src",
    );
    let r = http
        .post(format!("{}/v1/exec", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .json(&json!({"script": script, "cwd": "/session", "env": {"FROM_SESSION": "1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let text = |f: &str| b64_field(&v, f);
    assert_eq!(v["exitCode"], 0, "{}", text("stderrB64"));
    assert_eq!(text("stdoutB64"), "65532\nfn main() {}\nartifact\n");
    let (cwd, env) = state::parse(text("stateB64").as_bytes()).unwrap();
    assert_eq!(cwd.to_str(), Some("/session/src"));
    assert_eq!(env.get("FROM_SESSION").map(String::as_str), Some("1"));

    let changes = http
        .get(format!("{}/v1/changes", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let applied = apply_changes(src.path(), &changes, &packed.snapshot);
    assert_eq!(
        applied,
        [
            "Created /artifacts/build",
            "Created /artifacts/build/app",
            "Modified /persistent/notes.md",
            "Deleted /session/src/main.rs",
        ]
    );
    assert_eq!(
        std::fs::read_to_string(src.path().join("persistent/notes.md")).unwrap(),
        "notes\nmore\n"
    );
}

/// The skills as in a pod: the keeper (its own process, uid 65532) is the one writer of the
/// volume bound read-only at `/.agents` in the agent's view. A command (uid 65532 too, so the
/// owner of the skill files, mode 0644) reads them and cannot change them: the mount refuses.
/// It cannot reach the keeper (taken by the agent) nor look into the agent (not dumpable). When
/// the agent goes, the keeper ends.
#[tokio::test]
async fn a_pod_like_agent_shows_the_skills_its_keeper_wrote_read_only() {
    if not_root() {
        eprintln!("skipped: needs root to build the pod-like root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let pod = tempfile::tempdir().unwrap();
    // The keeper runs as 65532 outside the view: it must reach the volume's path.
    std::fs::set_permissions(pod.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let agents = pod.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    std::os::unix::fs::chown(&agents, Some(65532), Some(65532)).unwrap();
    let mut keeper = spawn_keeper(&agents, true);
    let mut agent = spawn_agent_pod_like_with_skills(pod.path(), &agents, keeper.addr);
    let http = reqwest::Client::new();
    let put = |route: &str, body: Vec<u8>| {
        http.put(format!("{}{route}", agent.url))
            .bearer_auth(AGENT_TOKEN)
            .body(body)
            .send()
    };
    let src = workspace_root();
    let mut archive = Vec::new();
    workspace::pack(&spec_of(src.path()), &PackOptions::default(), &mut archive).unwrap();
    assert_eq!(put("/v1/workspace", archive).await.unwrap().status(), 200);
    // A ConfigMap volume's layout, as Tier-0 shows it: links through `..data`.
    let skills = skills_dir("# Review\n");
    std::os::unix::fs::symlink("review", skills.path().join("..data")).unwrap();
    let (archive, packed) = skills_archive(skills.path());
    let r = put("/v1/skills", archive).await.unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["files"], packed.entries);
    // A hostile archive through the keeper: refused, and the keeper stays.
    let r = put("/v1/skills", b"junk".to_vec()).await.unwrap();
    assert_eq!(r.status(), 400);

    let exec = |script: String| {
        http.post(format!("{}/v1/exec", agent.url))
            .bearer_auth(AGENT_TOKEN)
            .json(&json!({"script": script, "cwd": "/session", "env": {}}))
            .send()
    };
    let script = format!(
        "id -u; stat -c '%u %a' /.agents/review/SKILL.md; cat /.agents/..data/SKILL.md\n{CHANGE_SKILLS}"
    );
    let v: Value = exec(script).await.unwrap().json().await.unwrap();
    assert_eq!(v["exitCode"], 0, "{}", b64_field(&v, "stderrB64"));
    assert_eq!(
        b64_field(&v, "stdoutB64"),
        format!("65532\n65532 644\n# Review\n{}", all_refused("# Review\n"))
    );
    let port = keeper.addr.port();
    let script = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo keeper-reached; ls /proc/$PPID/fd >/dev/null 2>&1 && echo agent-open; true"
    );
    let v: Value = exec(script).await.unwrap().json().await.unwrap();
    assert_eq!(
        b64_field(&v, "stdoutB64"),
        "",
        "{}",
        b64_field(&v, "stderrB64")
    );
    assert_eq!(
        std::fs::read_to_string(agents.join("review/SKILL.md")).unwrap(),
        "# Review\n"
    );
    agent.kill();
    assert!(
        keeper.exits_cleanly(std::time::Duration::from_secs(10)),
        "the keeper outlived its agent"
    );
}
