//! The forker process itself. [`super::forker`] starts it as a fresh exec of the host program
//! (`/proc/self/exe`, so it is small: none of the worker's memory, threads or descriptors), with
//! one end of a socketpair as its stdin and [`ENV`] set. A start-up hook of this crate, run by the
//! C runtime before `main`, sees the variable and runs [`forker_main`] instead of the program.
//!
//! The forker confines itself once (namespaces, `no_new_privs`, landlock, capabilities, seccomp:
//! [`super::child::confine`]), answers the setup, then serves one request per command: it forks
//! the command's supervisor with a pidfd and answers with both. It is single-threaded and never
//! returns; it exits when the worker's end of the socket closes.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::child::{self, Confinement, ForkerPlan, Join, RunFds, RLIMITS};
use super::wire::{self, Header, Reader, HEADER};
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// The variable that makes the host program a forker (its value is not read).
pub const ENV: &CStr = c"KUBE_HARNESS_SANDBOX_FORKER";
/// The forker's `argv[0]`: what `ps` shows (and `pkill -f kube-harness` matches).
pub const ARGV0: &str = "kube-harness-sandbox-forker";

/// Set by the start-up hook in every process that runs it: a program whose hook did not run
/// (its linker dropped `.init_array`, say) could not become a forker, and must not be asked to.
pub static HOOK_RAN: AtomicBool = AtomicBool::new(false);

#[used]
#[link_section = ".init_array"]
static START_HOOK: extern "C" fn() = start_hook;

/// Runs before `main` in every program that links this crate (glibc passes argc, argv and
/// envp, musl nothing; neither is read). Only a process started by [`super::forker`] has both
/// the variable and a unix stream socket on fd 0; anything else carries on as usual, without
/// the variable.
extern "C" fn start_hook() {
    // SAFETY: before main, single-threaded; getenv/unsetenv and getsockopt on fd 0.
    unsafe {
        if !libc::getenv(ENV.as_ptr()).is_null() {
            libc::unsetenv(ENV.as_ptr());
            if is_unix_stream(0) {
                forker_main()
            }
        }
    }
    HOOK_RAN.store(true, Ordering::Relaxed);
}

unsafe fn is_unix_stream(fd: RawFd) -> bool {
    let get = |opt: libc::c_int| {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let r = libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        );
        if r == 0 {
            v
        } else {
            -1
        }
    };
    get(libc::SO_DOMAIN) == libc::AF_UNIX && get(libc::SO_TYPE) == libc::SOCK_STREAM
}

/// The forker: tidy descriptors and signals, read the setup, confine, serve. Never returns.
unsafe fn forker_main() -> ! {
    // Nothing of the worker's but the socket; fds 0-2 and 3-9 on /dev/null, so that every
    // descriptor a request brings lands at 10 or above and the command's dup2 onto 1, 2 and 3
    // never clobbers one it still needs.
    child::close_all_but([0, 1, 2]);
    let sock = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 10);
    let null_r = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
    let null_w = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if sock < 0 || null_r < 0 || null_w < 0 {
        libc::_exit(125);
    }
    libc::dup2(null_r, 0);
    libc::dup2(null_w, 1);
    libc::dup2(null_w, 2);
    for fd in 3..=9 {
        if fd != null_w {
            libc::dup3(null_w, fd, libc::O_CLOEXEC);
        }
    }
    // Nothing may read this process's memory or descriptors through /proc or ptrace without
    // CAP_SYS_PTRACE, whatever landlock allows; no core dumps. Inherited by the supervisors; the
    // commands' exec of bash resets it for them.
    libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    // Its name in `top` and `ps -o comm` (an exec of /proc/self/exe would show "exe").
    libc::prctl(libc::PR_SET_NAME, c"kh-sandbox-fork".as_ptr(), 0, 0, 0);
    child::default_handlers();
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    // The kernel reaps the supervisors: the worker signals them through pidfds, never by pid.
    libc::signal(libc::SIGCHLD, libc::SIG_IGN);

    let plan = match setup(sock) {
        Ok(plan) => plan,
        Err(text) => {
            reply(sock, 0, Err(&text));
            libc::_exit(126)
        }
    };
    if !reply(sock, 0, Ok(None)) {
        libc::_exit(0);
    }
    serve(sock, &plan)
}

