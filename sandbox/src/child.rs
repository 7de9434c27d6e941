//! Code that runs between fork and exec. Two processes:
//!
//! * the **supervisor** (the direct child of the worker, forked by std): a new session, a child
//!   subreaper; it starts the command, enforces the timeout, and afterwards kills and reaps every
//!   process left in the tree (orphans are re-parented to it, so nothing escapes by changing its
//!   process group or session). It reports the command's status on a pipe and exits.
//! * the **command** (its child): new process group, optionally the sandbox's mount namespace
//!   (joined, not built: see [`namespace_helper`]) plus fresh IPC/UTS namespaces, rlimits,
//!   `no_new_privs`, landlock, capability drop, seccomp; then std execs bash.
//!
//! Both run in a forked copy of a multi-threaded process, so they only make raw syscalls over
//! data prepared in advance ([`ChildPlan`], [`RunFds`]) and never allocate. The command is
//! started like `posix_spawn` does it (see [`spawn_command`]): it shares the supervisor's memory
//! until it execs bash, so no second copy of the worker's page tables is made and torn down.

use super::ns_plan::{Namespace, NamespacePlan};
use super::seccomp::BpfProgram;
use super::Limits;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Status record kinds the supervisor writes after the command's pid.
pub const KIND_EXITED: u8 = 0;
pub const KIND_TIMED_OUT: u8 = 1;
pub const KIND_CANCELLED: u8 = 2;
/// Exit code reported for a timeout (as coreutils `timeout`).
pub const TIMEOUT_EXIT: i32 = 124;

/// setrlimit's resource type: glibc has its own name for it, musl takes a plain int.
#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

/// Linux's statvfs flag for relatime mounts (`ST_RELATIME`, 4096), which the libc crate only
/// exports for glibc.
const ST_RELATIME: libc::c_ulong = 4096;

/// Everything the child side needs, prepared once per sandbox.
pub struct ChildPlan {
    pub bash: PathBuf,
    bash_c: CString,
    page_size: usize,
    rlimits: [(Resource, u64); 5],
    ruleset: OwnedFd,
    filter: BpfProgram,
    ns: Option<Namespace>,
    drop_caps: bool,
    pub timeout: Duration,
    /// Per-command pids cgroups (uid 0 only: see [`super::cgroup`]).
    pub pids: Option<super::cgroup::Pids>,
}

impl ChildPlan {
    pub fn new(
        bash: &Path,
        limits: &Limits,
        ruleset: OwnedFd,
        filter: BpfProgram,
        ns: Option<Namespace>,
        is_root: bool,
        pids: Option<super::cgroup::Pids>,
    ) -> Result<Self, super::SandboxError> {
        // SAFETY: plain getter.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        Ok(ChildPlan {
            bash: bash.to_path_buf(),
            bash_c: cwd_cstring(bash).ok_or(super::SandboxError::NoBash)?,
            page_size,
            rlimits: [
                (libc::RLIMIT_NPROC, limits.max_processes),
                (libc::RLIMIT_FSIZE, limits.max_file_size),
                (libc::RLIMIT_AS, limits.max_memory),
                (libc::RLIMIT_NOFILE, limits.max_open_files),
                (libc::RLIMIT_CORE, 0),
            ],
            ruleset,
            filter,
            ns,
            drop_caps: is_root,
            timeout: limits.timeout,
            pids,
        })
    }
}

/// Per-run inputs of the pre_exec closure.
pub struct RunFds {
    pub cwd: CString,
    /// Where the command starts when `cwd` cannot be entered (HOME; empty: nowhere else).
    pub home: CString,
    /// Write end of the state pipe; becomes fd 3 in the command.
    pub state_w: RawFd,
    /// Write end of the supervisor's status pipe.
    pub status_w: RawFd,
    pub exec: ExecArgs,
    /// The command's pids cgroup (-1 without one): `cgroup.procs` opened for writing (the
    /// command joins) and for reading (the supervisor kills what it lists), and `cgroup.kill`.
    pub cgroup_w: RawFd,
    pub cgroup_r: RawFd,
    pub cgroup_kill: RawFd,
}

