//! Code that runs outside the worker: in a sandbox's forker and in the processes it forks.
//!
//! * the **forker** ([`super::forker`] starts it, one per sandbox, as a fresh exec of the host
//!   program): [`confine`]d once — the sandbox's mount namespace (joined, not built: see
//!   [`namespace_helper`]) with IPC/UTS namespaces of the sandbox's own, `no_new_privs`,
//!   landlock, capability drop, seccomp — then it forks one supervisor per command.
//! * the **supervisor** ([`supervisor`], the forker's child): a landlock domain of its own (made
//!   while it is still a spare), a process group of its own, a child subreaper; it starts the command,
//!   enforces the timeout, and afterwards kills and reaps every process left in the tree. The
//!   tree is found by what no process can shed: its landlock domain, which every descendant
//!   inherits and none can leave, and which the signal scope makes the exact reach of
//!   `kill(-1, SIGKILL)` ([`kill_tree`]). It reports the command's status on a pipe and exits.
//! * the **command** (its child): new process group, its pids and cpu cgroups, working
//!   directory, rlimits, the normal scheduling policy at a lower priority, a landlock domain of
//!   its own nested in the supervisor's; then it execs bash.
//!
//! The supervisor and the command only make raw syscalls over data prepared in advance
//! ([`ForkerPlan`], [`RunFds`]) and never allocate. The command is started like `posix_spawn`
//! does it (see [`spawn_command`]): it shares the supervisor's memory until it execs bash.

use super::ns_plan::NamespacePlan;
use std::ffi::{CStr, CString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// What the supervisor writes on the status pipe before it starts the command, followed by its
/// own pid (then the command's pid, then the record). Nothing at all means nothing was started.
pub const STARTING: u8 = b'S';
/// The status pipe's head: STARTING, the supervisor's pid, the command's pid.
pub const HEAD: usize = 9;
/// Status record kinds the supervisor writes after the command's pid.
pub const KIND_EXITED: u8 = 0;
pub const KIND_TIMED_OUT: u8 = 1;
pub const KIND_CANCELLED: u8 = 2;
/// The forker ended while the command ran (the supervisor lost its parent); the tree was killed.
pub const KIND_ORPHANED: u8 = 3;
/// Exit code reported for a timeout (as coreutils `timeout`).
pub const TIMEOUT_EXIT: i32 = 124;

/// What the kernel sends a supervisor when its forker ends (`PR_SET_PDEATHSIG`; the forker has
/// one thread, so "the parent thread ended" is "the forker ended").
const ORPHAN_SIGNAL: libc::c_int = libc::SIGUSR1;

/// setrlimit's resource type: glibc has its own name for it, musl takes a plain int.
#[cfg(target_env = "gnu")]
pub type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
pub type Resource = libc::c_int;

/// Linux's statvfs flag for relatime mounts (`ST_RELATIME`, 4096), which the libc crate only
/// exports for glibc.
const ST_RELATIME: libc::c_ulong = 4096;

/// The rlimits every command gets, in the order the forker's setup sends their values
/// (`forker::Setup::new`).
pub const RLIMITS: [Resource; 10] = [
    libc::RLIMIT_NPROC,
    libc::RLIMIT_FSIZE,
    libc::RLIMIT_AS,
    libc::RLIMIT_NOFILE,
    libc::RLIMIT_CORE,
    libc::RLIMIT_SIGPENDING,
    libc::RLIMIT_MSGQUEUE,
    libc::RLIMIT_NICE,
    libc::RLIMIT_RTPRIO,
    libc::RLIMIT_CPU,
];

/// What the supervisor and the command need, set up once in the forker.
pub struct ForkerPlan {
    pub bash: CString,
    pub page_size: usize,
    pub rlimits: [(Resource, u64); 10],
    /// A landlock ruleset that adds nothing but a domain boundary (and the signal and abstract
    /// socket scopes): each supervisor and each command restricts itself with it, so that no
    /// command can reach the forker, its supervisor or another command through ptrace-style
    /// access or signals, and a supervisor's `kill(-1)` reaches its own tree and nothing else.
    pub nested: RawFd,
    /// `nested` has the signal scope (landlock ABI >= 6): supervisors make their own domain with
    /// it and kill their tree with `kill(-1)`. Without it they fall back to lists of pids.
    pub scoped: bool,
    /// The nice value every command starts at (the forker's own plus [`COMMAND_NICE`], at most
    /// 19); with `RLIMIT_NICE` at 0 no process of the command can take it back.
    pub nice: libc::c_int,
    pub timeout: Duration,
    pub forker_pid: libc::pid_t,
}

/// How much lower a command's CPU priority is than the forker's (and so the worker's): the
/// worker, the supervisors and the host stay responsive while a command burns every CPU.
pub const COMMAND_NICE: libc::c_int = 10;

/// Per-command inputs, pointing into the forker's copy of the request.
pub struct RunFds<'a> {
    pub cwd: &'a CStr,
    /// Where the command starts when `cwd` cannot be entered (HOME; empty: nowhere else).
    pub home: &'a CStr,
    pub stdout_w: RawFd,
    pub stderr_w: RawFd,
    /// Write end of the state pipe; becomes fd 3 in the command.
    pub state_w: RawFd,
    /// Write end of the supervisor's status pipe.
    pub status_w: RawFd,
    /// The command's pids cgroup (-1 without one): `cgroup.procs` opened for writing (the
    /// command joins) and for reading (the supervisor kills what it lists), and `cgroup.kill`.
    pub cgroup_w: RawFd,
    pub cgroup_r: RawFd,
    pub cgroup_kill: RawFd,
    /// The command's cpu cgroup's `cgroup.procs` (cgroup v1, where cpu is a hierarchy of its
    /// own; -1 without one, or on v2, where the pids cgroup has the cpu controller too).
    pub cpu_w: RawFd,
    /// `bash -c SCRIPT` and the environment, NULL-terminated.
    pub argv: &'a [*const libc::c_char],
    pub envp: &'a [*const libc::c_char],
}

