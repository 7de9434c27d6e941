//! Persistent Dirs on the test cluster (docs/operator.md "Persistent Dirs"): real claims bound
//! to real volumes, shared by sessions whose worker pods run as different uids, loaded at each
//! turn's start and committed by policy; a ConfigMap shown read-only.

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use kube::api::PostParams;
use kube::{Api, Client};
use kube_harness_crds::condition::{reasons, types};
use kube_harness_crds::HarnessSession;
use kube_harness_e2e::harness::{self, cli_exec, kube_harness, stderr, stdout};
use kube_harness_e2e::namespace::with_namespace;
use serde_json::{json, Value};
use std::time::Duration;

const READY: Duration = Duration::from_secs(180);

async fn claim(client: &Client, ns: &str, name: &str) {
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
}

/// A Ready session with these Persistent Dirs.
async fn session(client: &Client, ns: &str, name: &str, dirs: Value) {
    let s: HarnessSession = serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
        "metadata": {"name": name},
        "spec": {"workerTier": "tier0", "workspace": {"persistentDirs": dirs}}
    }))
    .unwrap();
    Api::<HarnessSession>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    harness::wait_ready(client, ns, name, READY).await.unwrap();
}

/// Runs `script` as a whole turn; the end-turn answer's Persistent Dir reports and turn id.
/// The command's outcome is flattened into the top level of `exec --json`.
fn turn(ns: &str, name: &str, script: &str) -> (i32, String, Value) {
    let out =
        kube_harness(&["exec", "-n", ns, name, "--json", "--end-turn", "--", script]).unwrap();
    let v: Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&out), stderr(&out)));
    let code = v["exitCode"].as_i64().unwrap_or(-1) as i32;
    let text = format!(
        "{}{}",
        v["stdout"].as_str().unwrap_or(""),
        v["stderr"].as_str().unwrap_or("")
    );
    (code, text, v["endTurn"]["turn"].clone())
}