/// Reads the setup frame and confines this process with it.
unsafe fn setup(sock: RawFd) -> Result<ForkerPlan, String> {
    let mut fds = Vec::new();
    let (h, payload) = match read_frame(sock, &mut fds) {
        Ok(Some(frame)) => frame,
        Ok(None) => libc::_exit(0),
        Err(e) => return Err(e),
    };
    if h.magic != wire::SETUP_MAGIC {
        return Err("the forker's setup frame is malformed".into());
    }
    let bad = || "the forker's setup frame is malformed".to_string();
    let mut r = Reader(&payload);
    let timeout = std::time::Duration::from_nanos(r.u64().ok_or_else(bad)?);
    let mut rlimits = [(RLIMITS[0], 0u64); RLIMITS.len()];
    for (slot, resource) in rlimits.iter_mut().zip(RLIMITS) {
        *slot = (resource, r.u64().ok_or_else(bad)?);
    }
    let unshare_flags = r.u32().ok_or_else(bad)? as libc::c_int;
    let filter_bytes = r.bytes().ok_or_else(bad)?;
    let bash = CString::new(r.bytes().ok_or_else(bad)?).map_err(|_| bad())?;
    if filter_bytes.len() % 8 != 0 || filter_bytes.is_empty() {
        return Err(bad());
    }
    let filter: Vec<libc::sock_filter> = filter_bytes
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    let namespace = h.flags & wire::SETUP_NAMESPACE != 0;
    let user = h.flags & wire::SETUP_USER_NS != 0;
    let want = [true, true, namespace, namespace, user]
        .iter()
        .filter(|b| **b)
        .count();
    if fds.len() != want {
        return Err(format!(
            "the forker's setup brought {} descriptors, {want} expected",
            fds.len()
        ));
    }
    let raw = |i: usize| fds.get(i).map_or(-1, |f: &OwnedFd| f.as_raw_fd());
    let join = namespace.then(|| Join {
        mnt: raw(2),
        root: raw(3),
        user: user.then(|| raw(4)),
        unshare_flags,
    });
    child::confine(&Confinement {
        join,
        ruleset: raw(0),
        filter: &filter,
        drop_caps: h.flags & wire::SETUP_DROP_CAPS != 0,
    })
    .map_err(child::failure_text)?;
    let mut fds = fds.into_iter();
    drop(fds.next()); // the ruleset: applied
    let nested = fds.next().map_or(-1, IntoRawFd::into_raw_fd); // kept for every command
    drop(fds); // the namespace's descriptors: joined
               // glibc and musl return the nice value itself (-1 is a value too; errno is not needed: any
               // failure leaves the commands at least COMMAND_NICE below 0).
    let own_nice = libc::getpriority(libc::PRIO_PROCESS, 0).clamp(-20, 19);
    Ok(ForkerPlan {
        bash,
        page_size: libc::sysconf(libc::_SC_PAGESIZE).max(4096) as usize,
        rlimits,
        nested,
        scoped: h.flags & wire::SETUP_SCOPED != 0,
        nice: own_nice.saturating_add(child::COMMAND_NICE).min(19),
        timeout,
        forker_pid: libc::getpid(),
    })
}

/// One request after another until the worker's end closes. The forker itself reads none: a
/// spare supervisor, forked before its request comes (so that the fork is off the command's
/// path), reads the next one from the socket, says which it took on a pipe, and becomes its
/// supervisor; the forker answers the worker with the spare's pidfd and forks the next spare.
unsafe fn serve(sock: RawFd, plan: &ForkerPlan) -> ! {
    let mut pipe = [0; 2];
    if libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        libc::_exit(125);
    }
    let [notify_r, notify_w] = pipe;
    loop {
        let mut pidfd: libc::c_int = -1;
        // fork, with a pidfd for the worker (pidfd_open is refused by the filter; clone's flag
        // is not). The forker has one thread, so the child may use anything it inherited.
        let pid = libc::syscall(
            libc::SYS_clone,
            libc::CLONE_PIDFD | libc::SIGCHLD,
            0usize,
            &mut pidfd as *mut libc::c_int,
            0usize,
            0usize,
        );
        if pid == 0 {
            libc::close(notify_r);
            spare(sock, notify_w, plan)
        }
        if pid < 0 {
            // No spare: this request is refused with the reason, and the next one tries again.
            let err = std::io::Error::last_os_error();
            refuse_one(
                sock,
                &format!("cannot start the command's supervisor: fork: {err}"),
            );
            continue;
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd);
        // Until the spare has taken a request (or died, or the worker has gone).
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: notify_r,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sock,
                    events: libc::POLLRDHUP,
                    revents: 0,
                },
            ];
            if libc::poll(fds.as_mut_ptr(), 3, -1) < 0 {
                if child::errno() == libc::EINTR {
                    continue;
                }
                libc::_exit(2);
            }
            if fds[0].revents & libc::POLLIN != 0 {
                let mut msg = [0u8; 4096];
                let n = libc::read(notify_r, msg.as_mut_ptr().cast(), msg.len());
                let Some(note) = msg.get(..n.max(0) as usize).and_then(Taken::decode) else {
                    libc::_exit(2);
                };
                let answered = match note.refused {
                    None => reply(
                        sock,
                        note.seq,
                        Ok(Some((pid as libc::pid_t, pidfd.as_raw_fd()))),
                    ),
                    Some(why) => reply(sock, note.seq, Err(why)),
                };
                if !answered {
                    libc::_exit(0);
                }
                break;
            }
            if fds[1].revents != 0 || fds[2].revents != 0 {
                // The worker is gone; or the spare died without taking a request (killed from
                // outside, or in the middle of one: the stream cannot be trusted any more).
                libc::_exit(0);
            }
        }
    }
}

