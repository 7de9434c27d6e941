//! Tier-1 pods on the real cluster: escalation provisions a pod from the session's SandboxTier, the
//! workspace goes over and comes back, warm pools hand out prepared pods, and failures end the turn
//! cleanly. Run with `--ignored` against a cluster with the chart installed and the toolchain image
//! loaded (tests/cluster/images.sh).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_e2e::harness::{self, kube_harness, stderr, stdout};
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::tiers::{
    no_tier1_pod_left, pool_in, pool_pods, pool_settles, session, session_with, tier1_pods,
    toolchain_tier, with_tier, TOOLCHAIN,
};
use kube_harness_e2e::wait::{self, Check};
use serde_json::{json, Value};
use std::time::Duration;

const READY: Duration = Duration::from_secs(180);

/// `kube-harness exec --json` in the session's own run → the parsed response.
fn exec_json(ns: &str, name: &str, script: &str, end_turn: bool) -> Value {
    let mut args = vec!["exec", "-n", ns, name, "--json", "--run-id", ns];
    if end_turn {
        args.push("--end-turn");
    }
    args.extend(["--", script]);
    let out = kube_harness(&args).unwrap();
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| {
        panic!(
            "exec {script:?}: not JSON ({e}); stdout: {}; stderr: {}",
            stdout(&out),
            stderr(&out)
        )
    })
}

/// The session-log run an exec went to: the worker scopes the requested run to its session
/// object (`NAMESPACE:UID:RUN`) and reports the result.
fn run_of(r: &Value) -> &str {
    r["runId"].as_str().expect("runId in the exec response")
}

/// The session log events of a run, by type.
async fn events(client: &Client, run: &str) -> Vec<(String, Value)> {
    harness::session_log_events(client, run)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.event_type, Value::Object(e.payload)))
        .collect()
}

fn escalations(events: &[(String, Value)]) -> Vec<&Value> {
    events
        .iter()
        .filter(|(t, _)| t == "harness.tier.escalated")
        .map(|(_, p)| p)
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn git_runs_on_a_tier1_pod_and_the_repository_comes_back() {
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-git"), || async {
        with_namespace("t1git", |client, ns| async move {
            session(&client, &ns, "git", "e2e-git").await;
            // Watch for the Tier-1 pod while the command runs (the CLI runs on a blocking thread, so
            // this task keeps polling).
            let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let watcher = {
                let (client, ns, done) = (client.clone(), ns.clone(), done.clone());
                tokio::spawn(async move {
                    let mut seen = std::collections::BTreeSet::new();
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        for p in tier1_pods(&client, &ns, "git").await {
                            seen.insert(p.name_any());
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    seen
                })
            };
            let script = "git init -q r && cd r && echo x > f && git add f && git -c user.name=a -c user.email=a@b commit -qm m && git log --oneline | wc -l";
            let r = {
                let ns = ns.clone();
                tokio::task::spawn_blocking(move || exec_json(&ns, "git", script, true))
                    .await
                    .unwrap()
            };
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let seen = watcher.await.unwrap();
            assert_eq!(r["stdout"], "1\n", "{r:#}");
            assert_eq!((r["exitCode"].as_i64(), r["tier"].as_i64()), (Some(0), Some(1)), "{r:#}");
            let summary = &r["endTurn"]["turn"];
            assert!(
                summary["fileChanges"].as_array().unwrap().iter().any(|c| c["path"] == "/session/r/.git/HEAD"),
                "{summary:#}"
            );
            // The repository is in the Tier-0 workspace; the next turn is plain Tier-0.
            let r = exec_json(&ns, "git", "test -f /session/r/.git/HEAD && cat /session/r/f", true);
            assert_eq!((r["stdout"].as_str(), r["tier"].as_i64()), (Some("x\n"), Some(0)), "{r:#}");
            no_tier1_pod_left(&client, &ns, "git").await;

            let ev = events(&client, run_of(&r)).await;
            let esc = escalations(&ev);
            assert_eq!(esc.len(), 1, "{ev:#?}");
            assert_eq!(esc[0]["sandbox"]["source"], "ordinary", "{:#}", esc[0]);
            let pod = esc[0]["sandbox"]["pod"].as_str().unwrap().to_string();
            assert!(pod.starts_with("t1-"), "{pod}");
            assert!(seen.contains(&pod), "the Tier-1 pod {pod} was seen while the command ran: {seen:?}");
            let created = ev.iter().position(|(t, p)| t == "harness.file.created" && p["path"] == "/session/r/.git/HEAD" && p["source"] == "merge");
            let usage = ev.iter().position(|(t, _)| t == "harness.turn.usage");
            assert!(matches!((created, usage), (Some(c), Some(u)) if c < u), "file events before usage: {ev:#?}");
            let higher = &ev[usage.unwrap()].1["higherTier"];
            assert_eq!(higher["provider"], "pod", "{higher:#}");
            assert!(higher["bytesHandedOver"].as_u64().is_some() && higher["bytesReturned"].as_u64().unwrap() > 0, "{higher:#}");
            assert!(higher["commands"].as_u64() == Some(1), "{higher:#}");
        })
        .await;
    })
    .await;
}

