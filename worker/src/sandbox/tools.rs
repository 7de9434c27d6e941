//! The tool directory: one symlink per Tier-0 command of the capability matrix that exists on
//! this host (gated ones only when their toggle is on). PATH points here; landlock grants
//! EXECUTE only to the symlinks' real targets and what the kernel needs to start them.

use super::{elf, SandboxError};
use crate::classify::{matrix, RuntimeToggles};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// System directories searched for tools, in PATH order. The caller's own PATH is never used:
/// it may hold user or project directories.
const SEARCH: &[&str] = &[
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/local/sbin",
    "/usr/sbin",
    "/sbin",
];

pub struct Toolset {
    /// Command names linked into the tool directory, sorted.
    pub names: Vec<String>,
    /// Canonical files that must be executable: tool targets, bash, their interpreters.
    pub executables: BTreeSet<PathBuf>,
    /// Canonical path of bash.
    pub bash: PathBuf,
}

/// Creates `dir` with the symlinks.
pub fn build(dir: &Path, toggles: RuntimeToggles) -> Result<Toolset, SandboxError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        SandboxError::io(format!("creating the tool directory {}", dir.display()), e)
    })?;
    let m = matrix::get(None).ok_or_else(|| {
        SandboxError::io(
            "loading the capability matrix",
            std::io::ErrorKind::NotFound.into(),
        )
    })?;
    let t = &m.doc.tier0;
    let mut wanted: Vec<&String> = t.always.iter().collect();
    // Interpreters of toggled-off groups: a tool that needs one (yq is often a python3 script)
    // would make it executable again, so such tools are left out too.
    let mut forbidden = BTreeSet::new();
    for (on, names) in [
        (toggles.network, &t.network),
        (toggles.python, &t.python),
        (toggles.javascript, &t.javascript),
    ] {
        if on {
            wanted.extend(names);
        } else {
            forbidden.extend(names.iter().filter_map(|n| locate(n)));
        }
    }

    let bash = ["/usr/bin/bash", "/bin/bash"]
        .iter()
        .find_map(|p| std::fs::canonicalize(p).ok().filter(|c| is_executable(c)))
        .ok_or(SandboxError::NoBash)?;

    let mut names = Vec::new();
    let mut executables = BTreeSet::new();
    add_with_interpreters(&bash, &mut executables);
    for name in wanted {
        if name.contains('/') || name == "." || name == ".." {
            continue;
        }
        let Some(target) = locate(name) else {
            continue;
        };
        let mut chain = BTreeSet::new();
        add_with_interpreters(&target, &mut chain);
        if !chain.is_disjoint(&forbidden) {
            continue;
        }
        let link = dir.join(name);
        std::os::unix::fs::symlink(&target, &link)
            .map_err(|e| SandboxError::io(format!("linking {}", link.display()), e))?;
        executables.extend(chain);
        names.push(name.clone());
    }
    names.sort();
    Ok(Toolset {
        names,
        executables,
        bash,
    })
}

/// The canonical file a command name resolves to in the system directories.
fn locate(name: &str) -> Option<PathBuf> {
    SEARCH
        .iter()
        .map(|d| Path::new(d).join(name))
        .find_map(|p| std::fs::canonicalize(&p).ok().filter(|c| is_executable(c)))
}

/// Adds `file` and, transitively, the interpreters the kernel opens to start it.
fn add_with_interpreters(file: &Path, out: &mut BTreeSet<PathBuf>) {
    let mut next = Some(file.to_path_buf());
    let mut depth = 0;
    while let Some(f) = next.take() {
        let Ok(canon) = std::fs::canonicalize(&f) else {
            return;
        };
        if !out.insert(canon.clone()) || depth > 4 {
            return;
        }
        depth += 1;
        next = elf::interpreter(&canon);
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
