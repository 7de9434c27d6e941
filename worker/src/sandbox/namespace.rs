//! Presentation::Namespace: a root directory prepared once on disk (mount points, device-file
//! placeholders, symlinks), and the list of bind mounts each child makes in its private mount
//! namespace before it pivots into that root. The child only runs syscalls over strings
//! prepared here.

use super::SandboxError;
use crate::workspace::WorkspaceSpec;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the tool directory appears inside the namespace.
pub const TOOLS_IN_NS: &str = "/.kube-harness/bin";

/// System directories bound read-only (or recreated as symlinks when they are symlinks).
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// One bind mount: `src` (host path) onto `dst` (path under the prepared root, host view).
pub struct Bind {
    pub src: CString,
    pub dst: CString,
    pub readonly: bool,
    /// Also hide set-uid bits, device files and (for writable data) executables.
    pub data: bool,
    pub recursive: bool,
}

pub struct NamespacePlan {
    /// The prepared root, as the parent sees it.
    pub root_host: PathBuf,
    pub root: CString,
    pub unshare_flags: libc::c_int,
    /// For a non-root caller: (uid_map, gid_map) contents mapping the caller onto itself.
    pub id_maps: Option<(CString, CString)>,
    pub binds: Vec<Bind>,
}

/// Prepares `runtime/root` and the bind list.
pub fn prepare(
    runtime: &Path,
    tmp_dir: &Path,
    workspace: &WorkspaceSpec,
    empty_network: bool,
    is_root: bool,
) -> Result<NamespacePlan, SandboxError> {
    let root = runtime.join("root");
    mkdir_p(&root)?;
    let mut binds = Vec::new();
    let mut bind = |src: &Path, dst_rel: &Path, readonly: bool, data: bool, recursive: bool| {
        binds.push(Bind {
            src: cstr(src),
            dst: cstr(&root.join(dst_rel)),
            readonly,
            data,
            recursive,
        });
    };

    for dir in SYSTEM {
        let host = Path::new(dir);
        let rel = Path::new(&dir[1..]);
        let Ok(meta) = std::fs::symlink_metadata(host) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(host)
                .map_err(|e| SandboxError::io(format!("reading {dir}"), e))?;
            symlink(&target, &root.join(rel))?;
        } else if meta.is_dir() {
            mkdir_p(&root.join(rel))?;
            bind(host, rel, true, false, true);
        }
    }
    // resolv.conf may point into /run (systemd-resolved): bind the target at the same path.
    if let Ok(target) = std::fs::canonicalize("/etc/resolv.conf") {
        if !target.starts_with("/etc") && !target.starts_with("/usr") {
            let rel = target.strip_prefix("/").unwrap_or(&target).to_path_buf();
            if let Some(parent) = rel.parent() {
                mkdir_p(&root.join(parent))?;
            }
            touch(&root.join(&rel))?;
            bind(&target, &rel, true, true, false);
        }
    }

    mkdir_p(&root.join("proc"))?;
    bind(Path::new("/proc"), Path::new("proc"), false, true, true);

    mkdir_p(&root.join("dev"))?;
    for d in DEVICES {
        let host = Path::new("/dev").join(d);
        if host.exists() {
            let rel = Path::new("dev").join(d);
            touch(&root.join(&rel))?;
            bind(&host, &rel, false, false, false);
        }
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(Path::new(target), &root.join("dev").join(name))?;
    }

    mkdir_p(&root.join("tmp"))?;
    bind(tmp_dir, Path::new("tmp"), false, true, false);
    // The tool directory is created under root/ by the caller, no bind needed.

    // Workspace mounts, parents before nested ones; then read-only prefixes that exist.
    let mut mounts: Vec<_> = workspace.mounts.iter().collect();
    mounts.sort_by_key(|m| m.harness_path.components().count());
    for m in &mounts {
        let rel = m.harness_path.strip_prefix("/").unwrap_or(&m.harness_path);
        mkdir_p(&root.join(rel))?;
        bind(&m.backing_path, rel, !m.writable, true, false);
    }
    for m in &mounts {
        for p in &m.read_only_prefixes {
            let Ok(rel_in_mount) = p.strip_prefix(&m.harness_path) else {
                continue;
            };
            let backing = m.backing_path.join(rel_in_mount);
            // Only existing, non-symlink prefixes; landlock covers the rest.
            let is_real = std::fs::symlink_metadata(&backing)
                .is_ok_and(|meta| !meta.file_type().is_symlink());
            if is_real {
                let rel = p.strip_prefix("/").unwrap_or(p);
                bind(&backing, rel, true, true, false);
            }
        }
    }

    let mut unshare_flags = libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if empty_network {
        unshare_flags |= libc::CLONE_NEWNET;
    }
    let id_maps = if is_root {
        None
    } else {
        unshare_flags |= libc::CLONE_NEWUSER;
        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Some((
            CString::new(format!("{uid} {uid} 1")).expect("no NUL"),
            CString::new(format!("{gid} {gid} 1")).expect("no NUL"),
        ))
    };
    Ok(NamespacePlan {
        root: cstr(&root),
        root_host: root,
        unshare_flags,
        id_maps,
        binds,
    })
}

fn cstr(p: &Path) -> CString {
    // Paths come from the validated spec and fixed names; a NUL cannot be in an OS path.
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

fn mkdir_p(p: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir_all(p).map_err(|e| SandboxError::io(format!("creating {}", p.display()), e))
}

fn touch(p: &Path) -> Result<(), SandboxError> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)
        .map(drop)
        .map_err(|e| SandboxError::io(format!("creating {}", p.display()), e))
}

fn symlink(target: &Path, link: &Path) -> Result<(), SandboxError> {
    std::os::unix::fs::symlink(target, link)
        .map_err(|e| SandboxError::io(format!("creating symlink {}", link.display()), e))
}