/// bash's argv (`bash -c SCRIPT`) and environment as C arrays, built by the parent.
pub struct ExecArgs {
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_strings`, owned alongside and never changed.
unsafe impl Send for ExecArgs {}
unsafe impl Sync for ExecArgs {}

impl ExecArgs {
    /// `None` when the script or a variable holds a NUL byte.
    pub fn new(script: &str, env: &BTreeMap<String, String>) -> Option<Self> {
        let mut strings = vec![c"bash".to_owned(), c"-c".to_owned()];
        strings.push(CString::new(script).ok()?);
        for (k, v) in env {
            strings.push(CString::new(format!("{k}={v}")).ok()?);
        }
        let ptrs = |s: &[CString]| {
            let mut p: Vec<_> = s.iter().map(|c| c.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        Some(ExecArgs {
            argv: ptrs(&strings[..3]),
            envp: ptrs(&strings[3..]),
            _strings: strings,
        })
    }
}

/// The pre_exec body: becomes the supervisor and never returns (std never execs).
///
/// # Safety
/// Must only be called in a freshly forked child (std's `pre_exec`).
pub unsafe fn pre_exec(plan: &ChildPlan, run: &RunFds) -> std::io::Result<()> {
    libc::setsid();
    libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    let parent = libc::getppid();
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    for s in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        libc::sigaddset(&mut set, s);
    }
    // While the command shares this memory no handler of the worker's may run in it: block
    // everything and put every handler back to the default (the supervisor needs none).
    let mut all: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    default_handlers();
    if let Some(user) = plan.ns.as_ref().and_then(|ns| ns.user.as_ref()) {
        // The kernel refuses setns into a user namespace to a process whose memory is shared,
        // so the supervisor joins the sandbox's (as the same uid) and the command inherits it.
        if libc::setns(user.as_raw_fd(), libc::CLONE_NEWUSER) != 0 {
            fail("setns (user namespace)", errno());
        }
    }
    let start = now();
    let pid = spawn_command(plan, run);
    if pid < 0 {
        fail("clone", errno());
    }
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    supervise(plan, run, pid, parent, &set, start)
}

/// Starts the command as `posix_spawn` does: `clone(CLONE_VM | CLONE_VFORK)` on a stack of its
/// own. The supervisor sleeps until the command has exec'd bash (or died in its setup); fork
/// would copy the worker's page tables, and exec would tear the copy down again.
unsafe fn spawn_command(plan: &ChildPlan, run: &RunFds) -> libc::pid_t {
    const STACK: usize = 256 * 1024;
    let base = libc::mmap(
        std::ptr::null_mut(),
        STACK,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
        -1,
        0,
    );
    if base == libc::MAP_FAILED {
        return -1;
    }
    // A guard page: an overflow faults instead of writing over the supervisor's memory.
    libc::mprotect(base, plan.page_size, libc::PROT_NONE);
    let args: (&ChildPlan, &RunFds) = (plan, run);
    libc::clone(
        command_main,
        base.cast::<u8>().add(STACK).cast(),
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        &args as *const (&ChildPlan, &RunFds) as *mut libc::c_void,
    )
}

extern "C" fn command_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the pair on the stack of the supervisor, which waits (CLONE_VFORK); the
    // command makes only raw syscalls, then execs or exits.
    unsafe {
        let (plan, run) = *(arg as *const (&ChildPlan, &RunFds));
        command_setup(plan, run);
        libc::execve(
            plan.bash_c.as_ptr(),
            run.exec.argv.as_ptr(),
            run.exec.envp.as_ptr(),
        );
        fail_path("exec", &plan.bash_c, errno())
    }
}

/// Every caught signal back to its default action, and SIGPIPE too (Rust ignores it; bash and
/// its commands must not). Other ignored signals stay ignored, as across a plain exec.
unsafe fn default_handlers() {
    let mut dfl: libc::sigaction = std::mem::zeroed();
    dfl.sa_sigaction = libc::SIG_DFL;
    for sig in 1..=libc::SIGRTMAX() {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            continue;
        }
        if old.sa_sigaction != libc::SIG_DFL
            && (old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
        {
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    }
}

/// The supervisor: wait, enforce the deadline, clean up, report, exit.
unsafe fn supervise(
    plan: &ChildPlan,
    run: &RunFds,
    cmd: libc::pid_t,
    parent: libc::pid_t,
    set: &libc::sigset_t,
    start: libc::timespec,
) -> ! {
    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    // Keep only the status pipe and the cgroup's lists: stdout/stderr/state must reach EOF when
    // the command's tree is gone, and std's exec-error pipe must close so the parent's spawn()
    // returns.
    close_all_but([run.status_w, run.cgroup_r, run.cgroup_kill]);
    write_all(run.status_w, &cmd.to_le_bytes());

    let deadline = add(start, plan.timeout);
    let mut cmd_status: Option<libc::c_int> = None;
    let mut kind = KIND_EXITED;
    loop {
        reap(cmd, &mut cmd_status);
        if cmd_status.is_some() {
            break;
        }
        let left = until(deadline);
        if left.is_zero() {
            kind = KIND_TIMED_OUT;
            break;
        }
        let wait = left.min(Duration::from_millis(250));
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as _,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        let sig = libc::sigtimedwait(set, std::ptr::null_mut(), &ts);
        if sig == libc::SIGTERM || sig == libc::SIGINT || sig == libc::SIGHUP {
            kind = KIND_CANCELLED;
            break;
        }
        if libc::getppid() != parent {
            kind = KIND_CANCELLED;
            break;
        }
    }
    kill_tree(run, cmd, &mut cmd_status);
    let code = match (kind, cmd_status) {
        (KIND_TIMED_OUT, _) => TIMEOUT_EXIT,
        (_, Some(st)) if libc::WIFEXITED(st) => libc::WEXITSTATUS(st),
        (_, Some(st)) if libc::WIFSIGNALED(st) => 128 + libc::WTERMSIG(st),
        _ => 128 + libc::SIGKILL,
    };
    let mut rec = [0u8; 5];
    rec[0] = kind;
    rec[1..].copy_from_slice(&code.to_le_bytes());
    write_all(run.status_w, &rec);
    // Close before exiting: tearing down this forked copy of the worker's address space takes
    // a while, and the parent need not wait for it.
    libc::close(run.status_w);
    libc::_exit(0)
}

/// Reaps exited children without blocking (at most a bounded number per call, so that a tree
/// that keeps making short-lived children cannot keep the supervisor from its deadline); records
/// the command's status.
unsafe fn reap(cmd: libc::pid_t, cmd_status: &mut Option<libc::c_int>) -> bool {
    let mut any = false;
    for _ in 0..4096 {
        let mut st = 0;
        let r = libc::waitpid(-1, &mut st, libc::WNOHANG);
        if r <= 0 {
            return any;
        }
        any = true;
        if r == cmd {
            *cmd_status = Some(st);
        }
    }
    any
}

/// Kills the command's process group, then every remaining process of the tree until none is
/// left: every member of the command's pids cgroup (when it has one), and every child of this
/// subreaper (orphans re-parent to it, so its children list finds them whatever process group or
/// session they moved to). Only then does the supervisor report.
unsafe fn kill_tree(run: &RunFds, cmd: libc::pid_t, cmd_status: &mut Option<libc::c_int>) {
    libc::kill(-cmd, libc::SIGKILL);
    if cmd_status.is_none() {
        libc::kill(cmd, libc::SIGKILL);
    }
    if run.cgroup_kill >= 0 {
        write_all(run.cgroup_kill, b"1");
    }
    for _ in 0..100_000 {
        let mut found = false;
        let mut readable = true;
        if run.cgroup_r >= 0 {
            match kill_listed(run.cgroup_r) {
                Some(n) => found |= n > 0,
                None => readable = false,
            }
        }
        let children = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if children >= 0 {
            found |= kill_listed(children).is_some_and(|n| n > 0);
            libc::close(children);
        } else {
            readable = false;
        }
        if !found && readable {
            reap(cmd, cmd_status);
            return;
        }
        // Block for one child (found ones are dying), then take whatever else exited.
        let mut st = 0;
        let r = libc::waitpid(-1, &mut st, 0);
        if r == cmd {
            *cmd_status = Some(st);
        }
        if r < 0 {
            return; // ECHILD: no descendant is left (cgroup members are all descendants)
        }
        reap(cmd, cmd_status);
    }
}

/// SIGKILLs every pid listed in the file open at `fd` (whitespace-separated decimal, read from
/// the start, any length); the number of pids, or `None` when it cannot be read.
unsafe fn kill_listed(fd: RawFd) -> Option<usize> {
    if libc::lseek(fd, 0, libc::SEEK_SET) < 0 {
        return None;
    }
    let mut buf = [0u8; 4096];
    let mut pid: libc::pid_t = 0;
    let mut count = 0;
    loop {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return None;
        }
        let end = n == 0;
        let chunk: &[u8] = if end { b" " } else { &buf[..n as usize] };
        for &b in chunk {
            if b.is_ascii_digit() {
                pid = pid
                    .saturating_mul(10)
                    .saturating_add((b - b'0') as libc::pid_t);
            } else if pid > 0 {
                libc::kill(pid, libc::SIGKILL);
                count += 1;
                pid = 0;
            }
        }
        if end {
            return Some(count);
        }
    }
}

/// The command side: confinement in order; any failure ends the process with 126 and one line.
unsafe fn command_setup(plan: &ChildPlan, run: &RunFds) {
    // Handlers are already the defaults (pre_exec).
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    libc::setpgid(0, 0);
    // Into the command's pids cgroup first: everything it starts is counted from here on.
    if run.cgroup_w >= 0 && libc::write(run.cgroup_w, b"0".as_ptr().cast(), 1) != 1 {
        fail("joining the command's pids cgroup", errno());
    }

    if let Some(ns) = &plan.ns {
        join_namespace(ns);
    }
    if libc::chdir(run.cwd.as_ptr()) != 0 {
        // The directory an earlier command left the shell in may be gone (removed, or a path
        // too long to enter): start in HOME and say so, rather than fail every later command.
        let err = errno();
        if run.home.as_bytes().is_empty() || libc::chdir(run.home.as_ptr()) != 0 {
            fail_path("working directory", &run.cwd, err);
        }
        note_path(
            b"working directory ",
            &run.cwd,
            b" cannot be entered: ",
            err,
            &run.home,
        );
    }
    if libc::dup2(run.state_w, 3) != 3 {
        fail("dup2 of the state descriptor", errno());
    }
    // Everything above fd 3 inherited from the worker closes at exec.
    if libc::syscall(
        libc::SYS_close_range,
        4u32,
        u32::MAX,
        libc::CLOSE_RANGE_CLOEXEC,
    ) != 0
    {
        for fd in 4..4096 {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    for (resource, value) in plan.rlimits {
        let lim = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        if libc::setrlimit(resource, &lim) != 0 {
            fail("setrlimit", errno());
        }
    }
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        fail("prctl(PR_SET_NO_NEW_PRIVS)", errno());
    }
    if libc::syscall(
        libc::SYS_landlock_restrict_self,
        plan.ruleset.as_raw_fd(),
        0u32,
    ) != 0
    {
        fail("landlock_restrict_self", errno());
    }
    if plan.drop_caps {
        drop_capabilities();
    }
    let prog = libc::sock_fprog {
        len: plan.filter.len() as u16,
        filter: plan.filter.as_ptr() as *mut libc::sock_filter,
    };
    if libc::prctl(
        libc::PR_SET_SECCOMP,
        libc::SECCOMP_MODE_FILTER,
        &prog as *const libc::sock_fprog,
    ) != 0
    {
        fail("seccomp filter", errno());
    }
}

/// uid 0 keeps its uid but loses every capability, now and across exec.
unsafe fn drop_capabilities() {
    // SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, each locked.
    const SECBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    if libc::prctl(libc::PR_SET_SECUREBITS, SECBITS, 0, 0, 0) != 0 {
        fail("prctl(PR_SET_SECUREBITS)", errno());
    }
    for cap in 0..64 {
        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno() != libc::EINVAL {
            fail("prctl(PR_CAPBSET_DROP)", errno());
        }
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
    ];
    if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
        fail("capset", errno());
    }
}

/// The body of the process that builds a sandbox's mount namespace once (forked by
/// [`super::namespace::build`]): it makes the namespace, writes `ready` and a newline on `report`
/// (a failure writes its `kube-harness:` line there instead), then blocks on `hold` until the
/// parent has opened its namespace files and root, and kills it (or dies).
///
/// # Safety
/// Must only be called in a freshly forked child.
pub unsafe fn namespace_helper(ns: &NamespacePlan, report: RawFd, hold: RawFd) -> ! {
    // Keep only these two (both at fd 10 or above), so the parent's death closes `hold`.
    if libc::dup2(hold, 0) != 0 || libc::dup2(report, 2) != 2 {
        libc::_exit(126);
    }
    libc::close(1);
    close_range(3, libc::c_uint::MAX);
    enter_namespace(ns);
    write_all(2, b"ready\n");
    let mut byte = 0u8;
    while libc::read(0, (&mut byte as *mut u8).cast(), 1) < 0 && errno() == libc::EINTR {}
    libc::_exit(0)
}

/// Enters the sandbox's mount namespace (and, without root, the user namespace that owns it),
/// then fresh IPC/UTS (and, where planned, network) namespaces of the command's own.
unsafe fn join_namespace(ns: &Namespace) {
    // The user namespace (without root) was joined by the supervisor.
    if libc::setns(ns.mnt.as_raw_fd(), libc::CLONE_NEWNS) != 0 {
        fail("setns (mount namespace)", errno());
    }
    // setns put root and cwd at the namespace's root mount; the sandbox root is the helper's
    // root (the same after a pivot, below it after the chroot fallback).
    if libc::fchdir(ns.root.as_raw_fd()) != 0 || libc::chroot(c".".as_ptr()) != 0 {
        fail("entering the sandbox root", errno());
    }
    if libc::unshare(ns.unshare_flags) != 0 {
        fail("unshare (IPC/UTS namespaces)", errno());
    }
}

/// Private mount namespace with the prepared root, bind mounts, pivot (or chroot).
unsafe fn enter_namespace(ns: &NamespacePlan) {
    if libc::unshare(ns.unshare_flags) != 0 {
        fail("unshare (mount namespace)", errno());
    }
    if let Some((uid_map, gid_map)) = &ns.id_maps {
        write_file(c"/proc/self/setgroups", b"deny");
        write_file(c"/proc/self/uid_map", uid_map.as_bytes());
        write_file(c"/proc/self/gid_map", gid_map.as_bytes());
    }
    let null = std::ptr::null::<libc::c_char>();
    if libc::mount(
        null,
        c"/".as_ptr(),
        null,
        libc::MS_REC | libc::MS_PRIVATE,
        std::ptr::null(),
    ) != 0
    {
        fail("making / private", errno());
    }
    if libc::mount(
        ns.root.as_ptr(),
        ns.root.as_ptr(),
        null,
        libc::MS_BIND,
        std::ptr::null(),
    ) != 0
    {
        fail_path("bind mount of the sandbox root", &ns.root, errno());
    }
    for b in &ns.binds {
        let rec = if b.recursive { libc::MS_REC } else { 0 };
        if libc::mount(
            b.src.as_ptr(),
            b.dst.as_ptr(),
            null,
            libc::MS_BIND | rec,
            std::ptr::null(),
        ) != 0
        {
            fail_path("bind mount", &b.src, errno());
        }
        if b.flags != 0 {
            let flags = libc::MS_BIND | libc::MS_REMOUNT | locked_flags(&b.dst) | b.flags;
            if libc::mount(null, b.dst.as_ptr(), null, flags, std::ptr::null()) != 0 {
                fail_path("remount", &b.dst, errno());
            }
        }
    }
    let flags = libc::MS_BIND
        | libc::MS_REMOUNT
        | libc::MS_RDONLY
        | libc::MS_NOSUID
        | libc::MS_NODEV
        | locked_flags(&ns.root);
    if libc::mount(null, ns.root.as_ptr(), null, flags, std::ptr::null()) != 0 {
        fail_path("read-only remount", &ns.root, errno());
    }
    if libc::chdir(ns.root.as_ptr()) != 0 {
        fail_path("chdir", &ns.root, errno());
    }
    let dot = c".".as_ptr();
    if libc::syscall(libc::SYS_pivot_root, dot, dot) == 0 {
        if libc::umount2(dot, libc::MNT_DETACH) != 0 {
            fail("detaching the old root", errno());
        }
    } else if libc::chroot(dot) != 0 {
        // pivot_root refuses when the current root is not a mount point (e.g. inside a chroot).
        fail("pivot_root and chroot", errno());
    }
    if libc::chdir(c"/".as_ptr()) != 0 {
        fail("chdir /", errno());
    }
}

/// Mount flags a remount must keep (the kernel refuses to clear locked ones in a user namespace).
unsafe fn locked_flags(path: &CStr) -> libc::c_ulong {
    let mut st: libc::statvfs = std::mem::zeroed();
    if libc::statvfs(path.as_ptr(), &mut st) != 0 {
        return 0;
    }
    let f = st.f_flag as libc::c_ulong;
    let mut out = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st_flag != 0 {
            out |= ms_flag;
        }
    }
    out
}

fn errno() -> i32 {
    // SAFETY: thread-local errno of the calling thread.
    unsafe { *libc::__errno_location() }
}

/// Writes `kube-harness: sandbox setup failed: STEP: ERROR` to stderr and exits 126.
unsafe fn fail(step: &str, err: i32) -> ! {
    fail_with(step.as_bytes(), &[], err)
}

unsafe fn fail_path(step: &str, path: &CStr, err: i32) -> ! {
    fail_with(step.as_bytes(), path.to_bytes(), err)
}

/// Writes `kube-harness: working directory PATH cannot be entered: ERROR; starting in HOME`.
unsafe fn note_path(what: &[u8], path: &CStr, why: &[u8], err: i32, home: &CStr) {
    let path = path.to_bytes();
    stderr_line(&[
        b"kube-harness: ",
        what,
        &path[..path.len().min(256)],
        why,
        errno_text(err),
        b"; starting in ",
        home.to_bytes(),
    ]);
}

unsafe fn fail_with(step: &[u8], path: &[u8], err: i32) -> ! {
    let mut digits = [0u8; 12];
    let errno = format_int(err, &mut digits);
    let sep: &[u8] = if path.is_empty() { b"" } else { b" " };
    stderr_line(&[
        b"kube-harness: sandbox setup failed: ",
        step,
        sep,
        path,
        b": ",
        errno_text(err),
        b" (errno ",
        errno,
        b")",
    ]);
    libc::_exit(126)
}

/// Writes the parts as one line (at most 1 KiB) to stderr, without allocating.
unsafe fn stderr_line(parts: &[&[u8]]) {
    let mut buf = [0u8; 1024];
    let mut len = 0;
    for part in parts {
        let n = part.len().min(buf.len() - 1 - len);
        buf[len..len + n].copy_from_slice(&part[..n]);
        len += n;
    }
    buf[len] = b'\n';
    write_all(2, &buf[..=len]);
}

fn errno_text(err: i32) -> &'static [u8] {
    match err {
        libc::EPERM => b"operation not permitted",
        libc::ENOENT => b"no such file or directory",
        libc::EACCES => b"permission denied",
        libc::EINVAL => b"invalid argument",
        libc::ENOSYS => b"not supported by this kernel",
        libc::ENOMEM => b"out of memory",
        libc::ENOTDIR => b"not a directory",
        libc::EAGAIN => b"resource temporarily unavailable (process limit?)",
        libc::EBUSY => b"busy",
        libc::EROFS => b"read-only file system",
        libc::EMFILE => b"too many open files",
        libc::EBADFD => b"file descriptor in bad state",
        _ => b"error",
    }
}

fn format_int(v: i32, out: &mut [u8; 12]) -> &[u8] {
    let mut n = v.unsigned_abs();
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        i -= 1;
        out[i] = b'-';
    }
    &out[i..]
}

unsafe fn write_all(fd: RawFd, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

unsafe fn write_file(path: &CStr, bytes: &[u8]) {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        fail_path("open", path, errno());
    }
    if libc::write(fd, bytes.as_ptr().cast(), bytes.len()) != bytes.len() as isize {
        fail_path("write", path, errno());
    }
    libc::close(fd);
}

unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) {
    if first > last {
        return;
    }
    if libc::syscall(libc::SYS_close_range, first, last, 0u32) != 0 {
        for fd in first..last.min(4096) {
            libc::close(fd as libc::c_int);
        }
    }
}

/// Closes every descriptor but the given ones (negative entries are ignored).
unsafe fn close_all_but<const N: usize>(mut keep: [RawFd; N]) {
    keep.sort_unstable();
    let mut first: libc::c_uint = 0;
    for fd in keep {
        if fd < 0 || (fd as libc::c_uint) < first {
            continue;
        }
        let fd = fd as libc::c_uint;
        if fd > first {
            close_range(first, fd - 1);
        }
        first = fd + 1;
    }
    close_range(first, libc::c_uint::MAX);
}

unsafe fn now() -> libc::timespec {
    let mut ts: libc::timespec = std::mem::zeroed();
    libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    ts
}

fn add(t: libc::timespec, d: Duration) -> libc::timespec {
    let mut sec = t.tv_sec.saturating_add(d.as_secs() as _);
    let mut nsec = t.tv_nsec + d.subsec_nanos() as libc::c_long;
    if nsec >= 1_000_000_000 {
        sec = sec.saturating_add(1);
        nsec -= 1_000_000_000;
    }
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

/// Time left until `deadline` (zero once passed).
unsafe fn until(deadline: libc::timespec) -> Duration {
    let n = now();
    let left_ns = (deadline.tv_sec - n.tv_sec) as i128 * 1_000_000_000
        + (deadline.tv_nsec - n.tv_nsec) as i128;
    if left_ns <= 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(left_ns.min(u64::MAX as i128) as u64)
    }
}

/// Turns a harness path into the C string the child chdirs to.
pub fn cwd_cstring(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}
