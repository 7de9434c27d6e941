//! Presentation::Namespace: a root directory prepared once on disk (mount points, device-file
//! placeholders, symlinks), the list of bind mounts, and the mount namespace built from them once
//! per sandbox by a short-lived helper process ([`build`]). Each command joins that namespace
//! with `setns` instead of making its own: a fresh namespace cost about ten bind mounts, a pivot
//! and a teardown per command (≈ 0.8 ms). The namespace's content is the same for every command
//! and none can change it (mount syscalls are refused by seccomp, capabilities are gone); IPC and
//! UTS (and, where planned, network) namespaces stay per command.

use super::fd::pipe_high;
use super::ns_plan::{Bind, Namespace, NamespacePlan};
use super::SandboxError;
use kube_harness_workspace::WorkspaceSpec;
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where the tool directory appears inside the namespace.
pub const TOOLS_IN_NS: &str = "/.kube-harness/bin";

/// System directories bound read-only (or recreated as symlinks when they are symlinks).
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// System directories: read-only, and no code may be mapped from them except in the code
/// directories rebound below ([`CODE`]), so that the dynamic loader cannot be used to run a
/// binary that is not a tool (`ld.so /usr/lib/git-core/git`).
const SYSTEM_FLAGS: libc::c_ulong =
    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
/// Code directories (tool directories, shared libraries): read-only, executable.
const CODE: libc::c_ulong = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
/// Workspace data, /proc, /tmp: nothing there executes or is set-uid or a device.
const DATA: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;

/// Prepares `runtime/root` and the bind list.
pub fn prepare(
    runtime: &Path,
    tmp_dir: &Path,
    workspace: &WorkspaceSpec,
    code_dirs: &[PathBuf],
    empty_network: bool,
    is_root: bool,
) -> Result<NamespacePlan, SandboxError> {
    let root = runtime.join("root");
    mkdir_p(&root)?;
    let mut binds = Vec::new();
    let mut bind = |src: &Path, dst_rel: &Path, flags: libc::c_ulong, recursive: bool| {
        binds.push(Bind {
            src: cstr(src),
            dst: cstr(&root.join(dst_rel)),
            flags,
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
            bind(host, rel, SYSTEM_FLAGS, true);
        }
    }
    // Code may be mapped only from the tool and library directories.
    for dir in code_dirs {
        let under_system = SYSTEM.iter().any(|s| dir.starts_with(s));
        if under_system && dir.is_dir() {
            let rel = dir.strip_prefix("/").unwrap_or(dir);
            bind(dir, rel, CODE, false);
        }
    }
    // Secrets of /etc (docs/security-model.md): landlock already refuses to read them; in the
    // namespace they are not even there to list. An empty directory or file covers each.
    let empty_dir = runtime.join("empty-dir");
    let empty_file = runtime.join("empty-file");
    mkdir_p(&empty_dir)?;
    touch(&empty_file)?;
    for name in super::landlock_rules::ETC_HIDDEN {
        let host = Path::new("/etc").join(name);
        let Ok(meta) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        let rel = Path::new("etc").join(name);
        if meta.is_dir() {
            bind(&empty_dir, &rel, SYSTEM_FLAGS, false);
        } else if meta.is_file() {
            bind(&empty_file, &rel, SYSTEM_FLAGS, false);
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
            bind(&target, &rel, SYSTEM_FLAGS, false);
        }
    }

    mkdir_p(&root.join("proc"))?;
    // As root, a procfs of the sandbox's own with `hidepid=ptraceable`: a process is listed only
    // where the command could ptrace it (landlock's domain rule: its own tree), so the host's
    // processes, their `fd/` and `mountinfo` are not even there. (`invisible` would not do: its
    // `gid=` exemption defaults to group 0, which a root command is in.) Without root a new procfs
    // needs a PID namespace of its own, so the host's is bound (docs/security-model.md).
    let fresh_proc = is_root.then(|| cstr(&root.join("proc")));
    if fresh_proc.is_none() {
        bind(Path::new("/proc"), Path::new("proc"), DATA, true);
    }

    mkdir_p(&root.join("dev"))?;
    for d in DEVICES {
        let host = Path::new("/dev").join(d);
        if host.exists() {
            let rel = Path::new("dev").join(d);
            touch(&root.join(&rel))?;
            bind(&host, &rel, 0, false);
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
    bind(tmp_dir, Path::new("tmp"), DATA, false);
    // The tool directory is created under root/ by the caller, no bind needed.

    // Workspace mounts, parents before nested ones; then read-only prefixes that exist.
    let mut mounts: Vec<_> = workspace.mounts.iter().collect();
    mounts.sort_by_key(|m| m.harness_path.components().count());
    for m in &mounts {
        let rel = m.harness_path.strip_prefix("/").unwrap_or(&m.harness_path);
        mkdir_p(&root.join(rel))?;
        let ro = if m.writable { 0 } else { libc::MS_RDONLY };
        bind(&m.backing_path, rel, DATA | ro, false);
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
                bind(&backing, rel, DATA | libc::MS_RDONLY, false);
            }
        }
    }

    let mut unshare_flags = libc::CLONE_NEWNS;
    let mut command_flags = libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if empty_network {
        command_flags |= libc::CLONE_NEWNET;
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
        command_flags,
        id_maps,
        binds,
        fresh_proc,
    })
}

