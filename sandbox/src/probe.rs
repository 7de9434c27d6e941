//! What this host's kernel offers the sandbox, found by asking it (never by version guessing).

use std::path::PathBuf;

/// Host support for each confinement layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Landlock ABI version the kernel reports, `None` when landlock is off or absent.
    pub landlock_abi: Option<u32>,
    /// seccomp filter mode is available.
    pub seccomp: bool,
    /// A private mount namespace could be created (as root directly, otherwise inside a new user
    /// namespace), so `Presentation::Namespace` can work.
    pub mount_namespace: bool,
    /// Why `mount_namespace` is false (empty when it is true).
    pub namespace_detail: String,
    /// The effective user id is 0.
    pub is_root: bool,
    /// `bwrap` on PATH (informational: the sandbox does its own namespace setup because landlock,
    /// which forbids mounting, has to be applied after the mounts and before bash).
    pub bubblewrap: Option<PathBuf>,
}

/// Probes the running kernel. Cheap (a few syscalls and one short-lived fork).
pub fn probe() -> Capabilities {
    let is_root = unsafe { libc::geteuid() } == 0;
    let (mount_namespace, namespace_detail) = match probe_namespace(is_root) {
        Ok(()) => (true, String::new()),
        Err(detail) => (false, detail),
    };
    Capabilities {
        landlock_abi: landlock_abi(),
        seccomp: seccomp_available(),
        mount_namespace,
        namespace_detail,
        is_root,
        bubblewrap: find_on_path("bwrap"),
    }
}

fn landlock_abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query takes no pointer and returns an integer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (v > 0).then_some(v as u32)
}

fn seccomp_available() -> bool {
    // PR_GET_SECCOMP fails with EINVAL when the kernel has no seccomp at all; the filter mode
    // check asks for an invalid (null) program, which returns EFAULT when filters are supported.
    // SAFETY: prctl with integer arguments; seccomp with a null pointer only reads nothing.
    unsafe {
        if libc::prctl(libc::PR_GET_SECCOMP) < 0 {
            return false;
        }
        let r = libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            std::ptr::null::<libc::c_void>(),
        );
        r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT)
    }
}

/// Forks a child that tries exactly what the namespace setup will do first.
fn probe_namespace(is_root: bool) -> Result<(), String> {
    let flags = if is_root {
        libc::CLONE_NEWNS
    } else {
        libc::CLONE_NEWNS | libc::CLONE_NEWUSER
    };
    // SAFETY: the child only makes raw syscalls and leaves with _exit.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            if libc::unshare(flags) != 0 {
                libc::_exit(*libc::__errno_location() & 0x7f);
            }
            let root = c"/".as_ptr();
            let r = libc::mount(
                std::ptr::null(),
                root,
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            );
            libc::_exit(if r == 0 { 0 } else { 100 });
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                return Err("waitpid failed".into());
            }
        }
        match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
            Some(0) => Ok(()),
            Some(100) => Err("mount(MS_PRIVATE) on / was refused".into()),
            Some(errno) => Err(format!(
                "unshare({}) failed: {}",
                if is_root {
                    "CLONE_NEWNS"
                } else {
                    "CLONE_NEWNS|CLONE_NEWUSER"
                },
                std::io::Error::from_raw_os_error(errno)
            )),
            None => Err("the probe process was killed".into()),
        }
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