/// A failed step of the forker's confinement: what, and the errno.
pub type Failure = (&'static str, i32);

/// The one line a failed step becomes (`sandbox setup failed: STEP: ERROR (errno N)`).
pub fn failure_text((step, err): Failure) -> String {
    format!(
        "sandbox setup failed: {step}: {} (errno {err})",
        String::from_utf8_lossy(errno_text(err))
    )
}

/// The sandbox's mount namespace as the forker joins it.
pub struct Join {
    pub mnt: RawFd,
    /// The user namespace owning `mnt`, when the worker is not root.
    pub user: Option<RawFd>,
    /// The sandbox root inside `mnt` (O_PATH).
    pub root: RawFd,
    /// IPC/UTS (and, where planned, network) namespaces made for the sandbox.
    pub unshare_flags: libc::c_int,
}

/// Everything that confines the forker, and with it every process it forks.
pub struct Confinement<'a> {
    pub join: Option<Join>,
    pub ruleset: RawFd,
    pub filter: &'a [libc::sock_filter],
    pub drop_caps: bool,
}

fn check(ok: bool, step: &'static str) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err((step, errno()))
    }
}

/// Confines the calling process (the forker, single-threaded) for good, in this order: the
/// sandbox's namespaces, `no_new_privs`, landlock, capabilities, seccomp.
///
/// # Safety
/// Raw syscalls on descriptors the caller owns; irreversible for the calling process.
pub unsafe fn confine(c: &Confinement) -> Result<(), Failure> {
    if let Some(join) = &c.join {
        if let Some(user) = join.user {
            // Without root: the user namespace that owns the mount namespace, as the same uid.
            check(
                libc::setns(user, libc::CLONE_NEWUSER) == 0,
                "setns (user namespace)",
            )?;
        }
        check(
            libc::setns(join.mnt, libc::CLONE_NEWNS) == 0,
            "setns (mount namespace)",
        )?;
        // setns put root and cwd at the namespace's root mount; the sandbox root is the helper's
        // root (the same after a pivot, below it after the chroot fallback).
        check(
            libc::fchdir(join.root) == 0 && libc::chroot(c".".as_ptr()) == 0,
            "entering the sandbox root",
        )?;
        check(
            libc::unshare(join.unshare_flags) == 0,
            "unshare (IPC/UTS namespaces)",
        )?;
    }
    check(
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0,
        "prctl(PR_SET_NO_NEW_PRIVS)",
    )?;
    check(
        libc::syscall(libc::SYS_landlock_restrict_self, c.ruleset, 0u32) == 0,
        "landlock_restrict_self",
    )?;
    if c.drop_caps {
        drop_capabilities()?;
    }
    let prog = libc::sock_fprog {
        len: c.filter.len() as u16,
        filter: c.filter.as_ptr() as *mut libc::sock_filter,
    };
    check(
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        ) == 0,
        "seccomp filter",
    )
}

