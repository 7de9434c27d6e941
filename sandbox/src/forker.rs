//! A sandbox's forker, seen from the worker: one small, already-confined process per
//! [`super::Tier0Sandbox`] that forks the commands' supervisors (its own side:
//! [`super::forker_main`]). The worker talks to it over an anonymous socketpair that no command
//! can reach (it is close-on-exec everywhere, the supervisor closes it before the command runs,
//! and the forker is in a landlock domain above every command's).
//!
//! It is started when the sandbox is built and started again when it is found gone (killed, or
//! wedged: no room for a request for [`SEND_LIMIT`], no answer for [`REPLY_LIMIT`]): a command
//! in flight when it ends gets a 126 fault (its supervisor kills the tree and says so), the
//! next one a new forker.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::forker_main::{ARGV0, ENV, HOOK_RAN};
use super::wire::{self, Header, HEADER};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// How long a request may wait for room in the socket (a forker that reads nothing for this
/// long is wedged, and is replaced).
const SEND_LIMIT: Duration = Duration::from_secs(2);
/// How long a request may wait for its answer (a fork takes well under a millisecond; a forker
/// that does not answer for this long is wedged, stopped say, and is replaced).
const REPLY_LIMIT: Duration = Duration::from_secs(5);

/// What the forker is set up with, once per process it starts.
pub struct Setup {
    pub payload: Vec<u8>,
    pub flags: u32,
    /// Landlock ruleset, nested ruleset, then (namespace mode) mount namespace and root, then
    /// (without root) the user namespace.
    pub fds: Vec<OwnedFd>,
}

/// One command as the forker gets it.
pub struct Request<'a> {
    /// `SCRIPT\0`, the environment's `K=V\0` entries, `CWD\0`, `HOME\0`.
    pub payload: &'a [u8],
    pub env_count: u32,
    /// stdout, stderr, state and status pipes' write ends.
    pub pipes: [RawFd; 4],
    /// The command's pids cgroup: `cgroup.procs` for writing and reading, `cgroup.kill`.
    pub cgroup: Option<(RawFd, RawFd, Option<RawFd>)>,
    /// The command's cpu cgroup's `cgroup.procs` for writing (cgroup v1).
    pub cpu: Option<RawFd>,
}

/// A started command: its supervisor, as a pidfd (signals reach it or nothing, never a
/// recycled pid).
pub struct Started {
    pub pidfd: OwnedFd,
}

pub enum StartError {
    /// Nothing was started; the reason.
    Fault(String),
    /// The forker ended after it took the request: whether a supervisor runs is for the status
    /// pipe to say (it has the command's pid first, or nothing).
    Lost,
}

pub struct Forker {
    setup: Setup,
    conn: tokio::sync::Mutex<Option<Conn>>,
    pid: AtomicU32,
}

struct Conn {
    sock: OwnedFd,
    child: Child,
    next_seq: u64,
    rbuf: Vec<u8>,
    rfds: VecDeque<OwnedFd>,
    /// Requests whose reply nobody waits for any more (their caller was dropped): when it comes,
    /// the supervisor is told to stop (SIGTERM, its cancel signal).
    stale: Vec<u64>,
}

enum Reply {
    Started(Started),
    Refused(String),
}

enum ReplyError {
    /// The forker could not confine itself: why.
    Setup(String),
    /// End of stream, a frame that does not parse, or no answer within [`REPLY_LIMIT`].
    Gone,
}

impl Forker {
    /// Starts the forker (it confines itself while the caller goes on).
    pub fn new(setup: Setup) -> Result<Forker, String> {
        let forker = Forker {
            setup,
            conn: tokio::sync::Mutex::new(None),
            pid: AtomicU32::new(0),
        };
        let conn = forker.spawn()?;
        *forker
            .conn
            .try_lock()
            .map_err(|_| "the forker's lock is taken".to_string())? = Some(conn);
        Ok(forker)
    }

