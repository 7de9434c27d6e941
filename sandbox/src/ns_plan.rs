//! The mount namespace as the forked side sees it: the plan its helper builds it from and the
//! built namespace each command joins. Data only, made before any fork by namespace.rs and read by
//! child.rs, so neither has to import the other's code for it.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// One bind mount: `src` (host path) onto `dst` (path under the prepared root, host view).
pub struct Bind {
    pub src: CString,
    pub dst: CString,
    /// Mount flags the bind is remounted with (`MS_RDONLY`, `MS_NOSUID`, `MS_NODEV`,
    /// `MS_NOEXEC`); 0: none, no remount.
    pub flags: libc::c_ulong,
    pub recursive: bool,
}

/// The helper's recipe: the prepared root, its bind mounts, the namespaces to unshare.
pub struct NamespacePlan {
    /// The prepared root, as the parent sees it.
    pub root_host: PathBuf,
    pub root: CString,
    /// What the helper unshares: the mount namespace (and, without root, a user namespace).
    pub unshare_flags: libc::c_int,
    /// What each command unshares after joining.
    pub command_flags: libc::c_int,
    /// For a non-root caller: (uid_map, gid_map) contents mapping the caller onto itself.
    pub id_maps: Option<(CString, CString)>,
    pub binds: Vec<Bind>,
    /// Where a procfs of the sandbox's own is mounted (`hidepid=ptraceable`), as root; `None`:
    /// the host's /proc is among the binds.
    pub fresh_proc: Option<CString>,
}

/// A built mount namespace, held open by file descriptors (no process keeps it alive).
pub struct Namespace {
    pub mnt: OwnedFd,
    /// The user namespace owning `mnt`, when the caller is not root.
    pub user: Option<OwnedFd>,
    /// The sandbox root inside `mnt` (O_PATH).
    pub root: OwnedFd,
    pub unshare_flags: libc::c_int,
}