/// A spare supervisor, made by the forker before the request it will serve comes: a child
/// subreaper, SIGCHLD back to the default (the forker ignores it so that the kernel reaps its
/// children), and (landlock ABI >= 6) a landlock domain of its own, which everything the command
/// starts inherits and cannot leave. Until it takes a request the forker's end ends it at once
/// (the death signal's default action is to terminate, and it is not blocked yet), and it stays
/// in the forker's process group, so that the worker can kill both with one signal even when
/// they are stopped. Returns whether it has its own scoped domain (see [`kill_tree`]).
///
/// # Safety
/// Must only be called in a freshly forked child of the (single-threaded) forker.
pub unsafe fn become_spare(plan: &ForkerPlan) -> bool {
    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    libc::prctl(libc::PR_SET_PDEATHSIG, ORPHAN_SIGNAL, 0, 0, 0);
    if libc::getppid() != plan.forker_pid {
        libc::_exit(0);
    }
    libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    // Off the command's path: the spare waits for its request anyway.
    plan.scoped && libc::syscall(libc::SYS_landlock_restrict_self, plan.nested, 0u32) == 0
}

/// From now on the forker's end is reported, not fatal: every signal is blocked (while the
/// command shares this memory no signal may be handled in it) and the supervisor waits for the
/// ones it acts on.
///
/// # Safety
/// Changes the calling process's signal mask.
pub unsafe fn block_signals() {
    let mut all: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
}

/// The supervisor of one command (a spare that took a request, signals blocked). `own_domain`:
/// what [`become_spare`] returned. Never returns.
///
/// # Safety
/// Must only be called in a spare ([`become_spare`], then [`block_signals`]).
pub unsafe fn supervisor(plan: &ForkerPlan, run: &RunFds, own_domain: bool) -> ! {
    // The command's stdout and stderr (also where a failed setup step writes its line).
    if libc::dup2(run.stdout_w, 1) != 1 || libc::dup2(run.stderr_w, 2) != 2 {
        libc::_exit(126);
    }
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    for s in [
        libc::SIGCHLD,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        ORPHAN_SIGNAL,
    ] {
        libc::sigaddset(&mut set, s);
    }
    if libc::getppid() != plan.forker_pid {
        // The forker ended while this request was taken: start nothing and say nothing (the
        // worker sends the request again, to a new forker). Still in the forker's process group,
        // where a worker that adopts orphans reaps it.
        libc::_exit(0);
    }
    // Out of the forker's process group (a wedged forker and its idle spare are killed by
    // group; a supervisor must live on to kill its tree), in the forker's session.
    libc::setpgid(0, 0);
    // "Starting" and this supervisor's pid: from here the command may run, and the worker must
    // not send it again (and, should the forker die before it answers, can still reap this
    // process where it adopts orphans).
    let mut head = [0u8; 5];
    head[0] = STARTING;
    head[1..].copy_from_slice(&libc::getpid().to_le_bytes());
    write_all(run.status_w, &head);
    let start = now();
    let pid = spawn_command(plan, run);
    if pid < 0 {
        fail("clone", errno());
    }
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    supervise(plan, run, pid, &set, start, own_domain)
}

/// Starts the command as `posix_spawn` does: `clone(CLONE_VM | CLONE_VFORK)` on a stack of its
/// own. The supervisor sleeps until the command has exec'd bash (or died in its setup).
unsafe fn spawn_command(plan: &ForkerPlan, run: &RunFds) -> libc::pid_t {
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
    let args: (&ForkerPlan, &RunFds) = (plan, run);
    libc::clone(
        command_main,
        base.cast::<u8>().add(STACK).cast(),
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        &args as *const (&ForkerPlan, &RunFds) as *mut libc::c_void,
    )
}

extern "C" fn command_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the pair on the stack of the supervisor, which waits (CLONE_VFORK); the
    // command makes only raw syscalls, then execs or exits.
    unsafe {
        let (plan, run) = *(arg as *const (&ForkerPlan, &RunFds));
        command_setup(plan, run);
        libc::execve(plan.bash.as_ptr(), run.argv.as_ptr(), run.envp.as_ptr());
        fail_path("exec", &plan.bash, errno())
    }
}

/// Signals every command starts with at their default action, even when the worker ignored them.
/// The worker catches SIGINT and SIGTERM once it serves, so what it had ignored before (a worker
/// started as a background job ignores SIGINT and SIGQUIT) reached the first forker but not one
/// started later: two commands of one session saw different dispositions. SIGPIPE: the worker
/// ignores it; bash and its commands must not.
const ALWAYS_DEFAULT: [libc::c_int; 5] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGPIPE,
];

