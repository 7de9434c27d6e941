//! A look at the node's container runtime, below the API server: proves that deleting a pod really
//! removed its containers. Only possible where the test runs on the node (the tests/cluster cluster
//! exports `KH_CONTAINERD_ADDRESS`); elsewhere (kind) these return `None` and callers skip the check.

use crate::{E2eError, Result};

/// IDs of containerd containers (sandbox and app containers) belonging to the pod with `uid`, or
/// `None` when the node's containerd is not reachable from here.
pub async fn containers_of_pod(uid: &str) -> Result<Option<Vec<String>>> {
    let filter = format!("labels.\"io.kubernetes.pod.uid\"=={uid}");
    ctr_lines(&["containers", "ls", "-q", &filter]).await
}

/// Which of `ids` still have a task (a live process) in containerd; `None` as above.
pub async fn live_tasks(ids: &[String]) -> Result<Option<Vec<String>>> {
    Ok(ctr_lines(&["tasks", "ls", "-q"])
        .await?
        .map(|tasks| tasks.into_iter().filter(|t| ids.contains(t)).collect()))
}

/// Runs `ctr` against the node's containerd (namespace k8s.io) and returns its non-empty lines.
async fn ctr_lines(args: &[&str]) -> Result<Option<Vec<String>>> {
    let Ok(address) = std::env::var("KH_CONTAINERD_ADDRESS") else {
        return Ok(None);
    };
    let cmd = format!("ctr --address {address} -n k8s.io {}", args.join(" "));
    let out = tokio::process::Command::new("ctr")
        .args(["--address", &address, "-n", "k8s.io"])
        .args(args)
        .output()
        .await
        .map_err(|e| E2eError::Command {
            cmd: cmd.clone(),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(E2eError::Command {
            cmd,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect(),
    ))
}
