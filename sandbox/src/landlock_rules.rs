//! The landlock ruleset, built once per sandbox in the parent and applied in each child with
//! `landlock_restrict_self`. Rules bind to inodes, so the same ruleset holds whether the script
//! sees a directory at its backing path (Direct) or through a bind mount (Namespace).
//!
//! Landlock rights only add up along a path; there is no "deny below". A writable mount with
//! read-only parts (dynamic read-only prefixes, nested read-only mounts) is therefore granted
//! piecewise: read-only on every directory on the way to a read-only part, read-write on every
//! sibling beside the way (see `grant_writable`).

use super::SandboxError;
use kube_harness_workspace::WorkspaceSpec;
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope, ABI,
};
use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Newest ABI this code knows; older kernels get the subset they support (best effort).
const ABI_KNOWN: ABI = ABI::V10;

/// System directories readable by every command (their binaries are NOT executable unless
/// they are Tier-0 tools).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Entries of /etc never readable: password hashes, host keys, private keys, credentials. In a
/// namespace they are also covered by empty ones, so that not even their names can be listed.
pub(super) const ETC_HIDDEN: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "security",
    "krb5.keytab",
    "kubernetes",
    "docker",
    "containerd",
    "credstore",
    "credstore.encrypted",
    "NetworkManager",
    "wireguard",
    "openvpn",
    "ipsec.secrets",
    "ppp",
    "letsencrypt",
    ".pwd.lock",
    "ssl/private",
];

/// Device files commands may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

pub struct Inputs<'a> {
    pub workspace: &'a WorkspaceSpec,
    pub tool_dir: &'a Path,
    pub executables: &'a BTreeSet<PathBuf>,
    pub tmp_dir: &'a Path,
    /// Namespace mode: the prepared root directory (readable as a directory listing only).
    pub namespace_root: Option<&'a Path>,
    /// Namespace mode as root: the sandbox's own procfs (opened inside the built namespace),
    /// readable like the host's /proc.
    pub own_proc: Option<&'a OwnedFd>,
    pub network: bool,
}

fn read() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir
}

fn read_write() -> BitFlags<AccessFs> {
    AccessFs::from_all(ABI_KNOWN)
        & !(AccessFs::Execute | AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev)
}

fn file_rights() -> BitFlags<AccessFs> {
    AccessFs::from_file(ABI_KNOWN)
}

/// One rule before it is opened. `follow` is false for paths under user-writable directories,
/// which may be symlinks planted by a script.
struct Rule {
    path: PathBuf,
    access: BitFlags<AccessFs>,
    follow: bool,
}

/// Builds the ruleset and returns its file descriptor.
pub fn build(i: &Inputs) -> Result<OwnedFd, SandboxError> {
    let rules = collect(i);
    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI_KNOWN))
        .map_err(err)?;
    if !i.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI_KNOWN))
            .map_err(err)?;
    }
    let mut created = ruleset
        .scope(Scope::from_all(ABI_KNOWN))
        .map_err(err)?
        .create()
        .map_err(err)?;
    for rule in rules {
        let Some((fd, is_dir)) = open_path(&rule.path, rule.follow) else {
            continue;
        };
        let access = if is_dir {
            rule.access
        } else {
            rule.access & file_rights()
        };
        if access.is_empty() {
            continue;
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| SandboxError::Landlock(format!("{}: {e}", rule.path.display())))?;
    }
    if let Some(proc_root) = i.own_proc {
        created = created
            .add_rule(PathBeneath::new(proc_root, read()))
            .map_err(|e| SandboxError::Landlock(format!("the sandbox's /proc: {e}")))?;
    }
    let fd: Option<OwnedFd> = created.into();
    let fd = fd.ok_or(SandboxError::LandlockUnavailable)?;
    // The child makes fd 3 its state descriptor: keep the ruleset well above it.
    // SAFETY: duplicating a valid fd into a fresh close-on-exec one we own.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if high < 0 {
        return Err(SandboxError::io(
            "duplicating the landlock ruleset descriptor",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(high) })
}

/// A ruleset that adds no restriction of its own but a landlock domain boundary, with the
/// signal and abstract-socket scopes where the kernel has them (ABI >= 6). Each command
/// restricts itself with it on top of the forker's domain: landlock lets a process reach
/// (ptrace-style access, `/proc/<pid>/mem`, `fd/`, `environ`; signals under the scope) only
/// processes of its own domain or of domains below it, so no command reaches the forker, a
/// supervisor or another command.
///
/// A ruleset must handle some filesystem right: it handles making block devices (granted nowhere
/// by [`build`]'s ruleset either) and "refer" (moving and linking across directories), which
/// landlock refuses in every layer that does not grant it, handled or not; so it is granted here
/// wherever [`build`] grants it.
pub fn nested(i: &Inputs) -> Result<OwnedFd, SandboxError> {
    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut created = Ruleset::default()
        .handle_access(AccessFs::MakeBlock | AccessFs::Refer)
        .map_err(err)?
        .scope(Scope::from_all(ABI_KNOWN))
        .map_err(err)?
        .create()
        .map_err(err)?;
    for rule in collect(i) {
        if !rule.access.contains(AccessFs::Refer) {
            continue;
        }
        let Some((fd, true)) = open_path(&rule.path, rule.follow) else {
            continue;
        };
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::Refer))
            .map_err(|e| SandboxError::Landlock(format!("{}: {e}", rule.path.display())))?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or(SandboxError::LandlockUnavailable)
}