    /// The running forker's pid (0: none right now).
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// Asks the forker to start one command; restarts it first if it is gone.
    pub async fn start(&self, req: &Request<'_>) -> Result<Started, StartError> {
        let mut slot = self.conn.lock().await;
        for attempt in 0..2 {
            if slot.as_mut().is_some_and(Conn::exited) {
                self.discard(&mut slot);
            }
            let conn = match slot.as_mut() {
                Some(conn) => conn,
                None => slot.insert(self.spawn().map_err(StartError::Fault)?),
            };
            let seq = conn.next_seq;
            conn.next_seq = seq.wrapping_add(1);
            if let Err(e) = conn.send_request(seq, req) {
                // Gone before it took the request (or wedged): nothing ran. Once more, anew.
                self.discard(&mut slot);
                if attempt == 0 {
                    continue;
                }
                return Err(StartError::Fault(format!(
                    "cannot reach the sandbox's forker: {e}"
                )));
            }
            // Until its reply is read: a caller dropped while it waits leaves it here.
            conn.stale.push(seq);
            let reply = tokio::time::timeout(REPLY_LIMIT, conn.reply(seq))
                .await
                .unwrap_or(Err(ReplyError::Gone));
            return match reply {
                Ok(reply) => {
                    conn.stale.retain(|s| *s != seq);
                    match reply {
                        Reply::Started(s) => Ok(s),
                        Reply::Refused(why) => Err(StartError::Fault(why)),
                    }
                }
                Err(ReplyError::Setup(why)) => {
                    self.discard(&mut slot);
                    Err(StartError::Fault(why))
                }
                Err(ReplyError::Gone) => {
                    self.discard(&mut slot);
                    Err(StartError::Lost)
                }
            };
        }
        Err(StartError::Fault(
            "cannot reach the sandbox's forker".into(),
        ))
    }

    /// A fresh forker: `/proc/self/exe` with [`ENV`] set and its end of a socketpair as stdin;
    /// the setup is sent at once, its answer read with the first request.
    fn spawn(&self) -> Result<Conn, String> {
        if !HOOK_RAN.load(Ordering::Relaxed) {
            return Err("this program did not run the sandbox's start-up hook (.init_array), so it cannot start the sandbox's forker".into());
        }
        let (ours, theirs) = socketpair().map_err(|e| format!("socketpair: {e}"))?;
        let env = ENV.to_str().unwrap_or_default();
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0(ARGV0)
            .env_clear()
            .env(env, "1")
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // A session of its own, and so a process group, which its idle spare shares (one signal
        // ends both): no controlling terminal reaches a command, and every command of the
        // sandbox stays in this one session (seccomp refuses `setsid`), one autogroup for the
        // scheduler however many processes it starts.
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting the sandbox's forker: {e}"))?;
        self.pid.store(child.id(), Ordering::Relaxed);
        let mut conn = Conn {
            sock: ours,
            child,
            next_seq: 1,
            rbuf: Vec::new(),
            rfds: VecDeque::new(),
            stale: Vec::new(),
        };
        // SAFETY: fcntl on our own descriptor.
        unsafe {
            let fd = conn.sock.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        let fds: Vec<RawFd> = self.setup.fds.iter().map(AsRawFd::as_raw_fd).collect();
        let head = Header {
            magic: wire::SETUP_MAGIC,
            flags: self.setup.flags,
            seq: 0,
            len: self.setup.payload.len() as u32,
            count: 0,
        };
        if let Err(e) = send_frame(&conn.sock, head, &self.setup.payload, &fds) {
            conn.kill();
            return Err(format!("setting up the sandbox's forker: {e}"));
        }
        Ok(conn)
    }

    /// Ends the current forker (if any): killed and reaped. Commands it still supervises are
    /// orphaned, and their supervisors kill them.
    fn discard(&self, slot: &mut Option<Conn>) {
        if let Some(mut conn) = slot.take() {
            conn.kill();
        }
        self.pid.store(0, Ordering::Relaxed);
    }
}

impl Drop for Forker {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.get_mut().take() {
            conn.kill();
        }
    }
}