/// What a spare tells the forker: the request it took, and why it refused it, if it did.
struct Taken<'a> {
    seq: u64,
    refused: Option<&'a str>,
}

impl<'a> Taken<'a> {
    fn encode(seq: u64, refused: Option<&str>, out: &mut [u8; 4096]) -> usize {
        let text = refused.unwrap_or_default().as_bytes();
        let text = text.get(..text.len().min(4000)).unwrap_or_default();
        out[..8].copy_from_slice(&seq.to_le_bytes());
        out[8] = u8::from(refused.is_some());
        let end = 9usize.saturating_add(text.len());
        if let Some(dst) = out.get_mut(9..end) {
            dst.copy_from_slice(text);
        }
        end
    }

    fn decode(msg: &'a [u8]) -> Option<Taken<'a>> {
        let mut seq = [0u8; 8];
        seq.copy_from_slice(msg.get(..8)?);
        let refused = match *msg.get(8)? {
            0 => None,
            _ => Some(std::str::from_utf8(msg.get(9..)?).unwrap_or("refused")),
        };
        Some(Taken {
            seq: u64::from_le_bytes(seq),
            refused,
        })
    }
}

/// A spare: waits for the next request, tells the forker it took it, and supervises it.
unsafe fn spare(sock: RawFd, notify_w: RawFd, plan: &ForkerPlan) -> ! {
    let own_domain = child::become_spare(plan);
    let mut fds = Vec::new();
    let (h, payload) = match read_frame(sock, &mut fds) {
        Ok(Some(frame)) => frame,
        _ => libc::_exit(0),
    };
    child::block_signals();
    if h.magic != wire::REQUEST_MAGIC {
        libc::_exit(2);
    }
    let mut note = [0u8; 4096];
    let mut argv = [std::ptr::null(); 4];
    let mut envp = Vec::new();
    match prepare(&h, &payload, &fds, &mut argv, &mut envp) {
        Ok(run) => {
            let n = Taken::encode(h.seq, None, &mut note);
            child::write_all(notify_w, note.get(..n).unwrap_or_default());
            libc::close(notify_w);
            child::supervisor(plan, &run, own_domain)
        }
        Err(why) => {
            let n = Taken::encode(h.seq, Some(&why), &mut note);
            child::write_all(notify_w, note.get(..n).unwrap_or_default());
            libc::_exit(0)
        }
    }
}

/// Without a spare (the fork failed), the forker reads one request itself and refuses it.
unsafe fn refuse_one(sock: RawFd, why: &str) {
    let mut fds = Vec::new();
    match read_frame(sock, &mut fds) {
        Ok(Some((h, _))) if h.magic == wire::REQUEST_MAGIC => {
            if !reply(sock, h.seq, Err(why)) {
                libc::_exit(0);
            }
        }
        Ok(None) => libc::_exit(0),
        _ => libc::_exit(2),
    }
}

/// The command's inputs from one request (its strings point into `payload`).
unsafe fn prepare<'a>(
    h: &Header,
    payload: &'a [u8],
    fds: &[OwnedFd],
    argv: &'a mut [*const libc::c_char; 4],
    envp: &'a mut Vec<*const libc::c_char>,
) -> Result<RunFds<'a>, String> {
    let cgroup = h.flags & wire::REQ_CGROUP != 0;
    let kill = h.flags & wire::REQ_CGROUP_KILL != 0;
    let cpu = h.flags & wire::REQ_CPU != 0;
    let want = [true, true, true, true, cgroup, cgroup, kill, cpu]
        .iter()
        .filter(|b| **b)
        .count();
    if fds.len() != want {
        return Err(format!(
            "the request brought {} descriptors, {want} expected",
            fds.len()
        ));
    }
    let raw = |i: usize| fds.get(i).map_or(-1, |f| f.as_raw_fd());
    // script, the environment's entries, cwd, home: each NUL-terminated.
    let env_count = h.count as usize;
    let mut strings: Vec<&CStr> = Vec::with_capacity(env_count.saturating_add(3));
    let mut rest = payload;
    while !rest.is_empty() {
        let s = CStr::from_bytes_until_nul(rest).map_err(|_| "an unterminated string")?;
        rest = rest.get(s.to_bytes_with_nul().len()..).unwrap_or_default();
        strings.push(s);
    }
    if strings.len() != env_count.saturating_add(3) {
        return Err("the request's strings do not match its count".into());
    }
    let (script, tail) = strings.split_first().ok_or("no script")?;
    let (env, places) = tail.split_at(env_count);
    let (cwd, home) = match places {
        [cwd, home] => (*cwd, *home),
        _ => return Err("the request has no working directory".into()),
    };
    *argv = [
        c"bash".as_ptr(),
        c"-c".as_ptr(),
        script.as_ptr(),
        std::ptr::null(),
    ];
    envp.extend(env.iter().map(|e| e.as_ptr()));
    envp.push(std::ptr::null());
    Ok(RunFds {
        cwd,
        home,
        stdout_w: raw(0),
        stderr_w: raw(1),
        state_w: raw(2),
        status_w: raw(3),
        cgroup_w: if cgroup { raw(4) } else { -1 },
        cgroup_r: if cgroup { raw(5) } else { -1 },
        cgroup_kill: if kill { raw(6) } else { -1 },
        // The cpu cgroup's descriptor comes last, after whichever of the others came.
        cpu_w: if cpu { raw(want.saturating_sub(1)) } else { -1 },
        argv: &argv[..],
        envp: &envp[..],
    })
}

