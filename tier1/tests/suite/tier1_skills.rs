//! The session's skills on the Tier-1 agent (`PUT /v1/skills`), as a real process over loopback:
//! a command reads them at `/.agents` and cannot change them (a read-only mount: every write,
//! unlink, rename and chmod is EROFS, also as root), what changed there never comes back in the
//! change archive, they are taken only between a bind and the turn's first command, and hostile
//! skills archives are refused with what was shown left as it was. Runs as root (the agent
//! presents a temp root through its own mount namespace, binding `.agents` read-only).

use super::tier1_support::{
    all_refused, b64_field, skills_archive, skills_dir, spawn_agent, spec_of, workspace_root,
    AgentProcess, AGENT_TOKEN, CHANGE_SKILLS,
};
use kube_harness_workspace::{self as workspace, ApplyOptions, PackOptions, MANIFEST_NAME};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tar::{EntryType, Header};

async fn put(agent: &AgentProcess, route: &str, body: Vec<u8>) -> (u16, Value) {
    let r = reqwest::Client::new()
        .put(format!("{}{route}", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Runs `script` in /session; (stdout, stderr, exit code).
async fn exec(agent: &AgentProcess, script: &str) -> (String, String, i64) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/exec", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .json(&json!({"script": script, "cwd": "/session", "env": {}, "timeoutMs": 30000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    (
        b64_field(&v, "stdoutB64"),
        b64_field(&v, "stderrB64"),
        v["exitCode"].as_i64().unwrap(),
    )
}

/// A small workspace, packed as the worker hands it over.
fn workspace_archive() -> (tempfile::TempDir, Vec<u8>, workspace::PackReport) {
    let src = workspace_root();
    std::fs::write(src.path().join("session/a.txt"), "alpha\n").unwrap();
    let mut archive = Vec::new();
    let report =
        workspace::pack(&spec_of(src.path()), &PackOptions::default(), &mut archive).unwrap();
    (src, archive, report)
}

/// Every path below `dir` with its content (files) or target (links), for before/after checks.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let shown = if meta.is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if meta.is_dir() {
                stack.push(p.clone());
                "dir".into()
            } else {
                std::fs::read_to_string(&p).unwrap_or_else(|_| "<binary>".into())
            };
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), shown);
        }
    }
    out
}

#[tokio::test]
async fn a_tier1_command_reads_the_skills_and_cannot_change_them_nor_send_them_back() {
    let root = workspace_root();
    let agent = spawn_agent(root.path(), &[]);
    let (src, archive, _) = workspace_archive();
    let (status, v) = put(&agent, "/v1/workspace", archive).await;
    assert_eq!(status, 200, "{v}");
    let skills = skills_dir("# Review\n");
    let (archive, packed) = skills_archive(skills.path());
    let (status, v) = put(&agent, "/v1/skills", archive).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["files"].as_u64(), v["bytes"].as_u64()),
        (Some(packed.entries), Some(packed.total_bytes))
    );

    // Root in the agent's namespace, and still: every change is refused by the mount.
    let (out, err, code) = exec(&agent, CHANGE_SKILLS).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, all_refused("# Review\n"));
    assert_eq!(
        std::fs::read_to_string(agent.host("/.agents/review/SKILL.md")).unwrap(),
        "# Review\n"
    );

    // Even when something under /.agents changes on Tier-1 (here the host writes it), the
    // change archive carries nothing of it: only the tracked mounts travel back.
    std::fs::write(agent.host("/.agents/review/SKILL.md"), "forged\n").unwrap();
    std::fs::write(agent.host("/.agents/planted.md"), "planted\n").unwrap();
    let (_, _, code) = exec(&agent, "echo b > /session/b.txt").await;
    assert_eq!(code, 0);
    let changes = reqwest::Client::new()
        .get(format!("{}/v1/changes", agent.url))
        .bearer_auth(AGENT_TOKEN)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    // The worker's side: its /.agents (the skills it sent) beside its workspace.
    std::fs::create_dir_all(src.path().join(".agents/review")).unwrap();
    std::fs::write(src.path().join(".agents/review/SKILL.md"), "# Review\n").unwrap();
    let mut base = Vec::new();
    let base = workspace::pack(&spec_of(src.path()), &PackOptions::default(), &mut base)
        .unwrap()
        .snapshot;
    let report = workspace::apply(
        &spec_of(src.path()),
        &changes[..],
        &base,
        &ApplyOptions::default(),
    )
    .unwrap();
    let applied: Vec<_> = report
        .applied
        .iter()
        .map(|c| c.harness_path.clone())
        .collect();
    assert_eq!(applied, [PathBuf::from("/session/b.txt")]);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(
        std::fs::read_to_string(src.path().join(".agents/review/SKILL.md")).unwrap(),
        "# Review\n"
    );
    assert!(!src.path().join(".agents/planted.md").exists());
}

