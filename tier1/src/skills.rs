//! The session's skills (`/.agents`) on Tier-1: the files Tier-0 shows there, shown read-only to
//! every Tier-1 command and never merged back.
//!
//! They travel as a workspace archive of their own (`kube-harness.workspace.v1`, one mount,
//! `/.agents`) under limits of their own, far below the workspace's: skills are ConfigMaps (1 MiB
//! each, 16 at most), so a larger tree is not skills. The receiver checks the archive as any
//! handoff (`workspace::unpack`: no `..`, absolute or escaping-symlink entries, nothing written
//! through a symlink, every count and the digest) and only then replaces what was shown.
//!
//! The directory it is installed into is one commands only ever see through a read-only mount:
//! in a pod the volume the agent's container mounts read-only at `/.agents` (written by the skills
//! keeper, a second container: `keeper.rs`); on the local host and an agent with its own
//! namespace, a directory the namespace binds read-only there. Why a mount and not file modes: in
//! a pod the agent and its commands share one uid, and an owner may chmod its own files writable
//! again; a read-only mount refuses a write, an unlink and a chmod alike (EROFS), also to root.
//!
//! Merge-back never carries them either way: `changes_since` packs only tracked mounts, and the
//! worker's `apply` rejects any path under an untracked or read-only mount.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use kube_harness_protocol::tier1::BindReport;
use kube_harness_protocol::RuntimeToggles;
use kube_harness_workspace::safe_fs::{self, WalkError};
use kube_harness_workspace::spec::AGENTS;
use kube_harness_workspace::{
    self as workspace, Exclude, Limits, Mount, PackOptions, PackReport, UnpackOptions,
    WorkspaceError, WorkspaceSpec,
};
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Most bytes of file content in the skills (16 ConfigMaps of at most 1 MiB each).
pub const MAX_SKILLS_BYTES: u64 = 16 << 20;
/// Most entries (files, directories, symlinks) in the skills.
pub const MAX_SKILLS_ENTRIES: u64 = 4096;
/// Most bytes of a skills archive on the wire: the content plus a tar header, padding and a
/// long-name entry for each of the most entries, with room to spare.
pub const MAX_SKILLS_ARCHIVE_BYTES: u64 = 32 << 20;
/// Names of install staging directories inside the skills directory.
pub const STAGING_PREFIX: &str = ".kube-harness-skills-";

/// The limits both sides hold a skills archive to.
pub fn limits() -> Limits {
    Limits {
        max_total_bytes: MAX_SKILLS_BYTES,
        max_entry_bytes: MAX_SKILLS_BYTES,
        max_entries: MAX_SKILLS_ENTRIES,
        max_manifest_bytes: 1 << 20,
    }
}

/// The directory behind `/.agents` in `spec`, when it has one that exists.
pub fn agents_dir(spec: &WorkspaceSpec) -> Option<&Path> {
    spec.mounts
        .iter()
        .find(|m| m.harness_path == Path::new(AGENTS))
        .map(|m| m.backing_path.as_path())
        .filter(|p| p.is_dir())
}

/// `spec` with `/.agents` shown from `dir` (read-only, untracked) instead of where it was.
pub fn shown_from(spec: &WorkspaceSpec, dir: &Path) -> WorkspaceSpec {
    let mut out = spec.clone();
    out.mounts.retain(|m| m.harness_path != Path::new(AGENTS));
    out.mounts.push(Mount {
        harness_path: PathBuf::from(AGENTS),
        backing_path: dir.to_path_buf(),
        writable: false,
        tracked: false,
        read_only_prefixes: Vec::new(),
    });
    out
}

/// Packs the skills at `dir` (`None`: a session without skills, packed as an empty `/.agents`)
/// into `out`; `TooLarge` over [`limits`], before anything is written.
pub fn pack<W: Write>(dir: Option<&Path>, out: W) -> Result<PackReport, WorkspaceError> {
    let empty;
    let dir = match dir {
        Some(dir) => dir,
        None => {
            empty = tempfile::tempdir().map_err(|e| WorkspaceError::Target {
                path: std::env::temp_dir(),
                reason: format!("an empty /.agents to pack: {e}"),
            })?;
            empty.path()
        }
    };
    let spec = WorkspaceSpec {
        mounts: vec![Mount {
            harness_path: PathBuf::from(AGENTS),
            backing_path: dir.to_path_buf(),
            writable: false,
            tracked: true,
            read_only_prefixes: Vec::new(),
        }],
        runtime: RuntimeToggles::default(),
    };
    let opts = PackOptions {
        exclude: Exclude::default(),
        limits: limits(),
    };
    workspace::pack(&spec, &opts, out)
}

/// Why skills were not installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallError {
    /// The archive is refused (corrupt, lying, an unsafe entry, over a limit); what was shown
    /// before is still shown.
    BadArchive(String),
    /// This side's disk or permissions, or the keeper is gone; what is shown may be partial
    /// (commands never run during an install, and the next install replaces it whole).
    Io(String),
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InstallError::BadArchive(m) => write!(f, "the skills archive is refused: {m}"),
            InstallError::Io(m) => write!(f, "installing the skills: {m}"),
        }
    }
}