/// Reads one frame (header and payload), collecting the descriptors that came with it. `None`
/// at a clean end of stream before the header.
unsafe fn read_frame(
    sock: RawFd,
    fds: &mut Vec<OwnedFd>,
) -> Result<Option<(Header, Vec<u8>)>, String> {
    let mut head = [0u8; HEADER];
    if !read_exact(sock, &mut head, fds)? {
        return Ok(None);
    }
    let h = Header::decode(&head);
    let len = h.len as usize;
    if len > wire::MAX_PAYLOAD || fds.len() > wire::MAX_FDS {
        return Err("a frame over the limits".into());
    }
    let mut payload = vec![0u8; len];
    if !read_exact(sock, &mut payload, fds)? && len > 0 {
        return Err("the worker's end closed inside a frame".into());
    }
    Ok(Some((h, payload)))
}

/// Fills `buf`; false at end of stream before the first byte.
unsafe fn read_exact(sock: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<bool, String> {
    let mut at = 0;
    while at < buf.len() {
        let rest = buf.get_mut(at..).unwrap_or_default();
        match wire::recv(sock, rest, fds, 0) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => return Err("the worker's end closed inside a frame".into()),
            Ok(n) => at = at.saturating_add(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
        if fds.len() > wire::MAX_FDS {
            return Err("too many descriptors in one frame".into());
        }
    }
    Ok(true)
}

/// Answers request `seq`: the supervisor's pid and pidfd, nothing (the setup), or why not.
/// False when the worker is gone.
unsafe fn reply(sock: RawFd, seq: u64, what: Result<Option<(libc::pid_t, RawFd)>, &str>) -> bool {
    let (flags, pid, text, fds): (u32, i32, &[u8], Vec<RawFd>) = match what {
        Ok(Some((pid, pidfd))) => (wire::REPLY_OK, pid, b"", vec![pidfd]),
        Ok(None) => (wire::REPLY_OK, 0, b"", Vec::new()),
        Err(text) => (wire::REPLY_ERROR, -1, text.as_bytes(), Vec::new()),
    };
    let text = text.get(..text.len().min(4096)).unwrap_or_default();
    let head = Header {
        magic: wire::REPLY_MAGIC,
        flags,
        seq,
        len: text.len() as u32,
        count: pid as u32,
    }
    .encode();
    let total = HEADER.saturating_add(text.len());
    let mut sent = 0;
    while sent < total {
        let (first, second): (&[u8], &[u8]) = match head.get(sent..) {
            Some(h) if !h.is_empty() => (h, text),
            _ => (
                text.get(sent.saturating_sub(HEADER)..).unwrap_or_default(),
                &[],
            ),
        };
        let with = if sent == 0 { &fds[..] } else { &[] };
        match wire::send(sock, &[first, second], with, 0) {
            Ok(n) => sent = sent.saturating_add(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}