fn collect(i: &Inputs) -> Vec<Rule> {
    let mut rules = Vec::new();
    let mut add = |path: PathBuf, access: BitFlags<AccessFs>, follow: bool| {
        rules.push(Rule {
            path,
            access,
            follow,
        })
    };
    let bins: BTreeSet<PathBuf> = super::tools::SEARCH
        .iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect();
    let mut seen = BTreeSet::new();
    for d in SYSTEM_DIRS {
        if let Ok(c) = std::fs::canonicalize(d) {
            if seen.insert(c.clone()) {
                grant_system(&c, &bins, &mut add);
            }
        }
    }
    for (path, access, follow) in etc_rules() {
        add(path, access, follow);
    }
    add("/proc".into(), read(), true);
    for d in DEVICES {
        add(
            d.into(),
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
            true,
        );
    }
    add(i.tool_dir.to_path_buf(), read(), true);
    for exe in i.executables {
        add(exe.clone(), AccessFs::Execute | AccessFs::ReadFile, true);
    }
    add(i.tmp_dir.to_path_buf(), read_write(), true);
    if let Some(root) = i.namespace_root {
        add(root.to_path_buf(), AccessFs::ReadDir.into(), true);
    }
    for m in &i.workspace.mounts {
        if !m.writable {
            add(m.backing_path.clone(), read(), true);
            continue;
        }
        // Read-only parts, as backing paths: dynamic prefixes and nested read-only mounts.
        let mut ro: Vec<PathBuf> = m
            .read_only_prefixes
            .iter()
            .filter_map(|p| p.strip_prefix(&m.harness_path).ok())
            .map(|rel| m.backing_path.join(rel))
            .collect();
        for other in &i.workspace.mounts {
            if !other.writable
                && other.harness_path != m.harness_path
                && other.harness_path.starts_with(&m.harness_path)
            {
                if let Ok(rel) = other.harness_path.strip_prefix(&m.harness_path) {
                    ro.push(m.backing_path.join(rel));
                }
            }
        }
        grant_writable(&m.backing_path, &ro, true, &mut |p, a, f| add(p, a, f));
    }
    rules
}

/// Grants read on a system directory, except for the files of the tool directories `bins`: those
/// can be listed, but only the tools among them are readable (and executable: their own rules),
/// so the dynamic loader cannot map any other program found there (`ld.so /usr/bin/git`).
fn grant_system(
    dir: &Path,
    bins: &BTreeSet<PathBuf>,
    add: &mut dyn FnMut(PathBuf, BitFlags<AccessFs>, bool),
) {
    if bins.contains(dir) {
        add(dir.to_path_buf(), AccessFs::ReadDir.into(), true);
        return;
    }
    if !bins.iter().any(|b| b.starts_with(dir)) {
        add(dir.to_path_buf(), read(), true);
        return;
    }
    add(dir.to_path_buf(), AccessFs::ReadDir.into(), true);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            grant_system(&entry.path(), bins, add);
        } else if !kind.is_symlink() {
            add(entry.path(), AccessFs::ReadFile.into(), false);
        }
    }
}

/// Grants read-write on `dir` except below the read-only paths `ro`, which end up read-only.
/// Directories on the way to a read-only path are read-only themselves (nothing can be created,
/// removed or renamed directly in them); every other entry beside the way is read-write.
/// Symlinks beside the way are skipped: following one would grant its target.
fn grant_writable(
    dir: &Path,
    ro: &[PathBuf],
    follow: bool,
    add: &mut dyn FnMut(PathBuf, BitFlags<AccessFs>, bool),
) {
    let below: Vec<&PathBuf> = ro.iter().filter(|p| p.starts_with(dir)).collect();
    if below.is_empty() {
        add(dir.to_path_buf(), read_write(), follow);
        return;
    }
    if below.iter().any(|p| p.as_path() == dir) {
        add(dir.to_path_buf(), read(), follow);
        return;
    }
    add(dir.to_path_buf(), read(), follow);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            grant_writable(&path, ro, false, add);
        } else if below.iter().any(|p| p.as_path() == path) {
            add(path, read(), false);
        } else {
            add(path, read_write(), false);
        }
    }
}

/// /etc minus secrets. Symlinked entries are followed only for resolv.conf (often pointing
/// into /run); other symlinks reach targets that are granted on their own (or not at all).
fn etc_rules() -> Vec<(PathBuf, BitFlags<AccessFs>, bool)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/etc") else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if ETC_HIDDEN.contains(&name.as_ref()) {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_symlink() {
            if name == "resolv.conf" {
                if let Ok(target) = std::fs::canonicalize(&path) {
                    out.push((target, AccessFs::ReadFile.into(), true));
                }
            }
            continue;
        }
        if name == "ssl" && kind.is_dir() {
            // Certificates yes, private keys no: each entry but `private`, and not /etc/ssl
            // itself (listing it is granted beneath, so `private` could be listed).
            for sub in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                if sub.file_name() != "private" {
                    out.push((sub.path(), read(), true));
                }
            }
            continue;
        }
        out.push((path, read(), false));
    }
    out
}

/// Opens `path` with O_PATH (never following a final symlink unless `follow`); returns the fd
/// and whether it is a directory.
fn open_path(path: &Path, follow: bool) -> Option<(OwnedFd, bool)> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    // SAFETY: valid C string; the returned fd is owned below.
    let raw = unsafe { libc::open(c.as_ptr(), flags) };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a valid fd into a zeroed struct.
    if unsafe { libc::fstat(raw, &mut st) } != 0 {
        return None;
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFLNK {
        return None;
    }
    Some((fd, kind == libc::S_IFDIR))
}
