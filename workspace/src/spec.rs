//! The workspace as data: a mount table plus runtime toggles. Sandboxes never see a session; hosts
//! describe the filesystem this way and hand it to whichever tier runs the command.

use kube_harness_protocol::RuntimeToggles;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One directory the script sees at `harness_path`, backed by `backing_path` on the host/pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// Absolute path inside the sandbox, e.g. `/session`.
    pub harness_path: PathBuf,
    /// Directory the host process can reach (snapshots for file events are taken from it).
    pub backing_path: PathBuf,
    /// Read-write (`true`) or read-only.
    pub writable: bool,
    /// Changes under it produce `harness.file.*` events and are merged back after a higher tier.
    pub tracked: bool,
    /// Harness paths under this mount that are read-only even though the mount is writable
    /// (Persistent Dirs with the `read-only` commit policy), resolved when the turn starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_prefixes: Vec<PathBuf>,
}

/// The mount table and toggles a turn runs under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSpec {
    pub mounts: Vec<Mount>,
    pub runtime: RuntimeToggles,
}

/// The canonical harness paths, the same on every tier.
pub const SESSION: &str = "/session";
pub const ARTIFACTS: &str = "/artifacts";
pub const PERSISTENT: &str = "/persistent";
pub const AGENTS: &str = "/.agents";

impl WorkspaceSpec {
    /// The canonical layout over a local data directory laid out as the local host does:
    /// `session/`, `artifacts/`, `persistent/`, `.agents/`.
    pub fn canonical(
        root: &Path,
        runtime: RuntimeToggles,
        read_only_prefixes: Vec<PathBuf>,
    ) -> Self {
        let mount = |harness: &str, dir: &str, writable: bool, tracked: bool| Mount {
            harness_path: PathBuf::from(harness),
            backing_path: root.join(dir),
            writable,
            tracked,
            read_only_prefixes: Vec::new(),
        };
        let mut persistent = mount(PERSISTENT, "persistent", true, true);
        persistent.read_only_prefixes = read_only_prefixes;
        WorkspaceSpec {
            mounts: vec![
                mount(SESSION, "session", true, true),
                mount(ARTIFACTS, "artifacts", true, true),
                persistent,
                mount(AGENTS, ".agents", false, false),
            ],
            runtime,
        }
    }

    /// Tracked mounts: what handoff archives carry and what merge writes back.
    pub fn tracked(&self) -> impl Iterator<Item = &Mount> {
        self.mounts.iter().filter(|m| m.tracked)
    }

    /// The mount that contains `harness_path` (longest prefix wins), if any.
    pub fn mount_for(&self, harness_path: &Path) -> Option<&Mount> {
        self.mounts
            .iter()
            .filter(|m| harness_path.starts_with(&m.harness_path))
            .max_by_key(|m| m.harness_path.components().count())
    }

    /// Whether a write to `harness_path` is allowed by the mount table.
    pub fn is_writable(&self, harness_path: &Path) -> bool {
        self.mount_for(harness_path).is_some_and(|m| {
            m.writable
                && !m
                    .read_only_prefixes
                    .iter()
                    .any(|p| harness_path.starts_with(p))
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn canonical_layout_and_write_rules() {
        let spec = WorkspaceSpec::canonical(
            Path::new("/data/s1"),
            RuntimeToggles::default(),
            vec![PathBuf::from("/persistent/company")],
        );
        assert_eq!(spec.mounts.len(), 4);
        assert_eq!(spec.tracked().count(), 3);
        assert_eq!(
            spec.mount_for(Path::new("/session/a/b"))
                .unwrap()
                .backing_path,
            Path::new("/data/s1/session")
        );
        assert!(spec.is_writable(Path::new("/session/x")));
        assert!(spec.is_writable(Path::new("/persistent/user/notes.md")));
        assert!(!spec.is_writable(Path::new("/persistent/company/kb.md")));
        assert!(!spec.is_writable(Path::new("/.agents/skills/x")));
        assert!(!spec.is_writable(Path::new("/etc/passwd")));
    }
}