/// Every caught signal back to its default action, and [`ALWAYS_DEFAULT`] too. Other ignored
/// signals stay ignored, as across a plain exec.
///
/// # Safety
/// Changes the calling process's signal dispositions.
pub unsafe fn default_handlers() {
    let mut dfl: libc::sigaction = std::mem::zeroed();
    dfl.sa_sigaction = libc::SIG_DFL;
    for sig in 1..=libc::SIGRTMAX() {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            continue;
        }
        if old.sa_sigaction != libc::SIG_DFL
            && (old.sa_sigaction != libc::SIG_IGN || ALWAYS_DEFAULT.contains(&sig))
        {
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    }
}

/// The supervisor's record after the pid: kind and exit code; then it exits.
unsafe fn report(status_w: RawFd, kind: u8, code: i32) -> ! {
    let mut rec = [0u8; 5];
    rec[0] = kind;
    rec[1..].copy_from_slice(&code.to_le_bytes());
    write_all(status_w, &rec);
    libc::close(status_w);
    libc::_exit(0)
}

/// The supervisor: wait, enforce the deadline, clean up, report, exit.
unsafe fn supervise(
    plan: &ForkerPlan,
    run: &RunFds,
    cmd: libc::pid_t,
    set: &libc::sigset_t,
    start: libc::timespec,
    own_domain: bool,
) -> ! {
    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    // Keep only the status pipe and the cgroup's lists: stdout/stderr/state must reach EOF when
    // the command's tree is gone, and no descriptor of the forker (its socket above all) stays
    // open here longer than needed.
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
        // The death signal, or a missed one: the forker is gone (a stray SIGUSR1 is ignored).
        if libc::getppid() != plan.forker_pid {
            kind = KIND_ORPHANED;
            break;
        }
    }
    kill_tree(run, cmd, &mut cmd_status, own_domain);
    let code = match (kind, cmd_status) {
        (KIND_TIMED_OUT, _) => TIMEOUT_EXIT,
        (_, Some(st)) if libc::WIFEXITED(st) => libc::WEXITSTATUS(st),
        (_, Some(st)) if libc::WIFSIGNALED(st) => 128 + libc::WTERMSIG(st),
        _ => 128 + libc::SIGKILL,
    };
    report(run.status_w, kind, code)
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