/// Tier-1 pods count against the session's namespace (docs/tier1.md, "Tenancy"): the pod is made
/// there, and a ResourceQuota that has no room for it refuses it: the escalating command exits
/// 126 at once with the quota's message, the session's Escalated condition says QuotaExceeded,
/// and Tier-0 goes on. With room again, the next turn escalates.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_tier1_pod_runs_in_the_sessions_namespace_and_its_quota_refuses_it_clearly() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-quota"), || async {
        with_namespace("t1quota", |client, ns| async move {
            session(&client, &ns, "q", "e2e-quota").await;
            // Room: the Tier-1 pod is in the session's namespace.
            let r = exec_json(&ns, "q", "git init -q a && echo ok", true);
            assert_eq!(
                (r["exitCode"].as_i64(), r["tier"].as_i64()),
                (Some(0), Some(1)),
                "{r:#}"
            );
            no_tier1_pod_left(&client, &ns, "q").await;
            // No room: pods limited to the one the worker has.
            let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
            let quota: ResourceQuota = serde_json::from_value(json!({
                "metadata": {"name": "team-quota"}, "spec": {"hard": {"pods": "1"}}
            }))
            .unwrap();
            quotas.create(&Default::default(), &quota).await.unwrap();
            wait::until("the quota observed", Duration::from_secs(60), || async {
                let q = quotas.get("team-quota").await?;
                let used = q
                    .status
                    .and_then(|s| s.used)
                    .and_then(|u| u.get("pods").cloned());
                Ok(match used {
                    Some(u) if u.0 == "1" => Check::Done(()),
                    other => Check::Pending(format!("used {other:?}")),
                })
            })
            .await
            .unwrap();
            let started = std::time::Instant::now();
            let r = exec_json(&ns, "q", "git init -q b && echo escalated", true);
            assert_eq!(r["exitCode"].as_i64(), Some(126), "{r:#}");
            assert!(
                r["stderr"]
                    .as_str()
                    .unwrap_or("")
                    .contains("exceeded quota: team-quota"),
                "the quota's message reaches the caller: {r:#}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "refused at once, not after a wait"
            );
            let hs: HarnessSession = Api::namespaced(client.clone(), &ns).get("q").await.unwrap();
            let escalated = hs
                .status
                .unwrap()
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Escalated")
                .unwrap();
            assert!(
                escalated.status == "False" && escalated.message.contains("QuotaExceeded"),
                "{escalated:?}"
            );
            // Tier-0 goes on; with room again, the next turn escalates.
            let r = exec_json(&ns, "q", "echo still", true);
            assert_eq!(
                (r["exitCode"].as_i64(), r["stdout"].as_str()),
                (Some(0), Some("still\n")),
                "{r:#}"
            );
            quotas
                .delete("team-quota", &Default::default())
                .await
                .unwrap();
            let r = exec_json(&ns, "q", "git init -q c && echo back", true);
            assert_eq!(
                (r["exitCode"].as_i64(), r["tier"].as_i64()),
                (Some(0), Some(1)),
                "{r:#}"
            );
        })
        .await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_build_script_escalates_whole_before_anything_runs_on_tier0() {
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-build"), || async {
        with_namespace("t1build", |client, ns| async move {
            session(&client, &ns, "build", "e2e-build").await;
            let r = exec_json(&ns, "build", "mkdir -p build && echo old > build/keep && printf 'all:\\n\\tmkdir -p build && echo new > build/out\\n' > Makefile", true);
            assert_eq!((r["exitCode"].as_i64(), r["tier"].as_i64()), (Some(0), Some(0)), "{r:#}");
            // The seed's case: `rm -rf build` must not run on Tier-0 ahead of the build tool.
            let r = exec_json(&ns, "build", "rm -rf build && make -s && ls build", true);
            assert_eq!((r["exitCode"].as_i64(), r["tier"].as_i64()), (Some(0), Some(1)), "{r:#}");
            assert_eq!(r["stdout"], "out\n", "{r:#}");
            let ev = events(&client, run_of(&r)).await;
            let tier0_runs: Vec<_> = ev
                .iter()
                .filter(|(t, p)| t == "harness.runtime.command.started" && p["tier"] == 0 && p["command"].as_str().unwrap_or("").contains("rm -rf build"))
                .collect();
            assert!(tier0_runs.is_empty(), "rm -rf ran on Tier-0: {tier0_runs:#?}");
            let r = exec_json(&ns, "build", "cat build/out; test -e build/keep && echo kept || echo gone", true);
            assert_eq!((r["stdout"].as_str(), r["tier"].as_i64()), (Some("new\ngone\n"), Some(0)), "{r:#}");
            no_tier1_pod_left(&client, &ns, "build").await;
        })
        .await;
    })
    .await;
}

/// The sandbox record of the last escalation in `run`.
async fn last_sandbox(client: &Client, run: &str) -> Value {
    let ev = events(client, run).await;
    escalations(&ev)
        .last()
        .map(|e| e["sandbox"].clone())
        .unwrap_or_else(|| panic!("no escalation in {ev:#?}"))
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_warm_pool_hands_out_prepared_pods_refills_rolls_and_reports_misses() {
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-pool"), || async {
        with_namespace("t1pool", |client, ns| async move {
            pool_in(&client, "e2e-pool", 2, &ns).await;
            pool_settles(&client, "e2e-pool", 2, TOOLCHAIN).await;
            session(&client, &ns, "pool", "e2e-pool").await;
            let git = "git init -q r 2>/dev/null; git -C r status --short | wc -l";

            // A prepared pod serves, and the pool refills.
            let r = exec_json(&ns, "pool", git, true);
            assert_eq!(
                (r["exitCode"].as_i64(), r["tier"].as_i64()),
                (Some(0), Some(1)),
                "{r:#}"
            );
            let sandbox = last_sandbox(&client, run_of(&r)).await;
            assert_eq!(
                (sandbox["source"].as_str(), &sandbox["missReason"]),
                (Some("prepared"), &Value::Null),
                "{sandbox:#}"
            );
            pool_settles(&client, "e2e-pool", 2, TOOLCHAIN).await;

            // Over the prepared-pod archive limit: an ordinary pod, and the reason.
            let r = exec_json(
                &ns,
                "pool",
                "head -c 300000 /dev/urandom > /session/big",
                true,
            );
            assert_eq!(
                (r["exitCode"].as_i64(), r["tier"].as_i64()),
                (Some(0), Some(0)),
                "{r:#}"
            );
            let r = exec_json(&ns, "pool", git, true);
            assert_eq!(r["exitCode"].as_i64(), Some(0), "{r:#}");
            let sandbox = last_sandbox(&client, run_of(&r)).await;
            assert_eq!(
                (sandbox["source"].as_str(), sandbox["missReason"].as_str()),
                (Some("ordinary"), Some("workspace_too_large")),
                "{sandbox:#}"
            );
            exec_json(&ns, "pool", "rm /session/big", true);

            // A new image rolls the pool: no stale pod is handed out after the change.
            let worker_image = "localhost/kube-harness/worker:dev";
            Api::<SandboxTier>::all(client.clone())
                .patch(
                    "e2e-pool",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"template": {"image": worker_image}}})),
                )
                .await
                .unwrap();
            let r = exec_json(
                &ns,
                "pool",
                "git --version >/dev/null 2>&1 && echo old-template || echo new-template",
                true,
            );
            assert_eq!(r["stdout"], "new-template\n", "{r:#}");
            pool_settles(&client, "e2e-pool", 2, worker_image).await;
            let tier: SandboxTier = Api::all(client.clone()).get("e2e-pool").await.unwrap();
            let status = serde_json::to_value(tier.status.unwrap()).unwrap();
            assert_eq!(
                (status["warmReady"].as_u64(), status["warmUpdated"].as_u64()),
                (Some(2), Some(2)),
                "{status:#}"
            );

            // /scale drives the pool (as an HPA would); with the only prepared pod held by another
            // session's open turn, the next escalation reports stock_empty.
            let scaled =
                harness::kubectl(&["scale", "sandboxtier", "e2e-pool", "--replicas=1"]).unwrap();
            assert!(scaled.status.success(), "{}", stderr(&scaled));
            pool_settles(&client, "e2e-pool", 1, worker_image).await;
            session(&client, &ns, "hold", "e2e-pool").await;
            let mut reasons = Vec::new();
            for _ in 0..3 {
                // Claims the pod and keeps the turn (and the pod) open.
                let r = exec_json(
                    &ns,
                    "hold",
                    "git --version >/dev/null 2>&1; echo held",
                    false,
                );
                assert_eq!(r["tier"].as_i64(), Some(1), "{r:#}");
                let idle_ready = pool_pods(&client, "e2e-pool")
                    .await
                    .into_iter()
                    .filter(|p| !p.1 && p.2)
                    .count();
                let r = exec_json(&ns, "pool", "git --version >/dev/null 2>&1; echo ran", true);
                assert_eq!(r["stdout"], "ran\n", "{r:#}");
                let sandbox = last_sandbox(&client, run_of(&r)).await;
                reasons.push((idle_ready, sandbox["missReason"].clone()));
                kube_harness(&["end-turn", "-n", &ns, "hold", "--run-id", &ns]).unwrap();
                if idle_ready == 0 {
                    assert_eq!(sandbox["missReason"], "stock_empty", "{sandbox:#}");
                    break;
                }
                pool_settles(&client, "e2e-pool", 1, worker_image).await;
            }
            assert!(
                reasons.iter().any(|(idle, _)| *idle == 0),
                "the pool refilled before every try: {reasons:?}"
            );
            no_tier1_pod_left(&client, &ns, "pool").await;
            no_tier1_pod_left(&client, &ns, "hold").await;
        })
        .await;
    })
    .await;
}

