//! Shared helpers of the workspace_* tests: real trees in temp dirs, listings of everything
//! around a target, and content-only snapshot comparison.
#![allow(dead_code)]

use kube_harness_protocol::RuntimeToggles;
use kube_harness_workspace::{Entry, Snapshot, WorkspaceSpec};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The canonical layout over `root` with the given read-only prefixes.
pub fn layout(root: &Path, ro: &[&str]) -> WorkspaceSpec {
    for d in ["session", "artifacts", "persistent", ".agents"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    WorkspaceSpec::canonical(
        root,
        RuntimeToggles::default(),
        ro.iter().map(PathBuf::from).collect(),
    )
}

pub fn write(path: &Path, content: &[u8], mode: u32) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn mkdir(path: &Path, mode: u32) {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn symlink(target: &str, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// Every path under `dir` (not following symlinks) with a description of what it is, so two
/// listings differ if anything was created, removed, retargeted or rewritten.
pub fn listing(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(dir).follow_links(false) {
        let e = e.unwrap();
        let m = e.path().symlink_metadata().unwrap();
        let what = if m.file_type().is_symlink() {
            format!("link {}", std::fs::read_link(e.path()).unwrap().display())
        } else if m.is_dir() {
            format!("dir {:o}", m.permissions().mode() & 0o777)
        } else {
            format!(
                "file {:o} {:?}",
                m.permissions().mode() & 0o777,
                std::fs::read(e.path()).unwrap()
            )
        };
        out.insert(e.path().to_path_buf(), what);
    }
    out
}

/// Kind, mode, size, SHA-256, symlink target.
pub type Content = (String, u32, u64, Option<String>, Option<String>);

/// The content view of a snapshot (kind, mode, size, hash / target), stat identity dropped.
pub fn content(s: &Snapshot) -> BTreeMap<PathBuf, Content> {
    s.entries
        .iter()
        .map(|(p, e): (&PathBuf, &Entry)| {
            let size = if e.kind == kube_harness_workspace::EntryKind::File {
                e.size
            } else {
                0
            };
            (
                p.clone(),
                (
                    format!("{:?}", e.kind),
                    e.mode,
                    size,
                    e.sha256.clone(),
                    e.target.clone(),
                ),
            )
        })
        .collect()
}

/// Where a test that must run unprivileged (root passes every mode check) does its work.
pub enum Unprivileged {
    /// As root: the test binary ran the test again as uid/gid 65533 in this world-writable
    /// directory, and it passed.
    Ran(tempfile::TempDir),
    /// The run to do the work in (that child, or a test run as another user already).
    Here(PathBuf),
}

/// Runs the test `test` (its full path) again as uid/gid 65533 when the caller is root, naming
/// its directory in the variable `env`; else returns where to work.
pub fn unprivileged(test: &str, env: &str) -> Unprivileged {
    use std::os::unix::process::CommandExt;
    if let Some(dir) = std::env::var_os(env) {
        return Unprivileged::Here(PathBuf::from(dir));
    }
    if !rustix::process::geteuid().is_root() {
        return Unprivileged::Here(tempfile::tempdir().unwrap().keep());
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--test-threads=1"])
        .env(env, tmp.path())
        .uid(65533)
        .gid(65533)
        .status()
        .unwrap();
    assert!(status.success(), "the unprivileged run failed: {status}");
    Unprivileged::Ran(tmp)
}
