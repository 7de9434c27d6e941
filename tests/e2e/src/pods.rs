//! Pod builders and the bounded waits the smoke tests need. Image problems (not loaded into the
//! node, wrong name) fail at once with a hint instead of running into the timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Probe};
use kube::api::ObjectMeta;
use kube::Api;

use crate::wait::{self, Check};
use crate::{E2eError, Result};

/// A pod running `command` once in `image` (restartPolicy Never, short termination grace).
pub fn command_pod(name: &str, image: &str, command: &[&str], labels: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(2),
            automount_service_account_token: Some(false),
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.to_string()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(command.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The worker image: bash, curl and python3 besides the Tier-0 tools.
pub const WORKER_IMAGE: &str = "localhost/kube-harness/worker:dev";

/// The security context of the restricted Pod Security Standard, which the session namespaces
/// enforce: a pod of a test that runs in one (a client, a server, a flood) carries it.
pub fn restricted() -> serde_json::Value {
    serde_json::json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// A restricted pod of the worker image running `command`, labelled `labels`, with `readiness`
/// (a probe as JSON) when given: created, not waited for.
pub async fn create_restricted(
    client: &kube::Client,
    ns: &str,
    name: &str,
    labels: serde_json::Value,
    command: &[&str],
    readiness: Option<serde_json::Value>,
) {
    let mut container = serde_json::json!({
        "name": "main", "image": WORKER_IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": command, "securityContext": restricted(),
    });
    if let Some(probe) = readiness {
        container["readinessProbe"] = probe;
    }
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [container],
        }
    }))
    .unwrap_or_else(|e| panic!("pod {name}: {e}"));
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&kube::api::PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("creating pod {name} in {ns}: {e}"));
}

/// Adds a readiness probe to the pod's first container.
pub fn with_readiness(mut pod: Pod, probe: Probe) -> Pod {
    if let Some(c) = pod.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        c.readiness_probe = Some(probe);
    }
    pod
}

/// One line describing a pod's phase, conditions and container states, for failure messages.
pub fn describe(pod: &Pod) -> String {
    let Some(status) = &pod.status else {
        return "no status yet".into();
    };
    let mut out = format!("phase={}", status.phase.as_deref().unwrap_or("?"));
    for c in status.conditions.iter().flatten() {
        out.push_str(&format!(" {}={}", c.type_, c.status));
    }
    for cs in status.container_statuses.iter().flatten() {
        let state = cs.state.as_ref();
        if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            out.push_str(&format!(
                " {}:waiting({}: {})",
                cs.name,
                w.reason.as_deref().unwrap_or(""),
                w.message.as_deref().unwrap_or("")
            ));
        } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            out.push_str(&format!(
                " {}:terminated(exit {} {})",
                cs.name,
                t.exit_code,
                t.reason.as_deref().unwrap_or("")
            ));
        } else if state.and_then(|s| s.running.as_ref()).is_some() {
            out.push_str(&format!(" {}:running", cs.name));
        }
    }
    out
}

/// Fails fast on states a pod cannot recover from within a test.
fn check_hopeless(pod: &Pod) -> Result<()> {
    for cs in pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
    {
        if let Some(reason) = cs
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref())
        {
            if matches!(
                reason,
                "ErrImageNeverPull" | "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName"
            ) {
                return Err(E2eError::Failed(format!(
                    "image {} is not available on the node ({reason}); build and load it with tests/cluster/images.sh \
                     (kind: kind load docker-image): {}",
                    cs.image,
                    describe(pod)
                )));
            }
        }
    }
    Ok(())
}

/// Waits until the pod has run to completion; a failed pod is an error carrying its state.
pub async fn wait_succeeded(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<Pod> {
    wait::until(&format!("pod {name} to succeed"), timeout, || async move {
        let pod = pods.get(name).await?;
        check_hopeless(&pod)?;
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded") => Ok(Check::Done(pod)),
            Some("Failed") => Err(E2eError::Failed(format!(
                "pod {name} failed: {}",
                describe(&pod)
            ))),
            _ => Ok(Check::Pending(describe(&pod))),
        }
    })
    .await
}

/// Waits until the pod runs and reports Ready.
pub async fn wait_ready(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<Pod> {
    wait::until(
        &format!("pod {name} to be running and ready"),
        timeout,
        || async move {
            let pod = pods.get(name).await?;
            check_hopeless(&pod)?;
            let status = pod.status.as_ref();
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            match status.and_then(|s| s.phase.as_deref()) {
                Some("Succeeded" | "Failed") => Err(E2eError::Failed(format!(
                    "pod {name} exited: {}",
                    describe(&pod)
                ))),
                Some("Running") if ready => Ok(Check::Done(pod)),
                _ => Ok(Check::Pending(describe(&pod))),
            }
        },
    )
    .await
}

/// Waits until no pod named `name` with UID `uid` exists any more.
pub async fn wait_deleted(pods: &Api<Pod>, name: &str, uid: &str, timeout: Duration) -> Result<()> {
    wait::until(
        &format!("pod {name} to be deleted"),
        timeout,
        || async move {
            match pods.get_opt(name).await? {
                Some(p) if p.metadata.uid.as_deref() == Some(uid) => {
                    Ok(Check::Pending(format!("still present: {}", describe(&p))))
                }
                _ => Ok(Check::Done(())),
            }
        },
    )
    .await
}
