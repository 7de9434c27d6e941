//! A session's Persistent Dirs as worker pod parts (docs/operator.md "Persistent Dirs"): each
//! claim source mounted where only the worker reads it (`SOURCES_ROOT/<name>`, read-only for a
//! read-only dir), each ConfigMap source mounted read-only at /persistent/<name> itself, the
//! kept (manual) versions on the workspace volume outside every path commands reach, and the
//! worker's `--persistent-dir` / `--read-only-prefix` arguments.

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource,
    Volume, VolumeMount,
};
use kube::{Api, Client, ResourceExt};
use kube_harness_crds::session::{CommitPolicy, PersistentDir};
use kube_harness_crds::HarnessSession;
use kube_harness_protocol::worker_args::{
    PersistentDirArg, PersistentPolicy, MANUAL_COMMITS_ROOT, SOURCES_ROOT,
};
use std::path::PathBuf;

/// The worker's argument for one dir.
pub fn dir_arg(dir: &PersistentDir) -> PersistentDirArg {
    let (policy, path) = match (&dir.source.claim, dir.commit) {
        (None, _) => (PersistentPolicy::Mounted, None),
        (Some(claim), commit) => (
            match commit {
                CommitPolicy::ReadOnly => PersistentPolicy::ReadOnly,
                CommitPolicy::AfterTurn => PersistentPolicy::AfterTurn,
                CommitPolicy::Manual => PersistentPolicy::Manual,
            },
            Some(claim.path.clone().unwrap_or_else(|| dir.name.clone())),
        ),
    };
    PersistentDirArg {
        name: dir.name.clone(),
        policy,
        path,
    }
}

/// `--persistent-dir` and `--read-only-prefix` values of the session's worker.
pub fn worker_args(session: &HarnessSession) -> (Vec<PersistentDirArg>, Vec<PathBuf>) {
    let dirs = &session.spec.workspace.persistent_dirs;
    let prefixes = dirs
        .iter()
        .flat_map(|d| {
            d.read_only_prefixes
                .iter()
                .map(move |p| PathBuf::from("/persistent").join(&d.name).join(p))
        })
        .collect();
    (dirs.iter().map(dir_arg).collect(), prefixes)
}

/// Whether the session's worker mounts a claim source (and so needs the shared group).
pub fn mounts_claims(session: &HarnessSession) -> bool {
    session
        .spec
        .workspace
        .persistent_dirs
        .iter()
        .any(|d| d.source.claim.is_some())
}

/// The volumes and mounts the worker container gets for the session's Persistent Dirs.
pub fn volumes(session: &HarnessSession) -> (Vec<Volume>, Vec<VolumeMount>) {
    let dirs = &session.spec.workspace.persistent_dirs;
    let (volumes, mut mounts): (Vec<Volume>, Vec<VolumeMount>) = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let name = format!("persistent-{i}");
            let (volume, mount_path) = match (&d.source.claim, &d.source.config_map) {
                (Some(claim), _) => (
                    Volume {
                        name: name.clone(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: claim.claim_name.clone(),
                            read_only: Some(d.commit == CommitPolicy::ReadOnly),
                        }),
                        ..Volume::default()
                    },
                    format!("{SOURCES_ROOT}/{}", d.name),
                ),
                (None, config_map) => (
                    Volume {
                        name: name.clone(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: config_map
                                .as_ref()
                                .map(|c| c.name.clone())
                                .unwrap_or_default(),
                            default_mode: Some(0o444),
                            ..ConfigMapVolumeSource::default()
                        }),
                        ..Volume::default()
                    },
                    format!("/persistent/{}", d.name),
                ),
            };
            let mount = VolumeMount {
                name,
                mount_path,
                read_only: Some(d.source.claim.is_none() || d.commit == CommitPolicy::ReadOnly),
                ..VolumeMount::default()
            };
            (volume, mount)
        })
        .unzip();
    let keeps = dirs
        .iter()
        .any(|d| d.source.claim.is_some() && d.commit != CommitPolicy::ReadOnly);
    if keeps {
        // A sub-directory of the workspace claim, the pod's `workspace` volume.
        mounts.push(VolumeMount {
            name: "workspace".into(),
            mount_path: MANUAL_COMMITS_ROOT.into(),
            sub_path: Some("manual-commits".into()),
            read_only: Some(false),
            ..VolumeMount::default()
        });
    }
    (volumes, mounts)
}

/// The first Persistent Dir whose source (claim or ConfigMap) does not exist in the session's
/// namespace, as a message for the user. Without this check the worker pod would wait in Pending
/// (an unschedulable pod, or a mount the kubelet retries) and the session would say only that it
/// is starting.
pub async fn missing_source(
    session: &HarnessSession,
    client: &Client,
) -> Result<Option<String>, kube::Error> {
    let ns = session.namespace().unwrap_or_default();
    for dir in &session.spec.workspace.persistent_dirs {
        let missing = match (&dir.source.claim, &dir.source.config_map) {
            (Some(claim), _) => Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .get_opt(&claim.claim_name)
                .await?
                .is_none()
                .then(|| format!("PersistentVolumeClaim {ns}/{}", claim.claim_name)),
            (None, Some(cm)) => Api::<ConfigMap>::namespaced(client.clone(), &ns)
                .get_opt(&cm.name)
                .await?
                .is_none()
                .then(|| format!("ConfigMap {ns}/{}", cm.name)),
            (None, None) => None,
        };
        if let Some(what) = missing {
            return Ok(Some(format!(
                "the source of Persistent Dir {:?} does not exist: {what}; the worker pod starts once it is created",
                dir.name
            )));
        }
    }
    Ok(None)
}