#[tokio::test]
async fn skills_are_taken_only_between_a_bind_and_the_turns_first_command() {
    let root = workspace_root();
    let agent = spawn_agent(root.path(), &[]);
    // Before the bind: taken.
    let (archive, _) = skills_archive(skills_dir("# one\n").path());
    assert_eq!(put(&agent, "/v1/skills", archive).await.0, 200);
    let (_, ws, _) = workspace_archive();
    assert_eq!(put(&agent, "/v1/workspace", ws).await.0, 200);
    let (out, _, _) = exec(&agent, "cat /.agents/review/SKILL.md").await;
    assert_eq!(out, "# one\n");
    // A command ran: a process it left (or its token, which it can read) gets nothing.
    let two = skills_dir("# two\n");
    std::fs::write(two.path().join("more.md"), "more\n").unwrap();
    let (archive, _) = skills_archive(two.path());
    let (status, v) = put(&agent, "/v1/skills", archive.clone()).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("commands-ran")),
        "{v}"
    );
    // The next turn on a kept pod binds anew, then its skills replace the last ones whole.
    let (_, ws, _) = workspace_archive();
    assert_eq!(put(&agent, "/v1/workspace?replace=true", ws).await.0, 200);
    assert_eq!(put(&agent, "/v1/skills", archive).await.0, 200);
    let (out, _, _) = exec(&agent, "cat /.agents/review/SKILL.md /.agents/more.md").await;
    assert_eq!(out, "# two\nmore\n");
    // Skills removed from the session: a kept pod shows none.
    let (_, ws, _) = workspace_archive();
    assert_eq!(put(&agent, "/v1/workspace?replace=true", ws).await.0, 200);
    let mut empty = Vec::new();
    kube_harness_tier1::skills::pack(None, &mut empty).unwrap();
    assert_eq!(put(&agent, "/v1/skills", empty).await.0, 200);
    let (out, _, _) = exec(&agent, "ls -A /.agents | wc -l").await;
    assert_eq!(out.trim(), "0");
}

/// A header with raw name (and link name) bytes, bypassing the tar builder's path checks.
fn raw(name: &str, kind: EntryType, size: u64, link: Option<&str>) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(0);
    let old = h.as_old_mut();
    old.name.fill(0);
    old.name[..name.len()].copy_from_slice(name.as_bytes());
    if let Some(l) = link {
        old.linkname.fill(0);
        old.linkname[..l.len()].copy_from_slice(l.as_bytes());
    }
    h.set_cksum();
    h
}

/// A skills archive as a hostile sender would write it: a manifest claiming `mounts` and
/// `total` bytes, then `entries` (a file entry's content is its name's bytes up to its size).
fn crafted(mounts: &[&str], total: u64, entries: &[Header]) -> Vec<u8> {
    let manifest = json!({
        "format": workspace::FORMAT, "kind": "full", "mounts": mounts,
        "entries": entries.len(), "totalBytes": total, "digest": "sha256:00",
    })
    .to_string();
    let mut b = tar::Builder::new(Vec::new());
    let m = raw(
        MANIFEST_NAME,
        EntryType::Regular,
        manifest.len() as u64,
        None,
    );
    b.append(&m, manifest.as_bytes()).unwrap();
    for h in entries {
        let size = h.size().unwrap() as usize;
        b.append(h, &vec![b'x'; size.min(64)][..]).unwrap();
    }
    b.into_inner().unwrap()
}

