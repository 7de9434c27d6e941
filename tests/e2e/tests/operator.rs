//! The operator on a real cluster, everything installed by the chart (tests/cluster/install-chart.sh)
//! and the operator running under the chart's RBAC. Run with `--ignored` against a cluster.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use kube::{Api, Client, Resource, ResourceExt};
use kube_harness_client::tunnel::Tunnel;
use kube_harness_client::SessionHandle;
use kube_harness_crds::condition::{reasons, types};
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_e2e::harness::{self, cli_exec, kubectl, stderr, stdout};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::wait::{self, Check};
use kube_harness_protocol::worker_api::ExecRequest;
use serde_json::json;
use std::time::Duration;

const READY: Duration = Duration::from_secs(180);

async fn demo(client: &Client, ns: &str, name: &str) -> HarnessSession {
    harness::demo(client, ns, name, READY).await
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn demo_runs_commands_refuses_escalation_and_is_explained() {
    with_namespace("demo", |client, ns| async move {
        // As a user does it: kubectl apply -f examples/ (demo.yaml names the session `demo`).
        harness::restrict(&client, &ns).await.unwrap();
        let dir = harness::repo_root().join("examples");
        let applied = kubectl(&["apply", "-n", &ns, "-f", dir.to_str().unwrap()]).unwrap();
        assert!(
            applied.status.success(),
            "kubectl apply: {}",
            stderr(&applied)
        );
        harness::wait_ready(&client, &ns, "demo", READY)
            .await
            .unwrap();
        let (code, out, err) = cli_exec(
            &ns,
            "demo",
            "echo hi > /session/a.txt && cat /session/a.txt",
            &[],
        );
        assert_eq!((code, out.as_str()), (0, "hi\n"), "stderr: {err}");

        // Printer columns and kubectl explain.
        let get = kubectl(&["get", "harnesssessions", "-n", &ns]).unwrap();
        let table = stdout(&get);
        for column in ["PHASE", "READY", "TIER", "TIER0-SHARE"] {
            assert!(table.contains(column), "no {column} column:\n{table}");
        }
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("demo") && l.contains("Ready")),
            "{table}"
        );
        let explain = stdout(&kubectl(&["explain", "harnesssession.spec"]).unwrap());
        assert!(
            explain.contains("workspace")
                && explain.contains("Where commands go when Tier-0 cannot run them"),
            "{explain}"
        );

        // Escalation without a Tier-1 tier: 126 and Escalated=False with a reason.
        let (code, _, err) = cli_exec(&ns, "demo", "git status", &[]);
        assert_eq!(code, 126, "stderr: {err}");
        let escalated = harness::condition(&client, &ns, "demo", types::ESCALATED)
            .await
            .unwrap();
        assert_eq!(
            (escalated.status.as_str(), escalated.reason.as_str()),
            ("False", "NoEscalationTier")
        );
        assert!(escalated.message.contains("126"));
        // A denied command is refused on every tier.
        let (code, _, err) = cli_exec(&ns, "demo", "echo x && shutdown now", &[]);
        assert_eq!(code, 126, "stderr: {err}");
        assert!(err.contains("shutdown"), "{err}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn the_worker_has_no_token_no_root_no_writable_root_and_no_network() {
    with_namespace("sec", |client, ns| async move {
        demo(&client, &ns, "sec").await;
        let pod: Pod = Api::namespaced(client.clone(), &ns).get("sec-worker").await.unwrap();
        let spec = pod.spec.clone().unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert!(spec.containers[0].volume_mounts.iter().flatten().all(|m| !m.mount_path.contains("serviceaccount")));
        let (_, out, _) = cli_exec(&ns, "sec", "id -u; test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo no-token; touch /usr/local/x 2>/dev/null && echo wrote-rootfs || echo rootfs-read-only; env | grep -c KUBERNETES || true", &[]);
        // Each session's worker runs as its own uid (RLIMIT_NPROC counts per uid on the node).
        let uid = spec.security_context.as_ref().and_then(|c| c.run_as_user).unwrap();
        assert!(uid >= 100_000 && uid != 65532, "{uid}");
        assert_eq!(out, format!("{uid}\nno-token\nrootfs-read-only\n0\n"));

        // The API server's ClusterIP and another pod's IP: no connection with network off.
        let api_ip = Api::<Service>::namespaced(client.clone(), "default").get("kubernetes").await.unwrap().spec.unwrap().cluster_ip.unwrap();
        let log_pod = Api::<Pod>::namespaced(client.clone(), &harness::release_namespace())
            .list(&ListParams::default().labels("app.kubernetes.io/name=kube-harness-session-log")).await.unwrap()
            .items.into_iter().next().expect("session log pod");
        let log_ip = log_pod.status.unwrap().pod_ip.unwrap();
        for (ip, port) in [(api_ip.as_str(), 443), (log_ip.as_str(), 8080)] {
            let script = format!("python3 -c \"import socket; socket.create_connection(('{ip}', {port}), 3); print('connected')\"");
            let (code, out, err) = cli_exec(&ns, "sec", &script, &[]);
            assert!(code != 0 && !out.contains("connected"), "{ip}:{port} reachable: {code} {out} {err}");
            // `3>`, not `3<>`: the classifier cannot parse `<>`, and under the demo's deny policy
            // that refusal (126, no output) passed this check without trying to connect.
            let (code, out, err) = cli_exec(&ns, "sec", &format!("(exec 3>/dev/tcp/{ip}/{port}) && echo connected || echo blocked"), &[]);
            assert_eq!((code, out.as_str()), (0, "blocked\n"), "{ip}:{port} through bash: {err}");
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn events_reach_the_session_log_and_a_step_replays_without_running_again() {
    with_namespace("log", |client, ns| async move {
        demo(&client, &ns, "log").await;
        let script = "echo line >> /session/count && wc -l < /session/count";
        let step = ["--run-id", "run-1", "--step-key", "s1"];
        let (code, first, err) = cli_exec(&ns, "log", script, &step);
        assert_eq!((code, first.as_str()), (0, "1\n"), "{err}");
        let (code, again, err) = cli_exec(&ns, "log", script, &step);
        assert_eq!(
            (code, again.as_str()),
            (0, "1\n"),
            "replayed, not run again: {err}"
        );
        let handle = SessionHandle::new(client.clone(), &ns, "log");
        let connected = handle.connect(READY).await.unwrap();
        let replay = connected
            .worker
            .exec(&ExecRequest::new(script).step("run-1", "s1"))
            .await
            .unwrap();
        assert!(replay.replayed, "{replay:?}");
        let fresh = connected
            .worker
            .exec(&ExecRequest::new(script).step("run-1", "s2"))
            .await
            .unwrap();
        assert_eq!(
            (fresh.replayed, fresh.outcome.stdout.as_str()),
            (false, "2\n")
        );

        // The events are in the session log service.
        // The worker scoped the run to this session object (namespace and UID).
        assert!(
            replay.run_id.starts_with(&format!("{ns}:")) && replay.run_id.ends_with(":run-1"),
            "{replay:?}"
        );
        let events = harness::session_log_events(&client, &replay.run_id)
            .await
            .unwrap();
        let completed: Vec<_> = events
            .iter()
            .filter(|e| e.event_type == "harness.runtime.command.completed")
            .collect();
        assert_eq!(
            completed.len(),
            2,
            "one per step run (s1 once, s2 once): {events:#?}"
        );
        assert!(completed.iter().any(|e| e.payload["stepKey"] == "s1"));

        // The worker's session-log token is scoped to this session: it reads its own run, and
        // another run of the log is 403.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let secret = secrets.get("log-token").await.unwrap();
        let scoped =
            String::from_utf8_lossy(&secret.data.unwrap()["session-log-token"].0).into_owned();
        assert!(
            scoped.starts_with(&format!("khs1.{ns}:")),
            "not a scoped token"
        );
        let own = harness::session_log_events_as(&client, &replay.run_id, Some(&scoped))
            .await
            .unwrap();
        assert_eq!(own.len(), events.len());
        let other = harness::session_log_events_as(&client, "some-other-run", Some(&scoped)).await;
        assert!(
            matches!(&other, Err(e) if e.to_string().contains("403")),
            "{other:?}"
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_killed_worker_fails_the_command_and_the_session_recovers() {
    with_namespace("kill", |client, ns| async move {
        demo(&client, &ns, "kill").await;
        let (code, _, err) = cli_exec(&ns, "kill", "echo kept > /session/keep", &[]);
        assert_eq!(code, 0, "{err}");
        let before = tier0_commands_at_least(&client, &ns, "kill", 1).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let old_uid = pods.get("kill-worker").await.unwrap().uid().unwrap();
        let handle = SessionHandle::new(client.clone(), &ns, "kill");
        let connected = handle.connect(READY).await.unwrap();
        let running = tokio::spawn(async move {
            connected
                .worker
                .exec(&ExecRequest::new("sleep 60; echo finished"))
                .await
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        harness::kill_pod(&pods, "kill-worker").await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(60), running)
            .await
            .expect("the client must not hang")
            .unwrap();
        assert!(
            result.is_err(),
            "a killed worker is an error result, got {result:?}"
        );

        let pods2 = pods.clone();
        wait::until("a new worker pod", READY, || async {
            match pods2.get_opt("kill-worker").await? {
                Some(p) if p.uid().as_deref() != Some(old_uid.as_str()) => Ok(Check::Done(())),
                other => Ok(Check::Pending(format!("{:?}", other.map(|p| p.uid())))),
            }
        })
        .await
        .unwrap();
        harness::wait_ready(&client, &ns, "kill", READY)
            .await
            .unwrap();
        let (code, out, err) = cli_exec(&ns, "kill", "cat /session/keep", &[]);
        assert_eq!((code, out.as_str()), (0, "kept\n"), "{err}");
        // The new worker counts from zero; the session's usage does not.
        tier0_commands_at_least(&client, &ns, "kill", before + 1).await;
    })
    .await;
}

/// Waits (bounded) until the session's status counts at least `n` Tier-0 commands; returns the
/// count. The operator polls a Ready worker every 15 s.
async fn tier0_commands_at_least(client: &Client, ns: &str, name: &str, n: u64) -> u64 {
    let api: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
    wait::until(
        &format!("status.usage.commandsTier0 >= {n}"),
        Duration::from_secs(60),
        || async {
            let usage = api.get(name).await?.status.and_then(|s| s.usage);
            Ok(match usage.as_ref().map(|u| u.commands_tier0) {
                Some(c) if c >= n => Check::Done(c),
                _ => Check::Pending(format!("{usage:?}")),
            })
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn deleting_a_session_removes_pod_pvc_secret_policy_and_service() {
    with_namespace("del", |client, ns| async move {
        demo(&client, &ns, "del").await;
        Api::<HarnessSession>::namespaced(client.clone(), &ns)
            .delete("del", &DeleteParams::default())
            .await
            .unwrap();
        let c = client.clone();
        let ns2 = ns.clone();
        wait::until(
            "the session's objects to be gone",
            Duration::from_secs(120),
            || {
                let c = c.clone();
                let ns = ns2.clone();
                async move {
                    let left = [
                        Api::<Pod>::namespaced(c.clone(), &ns)
                            .get_opt("del-worker")
                            .await?
                            .map(|_| "pod"),
                        Api::<PersistentVolumeClaim>::namespaced(c.clone(), &ns)
                            .get_opt("del-workspace")
                            .await?
                            .map(|_| "pvc"),
                        Api::<Secret>::namespaced(c.clone(), &ns)
                            .get_opt("del-token")
                            .await?
                            .map(|_| "secret"),
                        Api::<NetworkPolicy>::namespaced(c.clone(), &ns)
                            .get_opt("del-worker")
                            .await?
                            .map(|_| "networkpolicy"),
                        Api::<Service>::namespaced(c.clone(), &ns)
                            .get_opt("del-worker")
                            .await?
                            .map(|_| "service"),
                        Api::<HarnessSession>::namespaced(c.clone(), &ns)
                            .get_opt("del")
                            .await?
                            .map(|_| "session"),
                    ];
                    let left: Vec<_> = left.into_iter().flatten().collect();
                    Ok(if left.is_empty() {
                        Check::Done(())
                    } else {
                        Check::Pending(format!("still there: {left:?}"))
                    })
                }
            },
        )
        .await
        .unwrap();
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn restarting_the_operator_changes_nothing_that_was_ready() {
    with_namespace("restart", |client, ns| async move {
        let before = demo(&client, &ns, "steady").await;
        let ready_at = |s: &HarnessSession| {
            s.status
                .as_ref()
                .unwrap()
                .conditions
                .iter()
                .find(|c| c.type_ == types::READY)
                .unwrap()
                .last_transition_time
                .clone()
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let worker_uid = pods.get("steady-worker").await.unwrap().uid();
        let release: Api<Pod> = Api::namespaced(client.clone(), &harness::release_namespace());
        let selector = ListParams::default().labels("app.kubernetes.io/name=kube-harness-operator");
        let old: Vec<String> = release
            .list(&selector)
            .await
            .unwrap()
            .items
            .iter()
            .filter_map(|p| p.uid())
            .collect();
        for p in release.list(&selector).await.unwrap() {
            release
                .delete(&p.name_any(), &DeleteParams::default())
                .await
                .unwrap();
        }
        let r2 = release.clone();
        wait::until("a new operator pod to be Ready", READY, || async {
            let pods = r2
                .list(&ListParams::default().labels("app.kubernetes.io/name=kube-harness-operator"))
                .await?;
            let fresh_ready = pods.items.iter().any(|p| {
                !old.contains(&p.uid().unwrap_or_default())
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            });
            Ok(if fresh_ready {
                Check::Done(())
            } else {
                Check::Pending(format!("{} pods", pods.items.len()))
            })
        })
        .await
        .unwrap();
        // Give the new leader time to take the Lease and reconcile everything once.
        tokio::time::sleep(Duration::from_secs(25)).await;
        let after: HarnessSession = Api::namespaced(client.clone(), &ns)
            .get("steady")
            .await
            .unwrap();
        assert_eq!(
            pods.get("steady-worker").await.unwrap().uid(),
            worker_uid,
            "the worker pod was replaced"
        );
        assert_eq!(ready_at(&after), ready_at(&before), "Ready flapped");
        assert_eq!(
            after.status.unwrap().phase,
            Some(kube_harness_crds::Phase::Ready)
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn an_idle_session_hibernates_keeps_its_files_and_exec_wakes_it() {
    with_namespace("hib", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        let mut s: HarnessSession = serde_yaml::from_str(
            &std::fs::read_to_string(harness::repo_root().join("examples/demo.yaml")).unwrap(),
        )
        .unwrap();
        s.metadata.name = Some("sleepy".into());
        s.spec.lifetime =
            Some(serde_json::from_value(json!({"idleHibernateSeconds": 10})).unwrap());
        Api::<HarnessSession>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
        harness::wait_ready(&client, &ns, "sleepy", READY)
            .await
            .unwrap();
        let (code, _, err) = cli_exec(&ns, "sleepy", "echo before > /session/f", &[]);
        assert_eq!(code, 0, "{err}");
        let api: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
        wait::until("hibernation", Duration::from_secs(90), || async {
            let s = api.get("sleepy").await?;
            let phase = s.status.and_then(|s| s.phase);
            Ok(if phase == Some(kube_harness_crds::Phase::Hibernated) {
                Check::Done(())
            } else {
                Check::Pending(format!("{phase:?}"))
            })
        })
        .await
        .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pods2 = pods.clone();
        wait::until("the worker pod to go", Duration::from_secs(60), || async {
            Ok(match pods2.get_opt("sleepy-worker").await? {
                None => Check::Done(()),
                Some(_) => Check::Pending("still there".into()),
            })
        })
        .await
        .unwrap();
        assert!(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .get_opt("sleepy-workspace")
                .await
                .unwrap()
                .is_some()
        );
        let (code, out, err) = cli_exec(&ns, "sleepy", "cat /session/f", &[]);
        assert_eq!((code, out.as_str()), (0, "before\n"), "{err}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_namespace_at_its_quota_gets_the_quotas_message_and_exec_exits_126() {
    with_namespace("quota", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
        let quota: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "team-quota"},
            "spec": {"hard": {"pods": "0", "count/harnesssessions.kubeharness.dev": "1"}}
        }))
        .unwrap();
        quotas.create(&PostParams::default(), &quota).await.unwrap();
        // Admission refuses everything the quota covers until the quota controller has
        // computed its usage.
        wait::until("the quota's usage", Duration::from_secs(60), || async {
            let q = quotas.get("team-quota").await?;
            Ok(match q.status.and_then(|s| s.used) {
                Some(used) if used.contains_key("pods") => Check::Done(()),
                other => Check::Pending(format!("{other:?}")),
            })
        })
        .await
        .unwrap();

        // The object-count quota is the API server's own: a second session is refused.
        harness::apply_example(&client, &ns, "demo.yaml", "q")
            .await
            .unwrap();
        let second = harness::apply_example(&client, &ns, "demo.yaml", "q2").await;
        let refused = format!(
            "{:?}",
            second.expect_err("a second session over the count quota")
        );
        assert!(refused.contains("exceeded quota"), "{refused}");

        // The pod quota refuses the worker pod: a condition with the quota's message.
        let api: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
        let ready =
            harness::wait_condition(&client, &ns, "q", types::READY, "QuotaExceeded", |c| {
                c.reason == reasons::QUOTA_EXCEEDED
            })
            .await
            .unwrap();
        assert_eq!(ready.status, "False");
        assert!(
            ready.message.contains("exceeded quota") && ready.message.contains("team-quota"),
            "{}",
            ready.message
        );
        let degraded = harness::condition(&client, &ns, "q", types::DEGRADED)
            .await
            .unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", reasons::QUOTA_EXCEEDED)
        );
        let phase = api.get("q").await.unwrap().status.and_then(|s| s.phase);
        assert_eq!(phase, Some(kube_harness_crds::Phase::Pending));
        // kstatus: a refusal nothing will lift by itself is Stalled, not Reconciling forever.
        let stalled = harness::condition(&client, &ns, "q", types::STALLED)
            .await
            .unwrap();
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str()),
            ("True", reasons::QUOTA_EXCEEDED),
            "{}",
            stalled.message
        );
        assert!(
            stalled.message.contains("team-quota"),
            "{}",
            stalled.message
        );
        let reconciling = harness::condition(&client, &ns, "q", types::RECONCILING)
            .await
            .unwrap();
        assert_eq!(reconciling.status, "False", "{}", reconciling.message);

        // exec does not wait out its timeout: 126 with the quota's message, at once.
        let started = std::time::Instant::now();
        let (code, _, err) = cli_exec(&ns, "q", "true", &[]);
        assert_eq!(code, 126, "{err}");
        assert!(err.contains("exceeded quota"), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );

        // Room in the quota: the session starts without anyone touching it.
        quotas
            .delete("team-quota", &DeleteParams::default())
            .await
            .unwrap();
        harness::wait_ready(&client, &ns, "q", READY).await.unwrap();
        let (code, out, err) = cli_exec(&ns, "q", "echo started", &[]);
        assert_eq!((code, out.as_str()), (0, "started\n"), "{err}");
    })
    .await;
}

/// Creates a raw object and returns the API server's error message (panics if it was accepted).
async fn rejected<K: Resource<DynamicType = ()>>(
    client: &Client,
    ns: Option<&str>,
    obj: serde_json::Value,
) -> String {
    let ar = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => panic!("accepted: {}", obj.name_any()),
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            e.message
        }
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn invalid_objects_are_rejected_with_the_field_named() {
    with_namespace("bad", |client, ns| async move {
        let session = |name: &str, spec: serde_json::Value| json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession", "metadata": {"name": name}, "spec": spec});
        for (name, spec, field) in [
            ("bad-enum", json!({"sameSession": "maybe"}), "spec.sameSession"),
            ("negative", json!({"workspace": {"size": "-1Gi"}}), "spec.workspace.size"),
            ("zero", json!({"workspace": {"size": "0"}}), "spec.workspace.size"),
            ("conflict", json!({"workerTier": "tier0", "escalation": {"tier": "tier0"}}), "spec.escalation.tier"),
            ("lifetime", json!({"lifetime": {"ttlSeconds": 100, "idleHibernateSeconds": 200}}), "spec.lifetime.idleHibernateSeconds"),
            ("type", json!({"runtime": {"network": "yes"}}), "spec.runtime.network"),
            ("ttl-action", json!({"lifetime": {"ttlAction": "Delete"}}), "spec.lifetime.ttlAction"),
            ("ttl-action-enum", json!({"lifetime": {"ttlSeconds": 100, "ttlAction": "Archive"}}), "spec.lifetime.ttlAction"),
            ("suspend-type", json!({"suspend": "yes"}), "spec.suspend"),
        ] {
            let message = rejected::<HarnessSession>(&client, Some(&ns), session(name, spec)).await;
            assert!(message.contains(field), "{name}: {message}");
        }
        let tier = |name: &str, spec: serde_json::Value| json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier", "metadata": {"name": name}, "spec": spec});
        for (name, spec, field) in [
            ("kh-e2e-bad-level0", json!({"level": 0, "template": {"image": "x"}, "capabilities": ["version-control"]}), "spec.capabilities"),
            ("kh-e2e-bad-egress", json!({"level": 1, "template": {"image": "x"}, "capabilities": ["version-control"], "egress": {"mode": "AllowList"}}), "spec.egress.cidrs"),
            ("kh-e2e-bad-level", json!({"level": -1, "template": {"image": "x"}}), "spec.level"),
            ("kh-e2e-bad-env-name", json!({"level": 1, "template": {"image": "x", "env": [{"name": "KH_TOKEN", "value": "x"}]}}), "spec.template.env[0].name"),
            ("kh-e2e-bad-env-home", json!({"level": 1, "template": {"image": "x", "env": [{"name": "HOME", "value": "/"}]}}), "spec.template.env[0].name"),
            ("kh-e2e-bad-env-level0", json!({"level": 0, "template": {"image": "x", "env": [{"name": "A", "value": "b"}]}}), "spec.template.env"),
            ("kh-e2e-bad-egress-level0", json!({"level": 0, "template": {"image": "x"}, "egress": {"mode": "AllowAll"}}), "spec.egress"),
        ] {
            let message = rejected::<SandboxTier>(&client, None, tier(name, spec)).await;
            assert!(message.contains(field), "{name}: {message}");
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn two_operator_replicas_elect_one_leader_and_serve_metrics() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{LogParams, Patch, PatchParams};
    let client = Client::try_default().await.unwrap();
    let release = harness::release_namespace();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &release);
    let scale = |n: i32| json!({"spec": {"replicas": n}});
    deployments
        .patch(
            "kube-harness-operator",
            &PatchParams::default(),
            &Patch::Merge(scale(2)),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release);
    let selector = ListParams::default().labels("app.kubernetes.io/name=kube-harness-operator");
    let outcome = async {
        let p = pods.clone();
        let s = selector.clone();
        let ready = wait::until("two Ready operator pods", READY, || async {
            let list = p.list(&s).await?;
            let ready: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
                .collect();
            Ok(if ready.len() == 2 {
                Check::Done(ready)
            } else {
                Check::Pending(format!("{} ready", ready.len()))
            })
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let lease: Lease = Api::namespaced(client.clone(), &release)
            .get("kube-harness-operator")
            .await
            .unwrap();
        let holder = lease.spec.unwrap().holder_identity.expect("a Lease holder");
        let mut leaders = 0;
        for pod in &ready {
            let tunnel = Tunnel::open(pods.clone(), &pod.name_any(), 8000)
                .await
                .unwrap();
            // Async on purpose: a blocking client here would starve the tunnel's own task.
            let body = reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap()
                .get(format!("http://{}/metrics", tunnel.local))
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .unwrap()
                .text()
                .await
                .unwrap();
            assert!(
                body.contains("kube_harness_reconciles_total")
                    || body.contains("kube_harness_leader"),
                "{body}"
            );
            let leading = body
                .lines()
                .any(|l| l.starts_with("kube_harness_leader ") && l.ends_with(" 1"));
            if leading {
                leaders += 1;
                assert_eq!(
                    pod.name_any(),
                    holder,
                    "the replica reporting leader=1 holds the Lease"
                );
            }
            let logs = pods
                .logs(&pod.name_any(), &LogParams::default())
                .await
                .unwrap();
            assert_eq!(
                logs.contains("leading: starting controllers"),
                leading,
                "{}: {logs}",
                pod.name_any()
            );
        }
        assert_eq!(leaders, 1, "exactly one replica reconciles");
    };
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(outcome)).await;
    deployments
        .patch(
            "kube-harness-operator",
            &PatchParams::default(),
            &Patch::Merge(scale(1)),
        )
        .await
        .unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// (status, reason) of condition `type_`, if present.
fn cond_of(s: &HarnessSession, type_: &str) -> Option<(String, String)> {
    s.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn is(value: &str, reason: &str) -> Option<(String, String)> {
    Some((value.into(), reason.into()))
}

/// What kstatus reads: the status describes the current generation, Ready is `ready`, and
/// Reconciling and Stalled are as given.
fn kstatus_is(
    s: &HarnessSession,
    ready: (&str, &str),
    reconciling: (&str, &str),
    stalled: (&str, &str),
) -> bool {
    let status = s.status.clone().unwrap_or_default();
    status.observed_generation == s.metadata.generation
        && cond_of(s, types::READY) == is(ready.0, ready.1)
        && cond_of(s, types::RECONCILING) == is(reconciling.0, reconciling.1)
        && cond_of(s, types::STALLED) == is(stalled.0, stalled.1)
        && status
            .conditions
            .iter()
            .filter(|c| {
                [types::READY, types::RECONCILING, types::STALLED].contains(&c.type_.as_str())
            })
            .all(|c| c.observed_generation == s.metadata.generation)
}

/// [`harness::wait_session`], panicking with what it saw last.
async fn wait_session(
    api: &Api<HarnessSession>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&HarnessSession) -> bool,
) -> HarnessSession {
    harness::wait_session(api, name, what, timeout, check)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until pod `name` is gone.
async fn pod_gone(pods: &Api<Pod>, name: &str) {
    wait::until(
        &format!("pod {name} to go"),
        Duration::from_secs(90),
        || async {
            Ok(match pods.get_opt(name).await? {
                None => Check::Done(()),
                Some(_) => Check::Pending("still there".into()),
            })
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn spec_suspend_hibernates_exec_refuses_it_and_unsuspending_wakes_it() {
    with_namespace("suspend", |client, ns| async move {
        demo(&client, &ns, "nap").await;
        let (code, _, err) = cli_exec(&ns, "nap", "echo kept > /session/f", &[]);
        assert_eq!(code, 0, "{err}");
        let api: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
        let ready = |s: &HarnessSession| {
            kstatus_is(
                s,
                ("True", reasons::WORKER_READY),
                ("False", reasons::RECONCILED),
                ("False", reasons::AS_EXPECTED),
            )
        };
        wait_session(&api, "nap", "Ready and Current", READY, ready).await;

        // As a GitOps tool would: a change of spec.
        let suspend = |value: bool| {
            let api = api.clone();
            async move {
                api.patch(
                    "nap",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"suspend": value}})),
                )
                .await
                .unwrap()
            }
        };
        suspend(true).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pod_gone(&pods, "nap-worker").await;
        let suspended = wait_session(
            &api,
            "nap",
            "suspended and Current",
            Duration::from_secs(60),
            |s| {
                kstatus_is(
                    s,
                    ("False", reasons::SUSPENDED),
                    ("False", reasons::RECONCILED),
                    ("False", reasons::AS_EXPECTED),
                )
            },
        )
        .await;
        let status = suspended.status.clone().unwrap();
        assert_eq!(status.phase, Some(kube_harness_crds::Phase::Hibernated));
        assert_eq!(
            cond_of(&suspended, types::HIBERNATED),
            is("True", reasons::SUSPENDED)
        );
        assert!(
            status.worker_pod.is_none() && status.address.is_none(),
            "{status:?}"
        );
        assert!(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .get_opt("nap-workspace")
                .await
                .unwrap()
                .is_some(),
            "the workspace is kept"
        );
        // exec does not wake a session against its spec: 126 at once, saying why.
        let started = std::time::Instant::now();
        let (code, _, err) = cli_exec(&ns, "nap", "cat /session/f", &[]);
        assert_eq!(code, 126, "{err}");
        assert!(
            err.contains("suspended") && err.contains("spec.suspend"),
            "{err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "it did not wait"
        );
        assert!(
            pods.get_opt("nap-worker").await.unwrap().is_none(),
            "not woken"
        );

        suspend(false).await;
        wait_session(&api, "nap", "awake again", READY, ready).await;
        let (code, out, err) = cli_exec(&ns, "nap", "cat /session/f", &[]);
        assert_eq!((code, out.as_str()), (0, "kept\n"), "{err}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_session_past_its_ttl_is_kept_expired_with_its_pods_and_workspace_released() {
    with_namespace("ttl", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        let mut s = harness::example_session("demo.yaml", "brief").unwrap();
        // The shortest TTL the CRD admits.
        s.spec.lifetime = Some(serde_json::from_value(json!({"ttlSeconds": 60})).unwrap());
        let api: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
        api.create(&PostParams::default(), &s).await.unwrap();
        harness::wait_ready(&client, &ns, "brief", READY)
            .await
            .unwrap();
        let expired = wait_session(
            &api,
            "brief",
            "expired, released and Current",
            Duration::from_secs(150),
            |s| {
                kstatus_is(
                    s,
                    ("False", reasons::EXPIRED),
                    ("False", reasons::RECONCILED),
                    ("False", reasons::AS_EXPECTED),
                )
            },
        )
        .await;
        // The object is still there (a GitOps tool would recreate a deleted one), and says so.
        assert!(expired.metadata.deletion_timestamp.is_none());
        let status = expired.status.clone().unwrap();
        assert_eq!(status.phase, Some(kube_harness_crds::Phase::Expired));
        assert!(
            status.worker_pod.is_none() && status.address.is_none(),
            "{status:?}"
        );
        // What it held is released: no worker pod, no workspace PVC.
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        assert!(pods.get_opt("brief-worker").await.unwrap().is_none());
        assert!(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .get_opt("brief-workspace")
                .await
                .unwrap()
                .is_none()
        );
        let (code, _, err) = cli_exec(&ns, "brief", "true", &[]);
        assert_eq!(code, 126, "{err}");
        assert!(err.contains("expired"), "{err}");
        // And it stays so: nothing recreates the worker.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(pods.get_opt("brief-worker").await.unwrap().is_none());
        assert_eq!(
            api.get("brief").await.unwrap().status.unwrap().phase,
            Some(kube_harness_crds::Phase::Expired)
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_session_naming_a_missing_tier_is_stalled_and_the_installed_tier_is_current() {
    with_namespace("stalled", |client, ns| async move {
        harness::restrict(&client, &ns).await.unwrap();
        let mut s = harness::example_session("demo.yaml", "lost").unwrap();
        s.spec.worker_tier = "no-such-tier".into();
        let api: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
        api.create(&PostParams::default(), &s).await.unwrap();
        wait_session(&api, "lost", "Stalled", Duration::from_secs(60), |s| {
            kstatus_is(
                s,
                ("False", reasons::WORKER_TIER_NOT_FOUND),
                ("False", reasons::RECONCILED),
                ("True", reasons::WORKER_TIER_NOT_FOUND),
            )
        })
        .await;
        // The chart's tier: checked, its (empty) pool full, kstatus Current.
        let tier = Api::<SandboxTier>::all(client.clone())
            .get("tier0")
            .await
            .unwrap();
        let status = tier.status.clone().unwrap_or_default();
        assert_eq!(status.observed_generation, tier.metadata.generation);
        let c = |type_: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == type_)
                .map(|c| (c.status.clone(), c.reason.clone(), c.observed_generation))
        };
        let gen = tier.metadata.generation;
        assert_eq!(
            c(types::READY),
            Some(("True".into(), reasons::VALID.into(), gen))
        );
        assert_eq!(
            c(types::RECONCILING),
            Some(("False".into(), reasons::RECONCILED.into(), gen)),
            "{status:?}"
        );
        assert_eq!(
            c(types::STALLED),
            Some(("False".into(), reasons::AS_EXPECTED.into(), gen)),
            "{status:?}"
        );
    })
    .await;
}