impl Conn {
    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Kills the forker and its idle spare (its process group: a stopped spare would not die of
    /// the forker's death) and reaps the forker. The group id cannot have been reused: its leader
    /// is our child and not reaped yet.
    fn kill(&mut self) {
        let group = libc::pid_t::try_from(self.child.id()).ok();
        if let Some(pid) = group {
            // SAFETY: a signal to the process group of our unreaped child.
            unsafe { libc::kill(pid.wrapping_neg(), libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pid) = group {
            reap_group(pid);
        }
    }

    fn send_request(&mut self, seq: u64, req: &Request) -> std::io::Result<()> {
        let mut fds: Vec<RawFd> = req.pipes.to_vec();
        let mut flags = 0;
        if let Some((w, r, kill)) = req.cgroup {
            flags |= wire::REQ_CGROUP;
            fds.extend([w, r]);
            if let Some(k) = kill {
                flags |= wire::REQ_CGROUP_KILL;
                fds.push(k);
            }
        }
        if let Some(cpu) = req.cpu {
            flags |= wire::REQ_CPU;
            fds.push(cpu);
        }
        if req.payload.len() > wire::MAX_PAYLOAD {
            return Err(std::io::Error::other(format!(
                "the script and its environment are {} bytes, over {}",
                req.payload.len(),
                wire::MAX_PAYLOAD
            )));
        }
        let head = Header {
            magic: wire::REQUEST_MAGIC,
            flags,
            seq,
            len: req.payload.len() as u32,
            count: req.env_count,
        };
        send_frame(&self.sock, head, req.payload, &fds)
    }

    /// Reads replies until the one for `want`; the setup's answer and stale replies on the way
    /// are dealt with.
    async fn reply(&mut self, want: u64) -> Result<Reply, ReplyError> {
        let mut registered: Option<AsyncFd<Raw>> = None;
        let mut buf = [0u8; 4096];
        loop {
            while let Some((h, text)) = self.next_frame()? {
                let pidfd = if h.flags == wire::REPLY_OK && h.seq != 0 {
                    Some(self.rfds.pop_front().ok_or(ReplyError::Gone)?)
                } else {
                    None
                };
                if h.seq == 0 {
                    if h.flags != wire::REPLY_OK {
                        return Err(ReplyError::Setup(text));
                    }
                } else if h.seq == want {
                    return Ok(match pidfd {
                        Some(pidfd) => Reply::Started(Started { pidfd }),
                        None => Reply::Refused(text),
                    });
                } else if let Some(i) = self.stale.iter().position(|s| *s == h.seq) {
                    self.stale.swap_remove(i);
                    if let Some(pidfd) = pidfd {
                        signal(&pidfd, libc::SIGTERM);
                    }
                } else {
                    return Err(ReplyError::Gone);
                }
            }
            let mut fds = Vec::new();
            let got = wire::recv(
                self.sock.as_raw_fd(),
                &mut buf,
                &mut fds,
                libc::MSG_DONTWAIT,
            );
            self.rfds.extend(fds);
            match got {
                Ok(0) => return Err(ReplyError::Gone),
                Ok(n) => self
                    .rbuf
                    .extend_from_slice(buf.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let fd = match &registered {
                        Some(fd) => fd,
                        None => {
                            // SAFETY: the socket is ours and outlives this registration.
                            let fd = unsafe {
                                AsyncFd::register_with_interest(
                                    Raw(self.sock.as_raw_fd()),
                                    Interest::READABLE,
                                )
                            }
                            .map_err(|_| ReplyError::Gone)?;
                            registered.insert(fd)
                        }
                    };
                    let mut ready = fd.readable().await.map_err(|_| ReplyError::Gone)?;
                    ready.clear_ready();
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(ReplyError::Gone),
            }
        }
    }

    /// One complete reply frame off the buffer, if there is one.
    fn next_frame(&mut self) -> Result<Option<(Header, String)>, ReplyError> {
        let Some(head) = self.rbuf.get(..HEADER) else {
            return Ok(None);
        };
        let mut h = [0u8; HEADER];
        h.copy_from_slice(head);
        let h = Header::decode(&h);
        if h.magic != wire::REPLY_MAGIC || h.len as usize > wire::MAX_PAYLOAD {
            return Err(ReplyError::Gone);
        }
        let end = HEADER.saturating_add(h.len as usize);
        let Some(text) = self.rbuf.get(HEADER..end) else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(text).into_owned();
        self.rbuf.drain(..end);
        Ok(Some((h, text)))
    }
}

/// A descriptor borrowed for one readiness registration (the runtime may differ per call).
struct Raw(RawFd);

impl AsRawFd for Raw {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Sends a whole frame (descriptors with its first bytes), waiting for room at most
/// [`SEND_LIMIT`].
fn send_frame(sock: &OwnedFd, head: Header, payload: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let head = head.encode();
    let total = HEADER.saturating_add(payload.len());
    let deadline = Instant::now()
        .checked_add(SEND_LIMIT)
        .unwrap_or_else(Instant::now);
    let mut sent = 0;
    while sent < total {
        let (first, second): (&[u8], &[u8]) = match head.get(sent..) {
            Some(h) if !h.is_empty() => (h, payload),
            _ => (
                payload
                    .get(sent.saturating_sub(HEADER)..)
                    .unwrap_or_default(),
                &[],
            ),
        };
        let with = if sent == 0 { fds } else { &[] };
        match wire::send(sock.as_raw_fd(), &[first, second], with, libc::MSG_DONTWAIT) {
            Ok(n) => sent = sent.saturating_add(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the forker took nothing for 2 s",
                    ));
                }
                let mut pfd = libc::pollfd {
                    fd: sock.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one pollfd on the stack.
                unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(2000) as libc::c_int) };
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn socketpair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut sv = [0; 2];
    // SAFETY: socketpair fills two descriptors we then own.
    unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])))
    }
}