#[tokio::test]
async fn hostile_skills_archives_are_refused_and_change_nothing() {
    let root = workspace_root();
    let agent = spawn_agent(root.path(), &[]);
    // The workspace bound (its /session/a.txt is what the hostile names aim at), no command yet.
    let (_, ws, _) = workspace_archive();
    assert_eq!(put(&agent, "/v1/workspace", ws).await.0, 200);
    let (archive, _) = skills_archive(skills_dir("# Review\n").path());
    assert_eq!(put(&agent, "/v1/skills", archive).await.0, 200);
    let before = tree(root.path());
    let dir = |n: &str| raw(n, EntryType::Directory, 0, None);
    let file = |n: &str, size: u64| raw(n, EntryType::Regular, size, None);
    let link = |n: &str, to: &str| raw(n, EntryType::Symlink, 0, Some(to));
    let over = kube_harness_tier1::skills::MAX_SKILLS_BYTES + 1;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "a `..` name",
            crafted(
                &["/.agents"],
                1,
                &[dir(".agents"), file(".agents/../session/a.txt", 1)],
            ),
            "`..` path component",
        ),
        (
            "an absolute name",
            crafted(&["/.agents"], 1, &[dir(".agents"), file("/etc/evil", 1)]),
            "absolute path",
        ),
        (
            "another mount",
            crafted(
                &["/.agents", "/session"],
                1,
                &[dir(".agents"), dir("session"), file("session/a.txt", 1)],
            ),
            "outside the workspace mounts",
        ),
        (
            "a name outside /.agents",
            crafted(
                &["/.agents"],
                1,
                &[dir(".agents"), file("session/a.txt", 1)],
            ),
            "outside the workspace mounts",
        ),
        (
            "a link out of /.agents",
            crafted(
                &["/.agents"],
                0,
                &[dir(".agents"), link(".agents/out", "../session/a.txt")],
            ),
            "leaves the workspace",
        ),
        (
            "an absolute link",
            crafted(
                &["/.agents"],
                0,
                &[dir(".agents"), link(".agents/passwd", "/etc/passwd")],
            ),
            "leaves the workspace",
        ),
        (
            "a write through a link",
            crafted(
                &["/.agents"],
                1,
                &[
                    dir(".agents"),
                    dir(".agents/d"),
                    link(".agents/l", "d"),
                    file(".agents/l/f", 1),
                ],
            ),
            "symlink or not a directory",
        ),
        (
            "a hard link",
            crafted(
                &["/.agents"],
                0,
                &[
                    dir(".agents"),
                    raw(".agents/h", EntryType::Link, 0, Some("session/a.txt")),
                ],
            ),
            "hard links",
        ),
        (
            "a device",
            crafted(
                &["/.agents"],
                0,
                &[dir(".agents"), raw(".agents/dev", EntryType::Char, 0, None)],
            ),
            "device and fifo",
        ),
        (
            "more content than skills hold",
            crafted(&["/.agents"], over, &[dir(".agents")]),
            "limit",
        ),
        (
            "a file larger than skills hold",
            crafted(
                &["/.agents"],
                1,
                &[dir(".agents"), file(".agents/big", over)],
            ),
            "limit",
        ),
        ("not an archive", b"#!/bin/sh\nrm -rf /\n".to_vec(), ""),
    ];
    for (what, body, why) in cases {
        let (status, v) = put(&agent, "/v1/skills", body).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (400, Some("bad-archive")),
            "{what}: {v}"
        );
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{what}: {message}");
        assert_eq!(tree(root.path()), before, "{what} changed something");
    }
    // Over the archive limit: refused from its declared length, nothing read into place.
    let huge = vec![0u8; kube_harness_tier1::skills::MAX_SKILLS_ARCHIVE_BYTES as usize + 1];
    let (status, v) = put(&agent, "/v1/skills", huge).await;
    assert_eq!(status, 413, "{v}");
    assert_eq!(tree(root.path()), before);
    // The agent still takes good skills.
    let (archive, _) = skills_archive(skills_dir("# Again\n").path());
    let (status, v) = put(&agent, "/v1/skills", archive).await;
    assert_eq!(status, 200, "{v}");
    let (out, _, _) = exec(&agent, "cat /.agents/review/SKILL.md /session/a.txt").await;
    assert_eq!(out, "# Again\nalpha\n");
}