/// `kube-harness exec` in the background → (exit code, stdout, stderr).
fn spawn_exec(
    ns: &str,
    name: &str,
    script: &str,
) -> tokio::task::JoinHandle<(i32, String, String)> {
    let args: Vec<String> = [
        "exec",
        "-n",
        ns,
        name,
        "--run-id",
        ns,
        "--timeout",
        "120",
        "--",
        script,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = kube_harness(&args).unwrap();
        (out.status.code().unwrap_or(-1), stdout(&out), stderr(&out))
    })
}

async fn first_tier1_pod(client: &Client, ns: &str, session: &str, running: bool) -> Pod {
    wait::until("a Tier-1 pod for the session", READY, || async {
        let pods = tier1_pods(client, ns, session).await;
        let found = pods.into_iter().find(|p| {
            !running || p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        });
        Ok(match found {
            Some(p) => Check::Done(p),
            None => Check::Pending("none yet".into()),
        })
    })
    .await
    .unwrap()
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn failures_end_the_turn_cleanly_and_leave_no_tier1_pod() {
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-fail"), || async {
        with_namespace("t1fail", |client, ns| async move {
            session(&client, &ns, "fail", "e2e-fail").await;
            let r = exec_json(&ns, "fail", "echo kept > /session/keep", true);
            assert_eq!(r["exitCode"].as_i64(), Some(0), "{r:#}");
            // Tier-1 pods run in the session's namespace.
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

            // The Tier-1 pod killed mid-command.
            let running = spawn_exec(&ns, "fail", "git init -q k && sleep 60 && echo finished");
            let pod = first_tier1_pod(&client, &ns, "fail", true).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            harness::kill_pod(&pods, &pod.name_any()).await.unwrap();
            let (code, out, err) = tokio::time::timeout(Duration::from_secs(120), running)
                .await
                .expect("exec must not hang")
                .unwrap();
            assert!(code != 0 && !out.contains("finished"), "{code} {out} {err}");
            assert!(err.contains("kube-harness:"), "a clear stderr line: {err}");
            let ended =
                kube_harness(&["end-turn", "-n", &ns, "fail", "--json", "--run-id", &ns]).unwrap();
            assert!(ended.status.success(), "{}", stderr(&ended));
            no_tier1_pod_left(&client, &ns, "fail").await;
            let r = exec_json(&ns, "fail", "cat /session/keep", true);
            assert_eq!(
                (r["stdout"].as_str(), r["tier"].as_i64()),
                (Some("kept\n"), Some(0)),
                "{r:#}"
            );

            // The operator restarted while the pod is being provisioned.
            let running = spawn_exec(&ns, "fail", "git init -q o && echo provisioned");
            first_tier1_pod(&client, &ns, "fail", false).await;
            let operators: Api<Pod> =
                Api::namespaced(client.clone(), &harness::release_namespace());
            for op in operators
                .list(&ListParams::default().labels("app.kubernetes.io/name=kube-harness-operator"))
                .await
                .unwrap()
                .items
            {
                harness::kill_pod(&operators, &op.name_any()).await.unwrap();
            }
            let (code, out, err) = tokio::time::timeout(Duration::from_secs(240), running)
                .await
                .expect("exec must not hang")
                .unwrap();
            assert!(
                (code == 0 && out == "provisioned\n")
                    || (code == 126 && err.starts_with("kube-harness:")),
                "{code} {out} {err}"
            );
            kube_harness(&["end-turn", "-n", &ns, "fail", "--run-id", &ns]).unwrap();
            no_tier1_pod_left(&client, &ns, "fail").await;
            let r = exec_json(&ns, "fail", "cat /session/keep", true);
            assert_eq!(r["stdout"], "kept\n", "{r:#}");
        })
        .await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn an_image_that_cannot_start_is_126_with_a_reason_and_a_condition() {
    let client = Client::try_default().await.unwrap();
    let mut tier = toolchain_tier("e2e-noimage");
    tier.spec.template.image = "localhost/kube-harness/does-not-exist:dev".into();
    with_tier(&client, tier, || async {
        with_namespace("t1img", |client, ns| async move {
            session(&client, &ns, "img", "e2e-noimage").await;
            let r = exec_json(&ns, "img", "git status", true);
            assert_eq!(r["exitCode"].as_i64(), Some(126), "{r:#}");
            let err = r["stderr"].as_str().unwrap();
            assert!(
                err.starts_with("kube-harness:") && err.contains("Image"),
                "{err}"
            );
            let escalated = harness::condition(&client, &ns, "img", "Escalated")
                .await
                .unwrap();
            assert_eq!(
                (escalated.status.as_str(), escalated.reason.as_str()),
                ("False", "Tier1Failed"),
                "{escalated:?}"
            );
            no_tier1_pod_left(&client, &ns, "img").await;
            let r = exec_json(&ns, "img", "echo still-here", true);
            assert_eq!(
                (r["stdout"].as_str(), r["tier"].as_i64()),
                (Some("still-here\n"), Some(0)),
                "{r:#}"
            );
        })
        .await;
    })
    .await;
}

/// Events in `ns` with `reason`, as "regarding-name: note".
async fn events_of(client: &Client, ns: &str, reason: &str) -> Vec<String> {
    use k8s_openapi::api::events::v1::Event;
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            format!(
                "{}: {}",
                e.regarding.and_then(|r| r.name).unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect()
}

/// Waits until the Tier-1 pod `name` is gone (not even terminating) in namespace `ns`.
async fn pod_gone(client: &Client, ns: &str, name: &str, timeout: Duration) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait::until(&format!("Tier-1 pod {name} gone"), timeout, || async {
        Ok(match pods.get_opt(name).await? {
            None => Check::Done(()),
            Some(p) => Check::Pending(format!(
                "labels {:?}, annotations {:?}, deleting {}",
                p.labels(),
                p.annotations(),
                p.metadata.deletion_timestamp.is_some()
            )),
        })
    })
    .await
    .unwrap();
}

/// Lifetimes, idleTimeoutSeconds (docs/tier1.md): a turn's Tier-1 pod is kept after its end for
/// the same session's next turn, which gets it with its own workspace replacing the last one (a
/// file Tier-0 deleted in between is not there; HOME keeps what the session left). Another
/// session escalating meanwhile gets a pod of its own and sees nothing the kept one holds. The kept
/// pod goes once idle for the tier's 10 s (by the leader's sweep, within 30 s after), with a
/// Tier1IdleExpired Event on its session.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_kept_pod_serves_only_its_sessions_next_turn_and_goes_after_its_idle_time() {
    let client = Client::try_default().await.unwrap();
    let mut tier = toolchain_tier("e2e-keep");
    tier.spec.idle_timeout_seconds = 10;
    with_tier(&client, tier, || async {
        with_namespace("t1keep", |client, ns| async move {
            session(&client, &ns, "keep", "e2e-keep").await;
            session(&client, &ns, "other", "e2e-keep").await;
            let r = exec_json(&ns, "keep", "git init -q /session/r && echo one > /session/r/f && echo mine > \"$HOME/mark\" && echo ok", true);
            assert_eq!((r["stdout"].as_str(), r["tier"].as_i64()), (Some("ok\n"), Some(1)), "{r:#}");
            let first = last_sandbox(&client, run_of(&r)).await;
            let pod = first["pod"].as_str().unwrap().to_string();
            assert!(first.get("reused").is_none(), "{first:#}");
            // A Tier-0 turn between: f goes, g comes.
            let r = exec_json(&ns, "keep", "rm /session/r/f && echo two > /session/r/g", true);
            assert_eq!((r["exitCode"].as_i64(), r["tier"].as_i64()), (Some(0), Some(0)), "{r:#}");
            let r = exec_json(&ns, "keep", "git -C /session/r status --porcelain; cat \"$HOME/mark\"", true);
            assert_eq!((r["exitCode"].as_i64(), r["tier"].as_i64()), (Some(0), Some(1)), "{r:#}");
            assert_eq!(r["stdout"], "?? g\nmine\n", "the new turn's workspace only, HOME kept: {r:#}");
            let again = last_sandbox(&client, run_of(&r)).await;
            assert_eq!(
                (again["pod"].as_str(), again["reused"].as_bool()),
                (Some(pod.as_str()), Some(true)),
                "the kept pod served the next turn: {again:#}"
            );
            // Another session, while the pod is kept for "keep": a pod of its own, nothing of
            // the kept one.
            let r = exec_json(&ns, "other", "git --version >/dev/null; test -e \"$HOME/mark\" && echo seen || echo none; test -e /session/r && echo leaked || echo clean", true);
            assert_eq!((r["exitCode"].as_i64(), r["tier"].as_i64()), (Some(0), Some(1)), "{r:#}");
            assert_eq!(r["stdout"], "none\nclean\n", "nothing of keep's pod: {r:#}");
            let theirs = last_sandbox(&client, run_of(&r)).await;
            assert_ne!(theirs["pod"].as_str(), Some(pod.as_str()), "{theirs:#}");
            assert!(theirs.get("reused").is_none(), "{theirs:#}");
            // Gone after its idle time.
            pod_gone(&client, &ns, &pod, Duration::from_secs(90)).await;
            no_tier1_pod_left(&client, &ns, "keep").await;
            let expired = events_of(&client, &ns, "Tier1IdleExpired").await;
            assert!(expired.iter().any(|e| e.starts_with("keep:") && e.contains(&pod)), "{expired:?}");
            no_tier1_pod_left(&client, &ns, "other").await;
        })
        .await;
    })
    .await;
}

/// Lifetimes, maxTurnSeconds: a turn that never sends its end-turn loses its Tier-1 pod after the
/// tier's 10 s (by the sweep, within 30 s after); the session says so (Escalated False
/// TurnTimedOut, a Warning Event Tier1TurnTimedOut naming the pod), the turn's next command is 126,
/// and the next turn escalates again.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_turn_that_never_ends_loses_its_pod_after_the_bound() {
    let client = Client::try_default().await.unwrap();
    let mut tier = toolchain_tier("e2e-bound");
    tier.spec.max_turn_seconds = 10;
    with_tier(&client, tier, || async {
        with_namespace("t1bound", |client, ns| async move {
            session(&client, &ns, "bound", "e2e-bound").await;
            let r = exec_json(&ns, "bound", "git --version >/dev/null && echo up", false);
            assert_eq!(
                (r["stdout"].as_str(), r["tier"].as_i64()),
                (Some("up\n"), Some(1)),
                "{r:#}"
            );
            let pod = last_sandbox(&client, run_of(&r)).await["pod"]
                .as_str()
                .unwrap()
                .to_string();
            pod_gone(&client, &ns, &pod, Duration::from_secs(90)).await;
            let escalated = harness::condition(&client, &ns, "bound", "Escalated")
                .await
                .unwrap();
            assert_eq!(
                (escalated.status.as_str(), escalated.reason.as_str()),
                ("False", "TurnTimedOut"),
                "{escalated:?}"
            );
            assert!(escalated.message.contains(&pod), "{escalated:?}");
            let timed_out = events_of(&client, &ns, "Tier1TurnTimedOut").await;
            assert!(timed_out.iter().any(|e| e.contains(&pod)), "{timed_out:?}");
            let r = exec_json(&ns, "bound", "git --version", true);
            assert_eq!(r["exitCode"].as_i64(), Some(126), "{r:#}");
            assert!(
                r["stderr"].as_str().unwrap().starts_with("kube-harness:"),
                "{r:#}"
            );
            let r = exec_json(&ns, "bound", "git --version >/dev/null && echo again", true);
            assert_eq!(
                (r["stdout"].as_str(), r["tier"].as_i64()),
                (Some("again\n"), Some(1)),
                "{r:#}"
            );
            no_tier1_pod_left(&client, &ns, "bound").await;
        })
        .await;
    })
    .await;
}