/// Forks a helper that builds the namespace ([`super::child::namespace_helper`]), opens its
/// namespace files and root, then kills and reaps it.
pub fn build(plan: &NamespacePlan) -> Result<Namespace, SandboxError> {
    let fail = |detail: String| SandboxError::NamespaceUnavailable { detail };
    let (report_r, report_w) = pipe_high().map_err(|e| fail(format!("pipe: {e}")))?;
    let (hold_r, hold_w) = pipe_high().map_err(|e| fail(format!("pipe: {e}")))?;
    // SAFETY: the child only makes raw syscalls over `plan`, prepared before the fork, and never
    // returns (the worker may be multi-threaded).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        use std::os::fd::AsRawFd;
        unsafe { super::child::namespace_helper(plan, report_w.as_raw_fd(), hold_r.as_raw_fd()) }
    }
    drop((report_w, hold_r));
    if pid < 0 {
        return Err(fail(format!("fork: {}", std::io::Error::last_os_error())));
    }
    let mut report = Vec::new();
    let mut reader = File::from(report_r);
    let mut byte = [0u8; 1];
    while report.len() < 4096 && matches!(reader.read(&mut byte), Ok(1)) {
        if byte[0] == b'\n' {
            break;
        }
        report.push(byte[0]);
    }
    let opened = if report == b"ready" {
        let open = |what: &str, flags: libc::c_int| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(format!("/proc/{pid}/{what}"))
                .map(OwnedFd::from)
                .map_err(|e| fail(format!("opening /proc/{pid}/{what}: {e}")))
        };
        let user = plan.id_maps.is_some();
        (|| {
            Ok(Namespace {
                mnt: open("ns/mnt", 0)?,
                user: if user {
                    Some(open("ns/user", 0)?)
                } else {
                    None
                },
                root: open("root", libc::O_PATH | libc::O_DIRECTORY)?,
                unshare_flags: plan.command_flags,
            })
        })()
    } else {
        let text = String::from_utf8_lossy(&report);
        let text = text.trim_start_matches("kube-harness: ");
        Err(fail(if text.is_empty() {
            "the namespace helper ended without a report".into()
        } else {
            text.to_string()
        }))
    };
    // SAFETY: our own unreaped child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    drop(hold_w);
    opened
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

/// The sandbox's own procfs (as root: [`prepare`]'s `fresh_proc`), opened from inside the built
/// namespace through its root, for the landlock rule that makes it readable: the rule on the
/// host's /proc does not cover another procfs instance.
pub fn open_proc(ns: &Namespace) -> Result<OwnedFd, SandboxError> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: openat on a descriptor we own, with a constant relative path.
    let fd = unsafe {
        libc::openat(
            ns.root.as_raw_fd(),
            c"proc".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(SandboxError::io(
            "opening the sandbox's /proc",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