fn outcomes(turn: &Value) -> Vec<(String, String)> {
    turn["persistent"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["dir"].as_str().unwrap_or("").to_string(),
                        r["outcome"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pair(dir: &str, outcome: &str) -> (String, String) {
    (dir.to_string(), outcome.to_string())
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn two_sessions_share_a_read_only_persistent_dir_and_an_after_turn_commit_reaches_the_next_session(
) {
    with_namespace("pdir-share", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        claim(&client, &ns, "team").await;
        let handbook: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "handbook"}, "data": {"style.md": "short sentences"}
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &handbook)
            .await
            .unwrap();
        // A writer commits after its turn; the sessions made after it see the commit.
        session(&client, &ns, "writer", json!([
            {"name": "kb", "source": {"claim": {"claimName": "team", "path": "kb"}}, "commit": "after-turn"}
        ]))
        .await;
        let (code, out, ended) = turn(&ns, "writer", "echo guide > /persistent/kb/guide.md && echo ok");
        assert_eq!((code, out.as_str()), (0, "ok\n"));
        assert_eq!(outcomes(&ended), [pair("kb", "committed")], "{ended}");

        let ro = json!([
            {"name": "kb", "source": {"claim": {"claimName": "team", "path": "kb"}}, "commit": "read-only"},
            {"name": "handbook", "source": {"configMap": {"name": "handbook"}}, "commit": "read-only"}
        ]);
        session(&client, &ns, "reader-a", ro.clone()).await;
        session(&client, &ns, "reader-b", ro).await;
        for reader in ["reader-a", "reader-b"] {
            let (code, out, _) = cli_exec(&ns, reader, "cat /persistent/kb/guide.md /persistent/handbook/style.md", &[]);
            assert_eq!((code, out.as_str()), (0, "guide\nshort sentences"), "{reader}");
            for write in [
                "echo x > /persistent/kb/guide.md",
                "rm /persistent/kb/guide.md",
                "echo x > /persistent/handbook/style.md",
            ] {
                let (code, _, _) = cli_exec(&ns, reader, write, &[]);
                assert_ne!(code, 0, "{reader}: `{write}` changed a read-only dir");
            }
            let (_, _, ended) = turn(&ns, reader, "true");
            assert_eq!(outcomes(&ended), Vec::<(String, String)>::new());
        }
        // The writer's next commit reaches the readers' next turns.
        let (code, _, ended) = turn(&ns, "writer", "echo v2 > /persistent/kb/guide.md");
        assert_eq!((code, outcomes(&ended)), (0, vec![pair("kb", "committed")]));
        let (code, out, _) = turn(&ns, "reader-b", "cat /persistent/kb/guide.md");
        assert_eq!((code, out.as_str()), (0, "v2\n"));
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_manual_commit_happens_only_when_asked() {
    with_namespace("pdir-manual", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        claim(&client, &ns, "drafts").await;
        session(
            &client,
            &ns,
            "author",
            json!([
                {"name": "drafts", "source": {"claim": {"claimName": "drafts"}}, "commit": "manual"}
            ]),
        )
        .await;
        session(&client, &ns, "reader", json!([
            {"name": "drafts", "source": {"claim": {"claimName": "drafts"}}, "commit": "read-only"}
        ]))
        .await;
        let (code, _, first) = turn(&ns, "author", "echo one > /persistent/drafts/d.md");
        assert_eq!((code, outcomes(&first)), (0, vec![pair("drafts", "kept")]));
        let first_id = first["turnId"].as_str().unwrap().to_string();
        let (_, _, second) = turn(&ns, "author", "echo two > /persistent/drafts/d.md");
        assert_eq!(outcomes(&second), [pair("drafts", "kept")]);
        // Not asked: nothing reached the source.
        let (code, out, _) = turn(&ns, "reader", "ls -A /persistent/drafts");
        assert_eq!(
            (code, out.as_str()),
            (0, ""),
            "a manual dir was committed unasked"
        );
        // Asked for the first turn: its version, not the last one, is committed.
        let done = kube_harness(&[
            "commit", "-n", &ns, "author", "--dir", "drafts", "--turn", &first_id,
        ])
        .unwrap();
        assert!(done.status.success(), "{}", stderr(&done));
        let (code, out, _) = turn(&ns, "reader", "cat /persistent/drafts/d.md");
        assert_eq!((code, out.as_str()), (0, "one\n"));
        // A turn that kept nothing: a clear error, exit 1, nothing written.
        let bad = kube_harness(&[
            "commit",
            "-n",
            &ns,
            "author",
            "--dir",
            "drafts",
            "--turn",
            "turn_0_none",
        ])
        .unwrap();
        assert_eq!(bad.status.code(), Some(1));
        assert!(stderr(&bad).contains("no kept version"), "{}", stderr(&bad));
        let (_, out, _) = turn(&ns, "reader", "cat /persistent/drafts/d.md");
        assert_eq!(out, "one\n");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_missing_persistent_dir_source_is_named_in_a_stalled_condition_until_it_exists() {
    with_namespace("pdir-missing", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        let s: HarnessSession = serde_json::from_value(json!({
            "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
            "metadata": {"name": "early"},
            "spec": {"workerTier": "tier0", "workspace": {"persistentDirs": [
                {"name": "kb", "source": {"claim": {"claimName": "later"}}, "commit": "after-turn"},
                {"name": "notes", "source": {"configMap": {"name": "notes"}}, "commit": "read-only"}
            ]}}
        }))
        .unwrap();
        Api::<HarnessSession>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
        let missing = reasons::PERSISTENT_DIR_SOURCE_MISSING;
        let message = harness::wait_condition(&client, &ns, "early", types::READY, missing, |c| {
            c.status == "False" && c.reason == missing
        })
        .await
        .unwrap()
        .message;
        assert!(
            message.contains("PersistentVolumeClaim") && message.contains("later"),
            "{message}"
        );
        let stalled = harness::condition(&client, &ns, "early", types::STALLED)
            .await
            .unwrap();
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str()),
            ("True", missing)
        );
        // exec does not wait out its timeout on a session that cannot start.
        let (code, _, err) = cli_exec(&ns, "early", "true", &[]);
        assert_eq!(code, 126, "{err}");

        // The claim arrives: now the ConfigMap is what is missing.
        claim(&client, &ns, "later").await;
        let message = harness::wait_condition(
            &client,
            &ns,
            "early",
            types::READY,
            "naming the ConfigMap",
            |c| c.message.contains("ConfigMap"),
        )
        .await
        .unwrap()
        .message;
        assert!(message.contains("notes"), "{message}");

        // Both exist: the session starts with nobody touching it, and reads the ConfigMap.
        let notes: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "notes"}, "data": {"a.md": "alpha"}
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &notes)
            .await
            .unwrap();
        harness::wait_ready(&client, &ns, "early", READY)
            .await
            .unwrap();
        let (code, out, _) = cli_exec(&ns, "early", "cat /persistent/notes/a.md", &[]);
        assert_eq!((code, out.as_str()), (0, "alpha"));
    })
    .await;
}