/// A pod the restricted release namespace admits, labelled as a Tier-1 pod.
fn fake_tier1_pod(name: &str, labels: Value, annotations: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "agent", "image": TOOLCHAIN, "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
        }
    }))
    .unwrap()
}

/// RFC 3339, `secs` from now.
fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(
        k8s_openapi::jiff::Timestamp::now().as_second() + secs,
    )
    .unwrap()
    .to_string()
}

/// Orphans of an operator SIGKILLed half-way through opens, swept at the next leader's start-up.
/// Simulated: this test makes the objects such an open leaves: a turn record with the ordinary
/// pod's token Secret whose pod is gone (a real open through the tier API, its pod then deleted and
/// its Secret made again as an open killed after the Secret leaves it); a pod claimed for a live
/// session's turn that nothing recorded, its turn begun 10 minutes ago (killed between the claim
/// and the record, and the worker never came back); a pool pod claimed for a session that is gone
/// (both with the labels and annotations of docs/tier1.md). Then the operator pods are deleted with
/// grace period 0 (SIGKILL, as `kubectl delete pod --grace-period=0 --force`). Each object goes,
/// with a Tier1Swept Event, and the new leader counts it in `kube_harness_tier1_swept_total`.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn orphans_of_a_killed_operator_are_swept_at_the_next_start_with_events_and_metrics() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Secret;
    use kube_harness_crds::HarnessTurn;
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-orphan"), || async {
        with_namespace("t1orph", |client, ns| async move {
            session(&client, &ns, "orph", "e2e-orphan").await;
            let release = harness::release_namespace();
            let suffix = format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos());
            let base = json!({"app.kubernetes.io/managed-by": "kube-harness", "kubeharness.dev/role": "tier1",
                              "kubeharness.dev/tier": "e2e-orphan", "kubeharness.dev/session-namespace": ns,
                              "kubeharness.dev/session": "orph"});
            let with = |more: Value| {
                let mut l = base.clone();
                for (k, v) in more.as_object().unwrap() {
                    l[k] = v.clone();
                }
                l
            };
            let unrecorded = format!("t1-unrec-{suffix}");
            let gone = format!("t1-gone-{suffix}");
            // Tier-1 pods, their Secrets and the turn records are in the session's namespace; the
            // operator in the release namespace.
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let leases: Api<Lease> = Api::namespaced(client.clone(), &release);
            let records: Api<HarnessTurn> = Api::namespaced(client.clone(), &ns);
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let operators: Api<Pod> = Api::namespaced(client.clone(), &release);
            let pp = kube::api::PostParams::default();
            // A real open records the turn's ordinary pod; the pod goes (its Secret with it, its
            // owner), and the Secret is made again: what an open killed before the pod leaves.
            let api = TierApi::open(&client, &ns, "orph").await;
            let (status, opened) = api.call(reqwest::Method::POST, &fresh_turn("orphan")).await;
            assert_eq!(status, 200, "{opened}");
            let secret_name = opened["pod"].as_str().unwrap().to_string();
            let record_name = records.list(&ListParams::default()).await.unwrap().items[0].name_any();
            harness::kill_pod(&pods, &secret_name).await.unwrap();
            wait::until("the turn's pod and Secret gone", Duration::from_secs(60), || async {
                let (p, s) = (pods.get_opt(&secret_name).await?, secrets.get_opt(&secret_name).await?);
                Ok(match p.is_none() && s.is_none() {
                    true => Check::Done(()),
                    false => Check::Pending(format!("pod {}, secret {}", p.is_some(), s.is_some())),
                })
            })
            .await
            .unwrap();
            secrets.create(&pp, &serde_json::from_value(json!({"metadata": {"name": secret_name,
                "labels": with(json!({"kubeharness.dev/turn": "00000000000000aa"}))},
                "data": {"token": "dG9rZW4="}})).unwrap()).await.unwrap();
            pods.create(&pp, &fake_tier1_pod(&unrecorded,
                with(json!({"kubeharness.dev/turn": "00000000000000bb"})),
                json!({"kubeharness.dev/turn-id": "t-lost", "kubeharness.dev/turn-started": rfc3339(-600),
                       "kubeharness.dev/turn-deadline": rfc3339(3600)}))).await.unwrap();
            pods.create(&pp, &fake_tier1_pod(&gone,
                with(json!({"kubeharness.dev/session": "no-such-session", "kubeharness.dev/pool": "e2e-orphan",
                            "kubeharness.dev/claimed": "true", "kubeharness.dev/turn": "00000000000000cc"})),
                json!({"kubeharness.dev/turn-id": "t-gone"}))).await.unwrap();

            // SIGKILL the operator (every replica).
            for op in operators
                .list(&ListParams::default().labels("app.kubernetes.io/name=kube-harness-operator"))
                .await
                .unwrap()
                .items
            {
                harness::kill_pod(&operators, &op.name_any()).await.unwrap();
            }
            let limit = Duration::from_secs(180);
            pod_gone(&client, &ns, &unrecorded, limit).await;
            pod_gone(&client, &ns, &gone, limit).await;
            wait::until("the orphaned record and Secret gone", limit, || async {
                let (l, s) = (records.get_opt(&record_name).await?, secrets.get_opt(&secret_name).await?);
                Ok(if l.is_none() && s.is_none() {
                    Check::Done(())
                } else {
                    Check::Pending(format!("record {}, secret {}", l.is_some(), s.is_some()))
                })
            })
            .await
            .unwrap();
            // Events on the pods, the Secret and the record are in their namespace.
            let mut swept = events_of(&client, &release, "Tier1Swept").await;
            swept.extend(events_of(&client, &ns, "Tier1Swept").await);
            for name in [&unrecorded, &gone, &record_name, &secret_name] {
                assert!(swept.iter().any(|e| e.starts_with(&format!("{name}:"))), "an Event for {name}: {swept:?}");
            }
            // The leader's counters.
            let holder = leases.get("kube-harness-operator").await.unwrap().spec.unwrap().holder_identity.unwrap();
            let tunnel = kube_harness_client::tunnel::Tunnel::open(operators.clone(), &holder, 8000).await.unwrap();
            let text = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap()
                .get(format!("http://{}/metrics", tunnel.local)).send().await.unwrap().text().await.unwrap();
            for series in [
                "kube_harness_tier1_swept_total{kind=\"pod\",reason=\"unrecorded\"}",
                "kube_harness_tier1_swept_total{kind=\"pod\",reason=\"session_gone\"}",
                "kube_harness_tier1_swept_total{kind=\"record\",reason=\"no_pod\"}",
                "kube_harness_tier1_swept_total{kind=\"secret\",reason=\"no_pod\"}",
            ] {
                assert!(text.lines().any(|l| l.starts_with(series)), "{series} in {text}");
            }
        })
        .await;
    })
    .await;
}