/// Kills every process of the command's tree until none is left; only then does the supervisor
/// report.
///
/// With `own_domain` (landlock ABI >= 6), each round starts with `kill(-1, SIGKILL)`: the signal
/// scope of this supervisor's landlock domain limits it to the processes of that domain and the
/// ones below it, which are exactly the command's tree: each of them inherited the domain from
/// the command, and no process can leave its domain, whatever process group, session or parent
/// it moved to (a process's uid, group or session can all be shed; its domain cannot). One call
/// reaches every such process at once, and a fork cannot outrun it: the kernel walks the task
/// list under a lock that fork needs, and a process with SIGKILL pending cannot complete a fork.
///
/// Without it (older kernels), it kills the command's process group, then every member of the
/// command's pids cgroup (when it has one), and every child of this subreaper (orphans re-parent
/// to it, so its children list finds them whatever process group or session they moved to),
/// round after round: a tree that keeps forking can outrun that (docs/security-model.md).
unsafe fn kill_tree(
    run: &RunFds,
    cmd: libc::pid_t,
    cmd_status: &mut Option<libc::c_int>,
    own_domain: bool,
) {
    // The common end: bash exited and left nothing running. Every process of the tree is a
    // descendant of this subreaper (orphans come back to it), so with no child left, living or
    // dead, there is nothing to kill (and no task list to walk).
    if cmd_status.is_some() && no_child_left(cmd, cmd_status) {
        return;
    }
    libc::kill(-cmd, libc::SIGKILL);
    if cmd_status.is_none() {
        libc::kill(cmd, libc::SIGKILL);
    }
    if run.cgroup_kill >= 0 {
        write_all(run.cgroup_kill, b"1");
    }
    for _ in 0..100_000 {
        if own_domain {
            libc::kill(-1, libc::SIGKILL);
        }
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

/// Reaps whatever has exited; true when this process has no child at all any more.
unsafe fn no_child_left(cmd: libc::pid_t, cmd_status: &mut Option<libc::c_int>) -> bool {
    loop {
        let mut st = 0;
        let r = libc::waitpid(-1, &mut st, libc::WNOHANG);
        if r > 0 {
            if r == cmd {
                *cmd_status = Some(st);
            }
            continue;
        }
        return r < 0 && errno() == libc::ECHILD;
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

/// The command side, in order; any failure ends the process with 126 and one line. What is the
/// same for every command (namespaces, `no_new_privs`, landlock's rules, capabilities, seccomp)
/// was done once in the forker and is inherited.
unsafe fn command_setup(plan: &ForkerPlan, run: &RunFds) {
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    libc::setpgid(0, 0);
    // Into the command's pids cgroup first: everything it starts is counted from here on.
    if run.cgroup_w >= 0 && libc::write(run.cgroup_w, b"0".as_ptr().cast(), 1) != 1 {
        fail("joining the command's pids cgroup", errno());
    }
    // Never a real-time policy (a worker started under `chrt` passes its own on): a busy
    // real-time tree would take whole CPUs from the host, and cgroup v1 refuses a real-time
    // task in a cpu cgroup without real-time bandwidth. RLIMIT_RTPRIO 0 (below) keeps it so.
    // (The raw call: musl's wrapper is a stub that fails with ENOSYS.)
    let normal: libc::sched_param = std::mem::zeroed();
    if libc::syscall(
        libc::SYS_sched_setscheduler,
        0,
        libc::SCHED_OTHER,
        &normal as *const libc::sched_param,
    ) != 0
    {
        fail("sched_setscheduler", errno());
    }
    if run.cpu_w >= 0 && libc::write(run.cpu_w, b"0".as_ptr().cast(), 1) != 1 {
        fail("joining the command's cpu cgroup", errno());
    }
    // A lower CPU priority for the whole tree (RLIMIT_NICE, set below, keeps it from being
    // raised again), so the worker and its supervisors outrank a command that burns every CPU.
    if libc::setpriority(libc::PRIO_PROCESS, 0, plan.nice) != 0 {
        fail("setpriority", errno());
    }
    if libc::chdir(run.cwd.as_ptr()) != 0 {
        // The directory an earlier command left the shell in may be gone (removed, or a path
        // too long to enter): start in HOME and say so, rather than fail every later command.
        let err = errno();
        if run.home.to_bytes().is_empty() || libc::chdir(run.home.as_ptr()) != 0 {
            fail_path("working directory", run.cwd, err);
        }
        note_path(
            b"working directory ",
            run.cwd,
            b" cannot be entered: ",
            err,
            run.home,
        );
    }
    if libc::dup2(run.state_w, 3) != 3 {
        fail("dup2 of the state descriptor", errno());
    }
    // Everything above fd 3 (the forker's socket, its rulesets, the pipes' originals) closes at
    // exec.
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
    // A landlock domain of the command's own, below the supervisor's: ptrace-style access (/proc
    // of the forker and the supervisor, their memory and descriptors) and signals reach only this
    // domain and the ones below it.
    if libc::syscall(libc::SYS_landlock_restrict_self, plan.nested, 0u32) != 0 {
        fail("landlock_restrict_self (the command's own domain)", errno());
    }
}

/// uid 0 (or a process holding capabilities in the sandbox's user namespace) keeps its uid but
/// loses every capability, now and across exec.
unsafe fn drop_capabilities() -> Result<(), Failure> {
    // SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, each locked.
    const SECBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    check(
        libc::prctl(libc::PR_SET_SECUREBITS, SECBITS, 0, 0, 0) == 0,
        "prctl(PR_SET_SECUREBITS)",
    )?;
    for cap in 0..64 {
        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno() != libc::EINVAL {
            return Err(("prctl(PR_CAPBSET_DROP)", errno()));
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
    check(
        libc::syscall(libc::SYS_capset, &header, data.as_ptr()) == 0,
        "capset",
    )
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
    if let Some(proc_dir) = &ns.fresh_proc {
        if libc::mount(
            c"proc".as_ptr(),
            proc_dir.as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"hidepid=ptraceable".as_ptr().cast(),
        ) != 0
        {
            fail_path("mounting a procfs", proc_dir, errno());
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

pub fn errno() -> i32 {
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

pub unsafe fn write_all(fd: RawFd, mut bytes: &[u8]) {
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

pub unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) {
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
pub unsafe fn close_all_but<const N: usize>(mut keep: [RawFd; N]) {
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