/// Where the worker adopts orphans (PID 1 of a container, as in the worker pod, or a child
/// subreaper), the dead forker's spare is now the worker's child: reaped by a thread, and only
/// what is in that process group, so no other child's status is taken. Elsewhere: ECHILD at
/// once, and the thread ends.
fn reap_group(pgid: libc::pid_t) {
    let wait = move || {
        for _ in 0..64 {
            // SAFETY: waitid fills the siginfo on our stack.
            let r = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                libc::waitid(libc::P_PGID, pgid as libc::id_t, &mut info, libc::WEXITED)
            };
            let interrupted =
                std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            if r != 0 && !interrupted {
                return;
            }
        }
    };
    let _ = std::thread::Builder::new()
        .name("kube-harness-orphan".into())
        .spawn(wait);
}

/// A pidfd for `pid`, if it names a process (the caller only waits on it).
pub fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    if pid <= 0 {
        return None;
    }
    // SAFETY: pidfd_open returns a new descriptor we then own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    let fd = RawFd::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: fresh descriptor.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The same for a supervisor orphaned by its forker's end: it exits right after its report, so
/// a thread waits for it through its pidfd (ECHILD at once where it is not the worker's child).
pub fn reap_orphan(pidfd: OwnedFd) {
    let wait = move || {
        // SAFETY: waitid on our own pidfd, filling the siginfo on the stack.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            while libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED,
            ) != 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
            }
        }
    };
    let _ = std::thread::Builder::new()
        .name("kube-harness-orphan".into())
        .spawn(wait);
}

/// A signal through a pidfd: it reaches that process or none (never a recycled pid).
pub fn signal(pidfd: &OwnedFd, sig: libc::c_int) {
    // SAFETY: pidfd_send_signal with a valid descriptor and no siginfo.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        );
    }
}

/// `RLIMIT_SIGPENDING` of every command. The kernel counts queued signals per user, host-wide,
/// and checks the count against the *receiver's* limit: with every process of the sandbox at
/// this bound, a command can hold at most this many of its uid's pending signals (an outside
/// attack queued 96,367 for uid 0, and the host's own `sigqueue` calls then failed).
pub const MAX_PENDING_SIGNALS: u64 = 1024;

impl Setup {
    /// The setup for a sandbox: bash, the limits, the seccomp program, the landlock rulesets and
    /// (namespace mode) the namespace to join. `scoped`: `nested` has landlock's signal scope.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bash: &std::path::Path,
        limits: &super::Limits,
        filter: &[libc::sock_filter],
        ruleset: OwnedFd,
        nested: OwnedFd,
        scoped: bool,
        ns: Option<super::ns_plan::Namespace>,
        drop_caps: bool,
    ) -> Setup {
        use std::os::unix::ffi::OsStrExt;
        let mut w = wire::Writer::default();
        w.u64(u64::try_from(limits.timeout.as_nanos()).unwrap_or(u64::MAX));
        // In the order of `child::RLIMITS`.
        for v in [
            limits.max_processes,
            limits.max_file_size,
            limits.max_memory,
            limits.max_open_files,
            0, // RLIMIT_CORE: no core dumps into the workspace
            MAX_PENDING_SIGNALS,
            0, // RLIMIT_MSGQUEUE: no POSIX message queues, whose bytes count per user host-wide
            0, // RLIMIT_NICE: the lower priority a command starts with cannot be raised again
            0, // RLIMIT_RTPRIO: no real-time scheduling
            // RLIMIT_CPU: no process uses more CPU time than the command's whole time limit.
            limits.timeout.as_secs().saturating_add(1),
        ] {
            w.u64(v);
        }
        w.u32(ns.as_ref().map_or(0, |n| n.unshare_flags as u32));
        let mut code = Vec::with_capacity(filter.len().saturating_mul(8));
        for i in filter {
            code.extend_from_slice(&i.code.to_le_bytes());
            code.extend_from_slice(&[i.jt, i.jf]);
            code.extend_from_slice(&i.k.to_le_bytes());
        }
        w.bytes(&code);
        w.bytes(bash.as_os_str().as_bytes());
        let mut flags = 0;
        if drop_caps {
            flags |= wire::SETUP_DROP_CAPS;
        }
        if scoped {
            flags |= wire::SETUP_SCOPED;
        }
        let mut fds = vec![ruleset, nested];
        if let Some(ns) = ns {
            flags |= wire::SETUP_NAMESPACE;
            fds.extend([ns.mnt, ns.root]);
            if let Some(user) = ns.user {
                flags |= wire::SETUP_USER_NS;
                fds.push(user);
            }
        }
        Setup {
            payload: w.0,
            flags,
            fds,
        }
    }
}