/// The tier API as a session's worker reaches it: a port-forward to an operator pod's 8081 and
/// the session's own token.
struct TierApi {
    _tunnel: kube_harness_client::tunnel::Tunnel,
    http: reqwest::Client,
    /// `…/v1/namespaces/{ns}/sessions/{session}/sandboxes`
    url: String,
    token: String,
}

impl TierApi {
    async fn open(client: &Client, ns: &str, session: &str) -> TierApi {
        use k8s_openapi::api::core::v1::Secret;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &harness::release_namespace());
        let operator = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=kube-harness-operator"))
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .expect("an operator pod");
        let tunnel =
            kube_harness_client::tunnel::Tunnel::open(pods.clone(), &operator.name_any(), 8081)
                .await
                .unwrap();
        let secret: Secret = Api::namespaced(client.clone(), ns)
            .get(&format!("{session}-token"))
            .await
            .unwrap();
        let token = String::from_utf8(secret.data.unwrap()["token"].0.clone()).unwrap();
        let url = format!(
            "http://{}/v1/namespaces/{ns}/sessions/{session}/sandboxes",
            tunnel.local
        );
        TierApi {
            _tunnel: tunnel,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            url,
            token,
        }
    }

    /// `POST` of `turn` (not sent yet, so several can go at once).
    fn post(&self, turn: &str) -> reqwest::RequestBuilder {
        let body = serde_json::to_vec(&json!({"turn": turn, "workspaceBytes": 100})).unwrap();
        self.http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body)
    }

    /// `method` on `turn`: (status, answer).
    async fn call(&self, method: reqwest::Method, turn: &str) -> (u16, Value) {
        let request = if method == reqwest::Method::POST {
            self.post(turn)
        } else {
            self.http
                .request(method, format!("{}/{turn}", self.url))
                .bearer_auth(&self.token)
        };
        let r = request.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

/// A fresh turn id.
fn fresh_turn(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// The session's Tier-1 pods not being deleted, by name.
async fn live_tier1_pods(client: &Client, ns: &str, session: &str) -> Vec<String> {
    tier1_pods(client, ns, session)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect()
}

/// One pod per turn (docs/tier1.md): six opens of one turn sent at once to the tier API (through a
/// port-forward to the operator, with the session's own token), on a pooled tier with two ready
/// pool pods to race for and on an unpooled tier, all answer the same pod, and the session has
/// exactly one Tier-1 pod; ending the turn leaves none.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn racing_opens_of_one_turn_claim_one_pod() {
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-race-p"), || async {
        with_tier(&client, toolchain_tier("e2e-race-o"), || async {
            with_namespace("t1race", |client, ns| async move {
                pool_in(&client, "e2e-race-p", 2, &ns).await;
                session(&client, &ns, "rp", "e2e-race-p").await;
                session(&client, &ns, "ro", "e2e-race-o").await;
                pool_settles(&client, "e2e-race-p", 2, TOOLCHAIN).await;
                for session_name in ["rp", "ro"] {
                    let api = TierApi::open(&client, &ns, session_name).await;
                    let turn = fresh_turn("race");
                    let opens = (0..6).map(|_| api.post(&turn).send());
                    let mut answered = std::collections::BTreeSet::new();
                    for r in futures::future::join_all(opens).await {
                        let r = r.unwrap();
                        let status = r.status();
                        let v: Value = r.json().await.unwrap();
                        assert_eq!(status, 200, "{session_name}: {v}");
                        assert!(v["phase"] != "Failed", "{session_name}: {v}");
                        answered.insert(v["pod"].as_str().unwrap().to_string());
                    }
                    assert_eq!(
                        answered.len(),
                        1,
                        "{session_name}: every open answered one pod: {answered:?}"
                    );
                    let pod = answered.into_iter().next().unwrap();
                    assert_eq!(
                        live_tier1_pods(&client, &ns, session_name).await,
                        vec![pod.clone()],
                        "{session_name}: one pod for the turn"
                    );
                    let (_, shown) = api.call(reqwest::Method::GET, &turn).await;
                    assert_eq!(shown["pod"].as_str(), Some(pod.as_str()), "{shown}");
                    let (ended, _) = api.call(reqwest::Method::DELETE, &turn).await;
                    assert_eq!(ended, 204);
                    no_tier1_pod_left(&client, &ns, session_name).await;
                }
            })
            .await;
        })
        .await;
    })
    .await;
}