/// Replaces everything in `dir` with the skills archive read from `input`. The archive is
/// unpacked, with every check, into a fresh staging directory inside `dir` first: a refused one
/// changes nothing that was shown. Only then is the old content removed and the new moved in
/// (renames within `dir`), never following a symlink. The caller makes sure no command runs
/// meanwhile (the staging directory is briefly in `dir`).
pub fn install(input: impl Read, dir: &Path) -> Result<BindReport, InstallError> {
    let io_err = |e: io::Error| InstallError::Io(format!("{}: {e}", dir.display()));
    let root = safe_fs::open_root(dir).map_err(io_err)?;
    let name = OsString::from(format!("{STAGING_PREFIX}{}", uuid::Uuid::new_v4().simple()));
    let opts = UnpackOptions {
        mounts: vec![PathBuf::from(AGENTS)],
        limits: limits(),
    };
    // unpack removes the staging directory it created when it refuses the archive.
    let report = workspace::unpack(input, &dir.join(&name), &opts).map_err(|e| match e {
        WorkspaceError::Io { .. } | WorkspaceError::Target { .. } => {
            InstallError::Io(e.to_string())
        }
        other => InstallError::BadArchive(other.to_string()),
    })?;
    let swapped = swap(&root, &name);
    let cleaned = safe_fs::remove_tree_at(&root, &name);
    swapped.and(cleaned).map_err(io_err)?;
    Ok(BindReport {
        files: report.entries,
        bytes: report.total_bytes,
    })
}

/// Removes every entry of `root` but `staging` (also staging left by an install that was
/// killed), then moves the staged `.agents` tree's entries into `root`.
fn swap(root: &OwnedFd, staging: &OsStr) -> io::Result<()> {
    for old in safe_fs::list_dir(root)? {
        if old != staging {
            safe_fs::remove_tree_at(root, &old)?;
        }
    }
    let staged = safe_fs::open_dir_at(root, staging).map_err(WalkError::into_io)?;
    let agents = match safe_fs::open_dir_at(&staged, OsStr::new(".agents")) {
        Ok(fd) => fd,
        // An archive without even its mount root: nothing to show.
        Err(WalkError::Missing) => return Ok(()),
        Err(e) => return Err(e.into_io()),
    };
    for entry in safe_fs::list_dir(&agents)? {
        rustix::fs::renameat(&agents, &entry, root, &entry)?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::fs;

    fn packed(dir: &Path) -> (Vec<u8>, PackReport) {
        let mut out = Vec::new();
        let report = pack(Some(dir), &mut out).unwrap();
        (out, report)
    }

    #[test]
    fn install_replaces_the_whole_content_and_reports_what_was_packed() {
        let src = tempfile::tempdir().unwrap();
        fs::create_dir_all(src.path().join("review")).unwrap();
        fs::write(src.path().join("review/SKILL.md"), "# Review\n").unwrap();
        // A ConfigMap volume's own layout: relative links through `..data`.
        std::os::unix::fs::symlink("review", src.path().join("..data")).unwrap();
        let (archive, report) = packed(src.path());

        let dst = tempfile::tempdir().unwrap();
        fs::write(dst.path().join("stale.md"), "old").unwrap();
        fs::create_dir_all(dst.path().join(format!("{STAGING_PREFIX}left"))).unwrap();
        let installed = install(&archive[..], dst.path()).unwrap();
        assert_eq!(
            (installed.files, installed.bytes),
            (report.entries, report.total_bytes)
        );
        let mut names: Vec<_> = fs::read_dir(dst.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["..data", "review"]);
        assert_eq!(
            fs::read_to_string(dst.path().join("..data/SKILL.md")).unwrap(),
            "# Review\n"
        );
    }

    #[test]
    fn a_refused_archive_leaves_what_was_shown() {
        let dst = tempfile::tempdir().unwrap();
        fs::write(dst.path().join("kept.md"), "kept").unwrap();
        let err = install(&b"not a tar at all"[..], dst.path()).unwrap_err();
        assert!(matches!(err, InstallError::BadArchive(_)), "{err:?}");
        let names: Vec<_> = fs::read_dir(dst.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [OsString::from("kept.md")]);
    }

    #[test]
    fn skills_over_their_limit_are_refused_before_anything_is_written() {
        let src = tempfile::tempdir().unwrap();
        let big = fs::File::create(src.path().join("huge.md")).unwrap();
        big.set_len(MAX_SKILLS_BYTES + 1).unwrap();
        let mut out = Vec::new();
        let err = pack(Some(src.path()), &mut out).unwrap_err();
        assert!(matches!(err, WorkspaceError::TooLarge { .. }), "{err}");
        assert!(out.is_empty());
    }

    #[test]
    fn no_skills_pack_as_an_empty_agents() {
        let mut out = Vec::new();
        let report = pack(None, &mut out).unwrap();
        assert_eq!((report.entries, report.total_bytes), (1, 0));
        let dst = tempfile::tempdir().unwrap();
        fs::write(dst.path().join("old.md"), "old").unwrap();
        install(&out[..], dst.path()).unwrap();
        assert_eq!(fs::read_dir(dst.path()).unwrap().count(), 0);
    }
}
