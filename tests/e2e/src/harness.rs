//! Helpers for the operator e2e tests: the installed chart, sessions from examples/, the
//! `kube-harness` and `kubectl` binaries, and restricted namespaces.

use crate::wait::{self, Check};
use crate::{E2eError, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_harness_crds::condition::{is_true, types};
use kube_harness_crds::HarnessSession;
use serde_json::json;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

/// Namespace the chart is installed in (tests/cluster/install-chart.sh).
pub fn release_namespace() -> String {
    std::env::var("KH_RELEASE_NAMESPACE").unwrap_or_else(|_| "kube-harness".into())
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn binary(env: &str, fallback: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| fallback.to_string())
}

/// Runs the `kube-harness` binary (KH_KUBE_HARNESS_BIN) with `args`.
pub fn kube_harness(args: &[&str]) -> Result<Output> {
    run(&binary("KH_KUBE_HARNESS_BIN", "kube-harness"), args)
}

/// `kube-harness exec -n NS NAME [EXTRA] -- SCRIPT` → (exit code, stdout, stderr).
pub fn cli_exec(ns: &str, name: &str, script: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["exec", "-n", ns, name];
    args.extend_from_slice(extra);
    args.extend(["--", script]);
    let out = kube_harness(&args).unwrap_or_else(|e| panic!("{e}"));
    (out.status.code().unwrap_or(-1), stdout(&out), stderr(&out))
}

/// A session made from `examples/demo.yaml` under `name`, in a namespace that enforces the
/// restricted Pod Security Standard, once it is Ready.
pub async fn demo(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: std::time::Duration,
) -> HarnessSession {
    restrict(client, ns).await.unwrap_or_else(|e| panic!("{e}"));
    apply_example(client, ns, "demo.yaml", name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_ready(client, ns, name, timeout)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A PATH of the same programs as this process's, less any named `left_out`: one directory
/// (`dir`, made) of links to the first program of each name, so a client can be run proving it
/// needs no `kubectl`.
pub fn path_without(left_out: &str, dir: &std::path::Path) -> String {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let path = std::env::var_os("PATH").unwrap_or_default();
    for entry in std::env::split_paths(&path) {
        let Ok(list) = std::fs::read_dir(&entry) else {
            continue;
        };
        for program in list.flatten() {
            let name = program.file_name();
            let link = dir.join(&name);
            if name == left_out || link.symlink_metadata().is_ok() {
                continue;
            }
            std::os::unix::fs::symlink(program.path(), link).ok();
        }
    }
    dir.display().to_string()
}

/// Runs `kubectl` (KH_KUBECTL) with `args`.
pub fn kubectl(args: &[&str]) -> Result<Output> {
    run(&binary("KH_KUBECTL", "kubectl"), args)
}

fn run(program: &str, args: &[&str]) -> Result<Output> {
    Command::new(program)
        .args(args)
        .output()
        .map_err(|e| E2eError::Command {
            cmd: format!("{program} {}", args.join(" ")),
            detail: e.to_string(),
        })
}

/// Enforces the restricted Pod Security Standard in `ns`: the worker pods must pass it.
pub async fn restrict(client: &Client, ns: &str) -> Result<()> {
    let patch =
        json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
    Api::<Namespace>::all(client.clone())
        .patch(ns, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// The HarnessSession of `examples/<file>`, renamed to `name`.
pub fn example_session(file: &str, name: &str) -> Result<HarnessSession> {
    let path = repo_root().join("examples").join(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| E2eError::Failed(format!("{}: {e}", path.display())))?;
    let mut session: HarnessSession = serde_yaml::from_str(&text)
        .map_err(|e| E2eError::Failed(format!("{}: {e}", path.display())))?;
    session.metadata.name = Some(name.into());
    Ok(session)
}

/// Creates the HarnessSession of `examples/<file>` in `ns`, renamed to `name`.
pub async fn apply_example(
    client: &Client,
    ns: &str,
    file: &str,
    name: &str,
) -> Result<HarnessSession> {
    let session = example_session(file, name)?;
    Ok(Api::<HarnessSession>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &session)
        .await?)
}

/// Waits until the session reports Ready=True.
pub async fn wait_ready(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<HarnessSession> {
    let api: Api<HarnessSession> = Api::namespaced(client.clone(), ns);
    wait::until(
        &format!("HarnessSession {ns}/{name} Ready"),
        timeout,
        || async {
            let s = api.get(name).await?;
            let status = s.status.clone().unwrap_or_default();
            if is_true(&status.conditions, types::READY) {
                return Ok(Check::Done(s));
            }
            Ok(Check::Pending(format!(
                "phase {:?}, conditions {:?}",
                status.phase,
                status
                    .conditions
                    .iter()
                    .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                    .collect::<Vec<_>>()
            )))
        },
    )
    .await
}

/// stdout of a finished command as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every event of `run` in the chart's session log service, read through a port-forward with the
/// service's token.
pub async fn session_log_events(
    client: &Client,
    run: &str,
) -> Result<Vec<kube_harness_session_log::model::StoredEvent>> {
    session_log_events_as(client, run, None).await
}

/// Like [`session_log_events`], presenting `token` (a session's scoped token) instead of the
/// service's own when given.
pub async fn session_log_events_as(
    client: &Client,
    run: &str,
    token: Option<&str>,
) -> Result<Vec<kube_harness_session_log::model::StoredEvent>> {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use kube::api::ListParams;
    use kube::ResourceExt;
    use kube_harness_session_log::client::{ClientOptions, SessionLogClient};
    let release = release_namespace();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release);
    let log_pod = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=kube-harness-session-log"))
        .await?
        .items
        .into_iter()
        .next()
        .ok_or_else(|| E2eError::Failed("no session log pod".into()))?;
    let tunnel = kube_harness_client::tunnel::Tunnel::open(pods, &log_pod.name_any(), 8080)
        .await
        .map_err(|e| E2eError::Failed(e.to_string()))?;
    let token = match token {
        Some(t) => t.to_string(),
        None => {
            let secret: Secret = Api::namespaced(client.clone(), &release)
                .get("kube-harness-session-log-token")
                .await?;
            secret
                .data
                .and_then(|d| {
                    d.get("token")
                        .map(|t| String::from_utf8_lossy(&t.0).into_owned())
                })
                .ok_or_else(|| E2eError::Failed("session log Secret has no token".into()))?
        }
    };
    let log = SessionLogClient::new(
        format!("http://{}", tunnel.local),
        Some(token),
        ClientOptions::default(),
    )
    .map_err(|e| E2eError::Failed(e.to_string()))?;
    log.read_all(run)
        .await
        .map_err(|e| E2eError::Failed(format!("reading run {run}: {e}")))
}

/// The session's condition of `type_` (panics with the status when absent).
pub async fn condition(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
) -> Result<kube_harness_crds::condition::Condition> {
    let s: HarnessSession = Api::namespaced(client.clone(), ns).get(name).await?;
    let conditions = s.status.unwrap_or_default().conditions;
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
        .ok_or_else(|| E2eError::Failed(format!("no {type_} condition in {conditions:?}")))
}

/// "type=status reason" of every condition, for a wait's timeout message.
pub fn conditions_of(s: &HarnessSession) -> String {
    let status = s.status.clone().unwrap_or_default();
    format!(
        "phase {:?}, observedGeneration {:?} (generation {:?}): {}",
        status.phase,
        status.observed_generation,
        s.metadata.generation,
        status
            .conditions
            .iter()
            .map(|c| format!("{}={} {}", c.type_, c.status, c.reason))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Waits until `check` holds for session `name` (`what` names it for the timeout's message).
pub async fn wait_session(
    api: &Api<HarnessSession>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&HarnessSession) -> bool,
) -> Result<HarnessSession> {
    wait::until(what, timeout, || async {
        let s = api.get(name).await?;
        Ok(if check(&s) {
            Check::Done(s)
        } else {
            Check::Pending(conditions_of(&s))
        })
    })
    .await
}

/// Waits up to a minute until the session's `type_` condition satisfies `holds` (`what` names it
/// for the timeout's message), and returns it.
pub async fn wait_condition(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    what: &str,
    holds: impl Fn(&kube_harness_crds::condition::Condition) -> bool,
) -> Result<kube_harness_crds::condition::Condition> {
    wait::until(
        &format!("{ns}/{name}: {type_} {what}"),
        Duration::from_secs(60),
        || async {
            // An error reading it (absent, or the API server busy) is waited out too.
            Ok(match condition(client, ns, name, type_).await {
                Ok(c) if holds(&c) => Check::Done(c),
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await
}

/// Deletes a pod with no grace period: its containers get SIGKILL.
pub async fn kill_pod(pods: &Api<k8s_openapi::api::core::v1::Pod>, name: &str) -> Result<()> {
    let now = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..kube::api::DeleteParams::default()
    };
    pods.delete(name, &now).await?;
    Ok(())
}