/// One serving turn per session, and an ended turn stays ended (docs/tier1.md, "Lifetimes"):
/// through the tier API with the session's own token, a second turn's open deletes the first
/// turn's pod (the session has only the second's); the first turn is then 409 to GET and to a new
/// open, and so is the second once its DELETE ended it; no pod is left.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_new_turn_ends_the_sessions_other_turn_and_an_ended_turn_stays_ended() {
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-one"), || async {
        with_namespace("t1one", |client, ns| async move {
            session(&client, &ns, "one", "e2e-one").await;
            let api = TierApi::open(&client, &ns, "one").await;
            let (first, second) = (fresh_turn("first"), fresh_turn("second"));
            let (status, a) = api.call(reqwest::Method::POST, &first).await;
            assert_eq!(status, 200, "{a}");
            let pod_a = a["pod"].as_str().unwrap().to_string();
            let (status, b) = api.call(reqwest::Method::POST, &second).await;
            assert_eq!(status, 200, "{b}");
            let pod_b = b["pod"].as_str().unwrap().to_string();
            assert_ne!(pod_a, pod_b);
            assert_eq!(
                live_tier1_pods(&client, &ns, "one").await,
                vec![pod_b.clone()],
                "the first turn's pod went when the second opened"
            );
            for method in [reqwest::Method::GET, reqwest::Method::POST] {
                let (status, v) = api.call(method.clone(), &first).await;
                assert_eq!(status, 409, "{method} of the ended first turn: {v}");
            }
            assert_eq!(live_tier1_pods(&client, &ns, "one").await, vec![pod_b]);
            let (status, _) = api.call(reqwest::Method::DELETE, &second).await;
            assert_eq!(status, 204);
            let (status, v) = api.call(reqwest::Method::POST, &second).await;
            assert_eq!(status, 409, "a late open of the ended second turn: {v}");
            no_tier1_pod_left(&client, &ns, "one").await;
        })
        .await;
    })
    .await;
}

