//! Reading a Tier-1 pod as a Sandbox (docs/tier1.md): Pending, Ready, or Failed with a reason.
//! Failures that will not fix themselves are Failed at once, so the worker gives up in seconds
//! instead of waiting out its provisioning timeout. Pure, so tests feed it pod statuses.

use super::pod::{AGENT_PORT, KEEPER_CONTAINER};
use crate::kube_util::{pod_condition, ready_ip, CONTAINER_FAILURES, IMAGE_FAILURES};
use crate::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube_harness_protocol::tier1::{self as wire, Sandbox, Source};

/// Where a sandbox is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Ready { ip: String },
    Failed { reason: String, message: String },
}

pub fn phase(pod: &Pod) -> Phase {
    let failed = |reason: &str, message: String| Phase::Failed {
        reason: reason.into(),
        message,
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return failed(
            "PodDeleted",
            format!("Tier-1 pod {} is being deleted", pod.name_any()),
        );
    }
    let Some(status) = &pod.status else {
        return Phase::Pending;
    };
    if let Some(p @ ("Failed" | "Succeeded")) = status.phase.as_deref() {
        let why = status
            .message
            .clone()
            .or_else(|| status.reason.clone())
            .unwrap_or_else(|| format!("the pod phase is {p}"));
        return failed(
            "PodFailed",
            format!("Tier-1 pod {} ended: {why}", pod.name_any()),
        );
    }
    if let Some(c) = pod_condition(status, "PodScheduled", "False")
        .filter(|c| c.reason.as_deref() == Some("Unschedulable"))
    {
        return failed(
            "Unschedulable",
            c.message
                .clone()
                .unwrap_or_else(|| "no node can run the Tier-1 pod".into()),
        );
    }
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in containers {
        let state = cs.state.as_ref();
        if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            let why = w.reason.clone().unwrap_or_default();
            let message = format!(
                "container {} ({}): {why}: {}",
                cs.name,
                cs.image,
                w.message.clone().unwrap_or_default()
            );
            if IMAGE_FAILURES.contains(&why.as_str()) {
                return failed("ImagePullFailed", message);
            }
            if CONTAINER_FAILURES.contains(&why.as_str()) {
                return failed("ContainerFailed", message);
            }
        }
        // The keeper lives and dies with the agent (it exits when the agent's connection
        // closes, and a lost keeper is never replaced): either ending is the agent's end.
        let is_agent = cs.name == "agent" || cs.name == KEEPER_CONTAINER;
        let terminated = state.and_then(|s| s.terminated.as_ref());
        if is_agent && (terminated.is_some() || cs.restart_count > 0) {
            let how = terminated
                .map(|t| {
                    format!(
                        "exit code {} ({})",
                        t.exit_code,
                        t.reason.clone().unwrap_or_default()
                    )
                })
                .unwrap_or_else(|| format!("restarted {} times", cs.restart_count));
            let who = match cs.name == KEEPER_CONTAINER {
                true => "skills keeper",
                false => "agent",
            };
            return failed(
                "AgentDied",
                format!("the Tier-1 {who} in {} died: {how}", pod.name_any()),
            );
        }
        if !is_agent {
            if let Some(t) = terminated.filter(|t| t.exit_code != 0) {
                return failed(
                    "InitFailed",
                    format!(
                        "copying the agent binary failed in {}: exit code {}: {}",
                        pod.name_any(),
                        t.exit_code,
                        t.message.clone().unwrap_or_default()
                    ),
                );
            }
        }
    }
    match ready_ip(status) {
        Some(ip) => Phase::Ready { ip: ip.clone() },
        None => Phase::Pending,
    }
}

/// The Sandbox of `pod`; `token` is the pod's token (only used when Ready).
pub fn sandbox(pod: &Pod, turn: &str, token: Option<String>) -> Sandbox {
    let source = if pod.labels().contains_key(labels::POOL) {
        Source::Prepared
    } else {
        Source::Ordinary
    };
    let mut s = Sandbox {
        turn: turn.into(),
        pod: Some(pod.name_any()),
        phase: wire::Phase::Pending,
        endpoint: None,
        token: None,
        source: Some(source),
        miss_reason: pod.annotations().get(labels::MISS_REASON).cloned(),
        reason: None,
        message: None,
        reused: pod.annotations().contains_key(labels::REUSED),
    };
    match phase(pod) {
        Phase::Pending => {}
        Phase::Ready { ip } => {
            s.phase = wire::Phase::Ready;
            s.endpoint = Some(format!("http://{}:{AGENT_PORT}", bracket(&ip)));
            s.token = token;
        }
        Phase::Failed { reason, message } => {
            s.phase = wire::Phase::Failed;
            s.reason = Some(reason);
            s.message = Some(message);
        }
    }
    s
}

/// IPv6 addresses go in brackets in a URL.
fn bracket(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.into()
    }
}