/// `kubectl get harnessturns` (issue 36) during a Tier-1 turn: one row per turn with its session,
/// tier, pod and phase (Ready once the pod serves, from the turn controller); the short name works;
/// the object is owned by its session. The worker's DELETE ends it (phase Ended), and deleting the
/// session takes its turn objects with it (the garbage collector).
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn kubectl_get_harnessturns_shows_the_open_turn_its_tier_pod_and_phase() {
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-hturn"), || async {
        with_namespace("t1hturn", |client, ns| async move {
            let made = session(&client, &ns, "ht", "e2e-hturn").await;
            let api = TierApi::open(&client, &ns, "ht").await;
            let turn = fresh_turn("shown");
            let (status, opened) = api.call(reqwest::Method::POST, &turn).await;
            assert_eq!(status, 200, "{opened}");
            let pod = opened["pod"].as_str().unwrap().to_string();
            let row = |phase: &'static str| {
                let (ns, pod) = (ns.clone(), pod.clone());
                move || {
                    let (ns, pod) = (ns.clone(), pod.clone());
                    async move {
                        let out =
                            harness::kubectl(&["get", "harnessturns", "-n", &ns, "--no-headers"])?;
                        let text = stdout(&out);
                        let fields: Vec<Vec<&str>> = text
                            .lines()
                            .map(|l| l.split_whitespace().collect())
                            .collect();
                        let want = ["ht", "e2e-hturn", pod.as_str(), phase];
                        Ok(
                            match fields.iter().any(|f| f.len() == 6 && f[1..5] == want) {
                                true => Check::Done(text.clone()),
                                false => Check::Pending(format!("{text}{}", stderr(&out))),
                            },
                        )
                    }
                }
            };
            let shown = wait::until(
                "the turn's row, Ready",
                Duration::from_secs(60),
                row("Ready"),
            )
            .await
            .unwrap();
            assert_eq!(shown.lines().count(), 1, "one open turn: {shown}");
            let out = harness::kubectl(&["get", "hturn", "-n", &ns, "-o", "json"]).unwrap();
            let listed: Value = serde_json::from_str(&stdout(&out)).unwrap();
            let item = &listed["items"][0];
            assert_eq!(item["spec"]["turn"], turn.as_str(), "{item}");
            let owner = &item["metadata"]["ownerReferences"][0];
            assert_eq!(
                (owner["kind"].as_str(), owner["uid"].as_str()),
                (Some("HarnessSession"), made.metadata.uid.as_deref()),
                "{item}"
            );
            let ready = item["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                (ready["status"].as_str(), ready["reason"].as_str()),
                (Some("True"), Some("Tier1Ready")),
                "{item}"
            );
            let (status, _) = api.call(reqwest::Method::DELETE, &turn).await;
            assert_eq!(status, 204);
            wait::until(
                "the turn's row, Ended",
                Duration::from_secs(60),
                row("Ended"),
            )
            .await
            .unwrap();
            no_tier1_pod_left(&client, &ns, "ht").await;
            Api::<HarnessSession>::namespaced(client.clone(), &ns)
                .delete("ht", &Default::default())
                .await
                .unwrap();
            wait::until(
                "the session's turns gone with it",
                Duration::from_secs(120),
                || {
                    let ns = ns.clone();
                    async move {
                        let out =
                            harness::kubectl(&["get", "harnessturns", "-n", &ns, "-o", "name"])?;
                        let text = stdout(&out);
                        Ok(match text.trim().is_empty() && out.status.success() {
                            true => Check::Done(()),
                            false => Check::Pending(format!("{text}{}", stderr(&out))),
                        })
                    }
                },
            )
            .await
            .unwrap();
        })
        .await;
    })
    .await;
}

/// What a command leaves running does not reach the session's next turn on its kept pod
/// (docs/security-model.md §12): a turn plants a chain of 250 processes, each in a session of its
/// own and waiting for the next, and a loop that forks without pause; the next turn, on the same
/// pod, sees no process but the agent and its own shell. The session has no deny policy (the
/// example's would refuse `sh /tmp/chain`, a script the classifier cannot read, before it runs).
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_kept_pods_next_turn_finds_nothing_the_last_turn_left_running() {
    let client = Client::try_default().await.unwrap();
    let mut tier = toolchain_tier("e2e-reap");
    tier.spec.idle_timeout_seconds = 60;
    with_tier(&client, tier, || async {
        with_namespace("t1reap", |client, ns| async move {
            session_with(&client, &ns, "reap", "e2e-reap", |s| s.spec.policy.deny_commands.clear()).await;
            let attack = r#"git --version >/dev/null
cat > /tmp/chain <<'CHAIN'
n=$1
if [ "$n" -gt 0 ]; then setsid sh /tmp/chain $((n - 1)) & wait
else : > /tmp/bottom; exec sleep 3600; fi
CHAIN
setsid sh /tmp/chain 250 </dev/null >/dev/null 2>&1 &
nice -n 19 setsid sh -c 'while :; do /bin/true; done' </dev/null >/dev/null 2>&1 &
for i in $(seq 600); do [ -e /tmp/bottom ] && break; sleep 0.05; done
[ -e /tmp/bottom ] && echo planted"#;
            let r = exec_json(&ns, "reap", attack, true);
            assert_eq!((r["stdout"].as_str(), r["tier"].as_i64()), (Some("planted
"), Some(1)), "{r:#}");
            let pod = last_sandbox(&client, run_of(&r)).await["pod"].as_str().unwrap().to_string();
            let r = exec_json(
                &ns,
                "reap",
                "git --version >/dev/null; for p in /proc/[0-9]*/comm; do read -r c < $p && echo $c; done",
                true,
            );
            assert_eq!((r["exitCode"].as_i64(), r["tier"].as_i64()), (Some(0), Some(1)), "{r:#}");
            let again = last_sandbox(&client, run_of(&r)).await;
            assert_eq!(
                (again["pod"].as_str(), again["reused"].as_bool()),
                (Some(pod.as_str()), Some(true)),
                "the kept pod served the next turn: {again:#}"
            );
            let mut seen: Vec<&str> = r["stdout"].as_str().unwrap().lines().collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen, ["bash", "kube-harness"], "the processes of the next turn: {r:#}");
        })
        .await;
    })
    .await;
}

/// Skills on Tier-1 (docs/tier1.md, "Skills"): a session with a skill ConfigMap escalates (git)
/// to a prepared pod of a pooled tier; the command there reads `/.agents/review/SKILL.md` with
/// what Tier-0 shows, and every write, delete, chmod or new file under /.agents fails
/// (`Read-only file system`: the agent's container mounts the keeper's volume read-only, and the
/// agent's uid owning the files does not help). Nothing of it is merged back. A second turn,
/// whatever pod serves it, shows them as well.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn skills_are_readable_on_tier1() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    let client = Client::try_default().await.unwrap();
    with_tier(&client, toolchain_tier("e2e-skills"), || async {
        with_namespace("t1skills", |client, ns| async move {
            pool_in(&client, "e2e-skills", 1, &ns).await;
            harness::restrict(&client, &ns).await.unwrap();
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": "review-skill"},
                "data": {"SKILL.md": "# Review\nRead the diff first.\n", "checklist.md": "- tests\n"},
            }))
            .unwrap();
            Api::<ConfigMap>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &cm)
                .await
                .unwrap();
            let mut s = harness::example_session("demo.yaml", "skills").unwrap();
            s.spec.escalation = Some(kube_harness_crds::session::Escalation {
                tier: Some("e2e-skills".into()),
            });
            s.spec.workspace.skills =
                vec![serde_json::from_value(json!({"configMap": "review-skill", "path": "review"})).unwrap()];
            Api::<HarnessSession>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &s)
                .await
                .unwrap();
            harness::wait_ready(&client, &ns, "skills", READY).await.unwrap();
            pool_settles(&client, "e2e-skills", 1, TOOLCHAIN).await;
            let r = exec_json(&ns, "skills", "cat /.agents/review/SKILL.md", false);
            assert_eq!((r["stdout"].as_str(), r["tier"].as_i64()), (Some("# Review\nRead the diff first.\n"), Some(0)), "{r:#}");

            // No eval or functions: the session's deny list makes the classifier fail closed on
            // commands it cannot name.
            let script = r#"git --version > /dev/null || exit 9
cat /.agents/review/SKILL.md /.agents/review/checklist.md
f=/.agents/review/SKILL.md
e=$( { echo forged > $f; } 2>&1 ) && echo "write: CHANGED" || echo "write: ${e##*: }"
e=$(rm -f $f 2>&1) && echo "delete: CHANGED" || echo "delete: ${e##*: }"
e=$(chmod 666 $f 2>&1) && echo "chmod: CHANGED" || echo "chmod: ${e##*: }"
e=$(touch /.agents/review/new.md 2>&1) && echo "create: CHANGED" || echo "create: ${e##*: }"
e=$(mkdir /.agents/new 2>&1) && echo "mkdir: CHANGED" || echo "mkdir: ${e##*: }"
cat $f"#;
            let refused = "write: Read-only file system\ndelete: Read-only file system\nchmod: Read-only file system\ncreate: Read-only file system\nmkdir: Read-only file system\n";
            let expected = format!("# Review\nRead the diff first.\n- tests\n{refused}# Review\nRead the diff first.\n");
            let r = exec_json(&ns, "skills", script, true);
            assert_eq!((r["exitCode"].as_i64(), r["tier"].as_i64()), (Some(0), Some(1)), "{r:#}");
            assert_eq!(r["stdout"].as_str(), Some(expected.as_str()), "{r:#}");
            let changes = r["endTurn"]["turn"]["fileChanges"].as_array().cloned().unwrap_or_default();
            assert!(
                changes.iter().all(|c| !c["path"].as_str().unwrap_or("").starts_with("/.agents")),
                "nothing of /.agents is merged back: {changes:#?}"
            );
            let sandbox = last_sandbox(&client, run_of(&r)).await;
            assert_eq!(sandbox["source"], "prepared", "a pool pod, its keeper connected long before: {sandbox:#}");

            // Another turn, another pod: the same skills, still read-only; Tier-0's unchanged.
            let r = exec_json(&ns, "skills", "git --version > /dev/null && cat /.agents/review/checklist.md && { echo x >> /.agents/review/checklist.md || echo refused; }", true);
            assert_eq!((r["stdout"].as_str(), r["tier"].as_i64()), (Some("- tests\nrefused\n"), Some(1)), "{r:#}");
            let r = exec_json(&ns, "skills", "cat /.agents/review/SKILL.md && ls -A /.agents/review", true);
            assert_eq!(
                (r["stdout"].as_str(), r["tier"].as_i64()),
                (Some("# Review\nRead the diff first.\nSKILL.md\nchecklist.md\n"), Some(0)),
                "{r:#}"
            );
            no_tier1_pod_left(&client, &ns, "skills").await;
        })
        .await;
    })
    .await;
}
