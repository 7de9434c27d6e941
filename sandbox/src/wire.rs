//! What the worker and a sandbox's forker say to each other over their socketpair: the setup
//! (once per forker), one request per command and one reply each, framed by length, with the
//! file descriptors riding along as `SCM_RIGHTS`. Both sides are this crate, built together, so
//! the format has no versioning; a frame that does not parse ends the connection.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// First word of each frame: a stray writer or a desynchronised stream is caught at once.
pub const SETUP_MAGIC: u32 = 0x4b48_5355; // "KHSU"
pub const REQUEST_MAGIC: u32 = 0x4b48_5251; // "KHRQ"
pub const REPLY_MAGIC: u32 = 0x4b48_5250; // "KHRP"

/// Frame header: magic, flags, sequence number, payload length, a count (env entries or fds).
pub const HEADER: usize = 24;
/// The largest payload either side accepts (a script of 128 KiB and its environment fit many
/// times over; the kernel's own limit for argv and environment together is about 2 MiB).
pub const MAX_PAYLOAD: usize = 8 << 20;
/// The most descriptors one frame carries (setup: ruleset, nested ruleset, mount, user, root).
pub const MAX_FDS: usize = 8;

/// Setup flags.
pub const SETUP_NAMESPACE: u32 = 1;
pub const SETUP_USER_NS: u32 = 2;
pub const SETUP_DROP_CAPS: u32 = 4;
/// The nested ruleset has landlock's signal scope: supervisors make their own domain with it.
pub const SETUP_SCOPED: u32 = 8;

/// Request flags: which optional descriptors follow the four pipes.
pub const REQ_CGROUP: u32 = 1;
pub const REQ_CGROUP_KILL: u32 = 2;
/// The command's cpu cgroup (`cgroup.procs` for writing), after the others.
pub const REQ_CPU: u32 = 4;

/// Reply flags.
pub const REPLY_OK: u32 = 0;
pub const REPLY_ERROR: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub magic: u32,
    pub flags: u32,
    pub seq: u64,
    pub len: u32,
    pub count: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0..4].copy_from_slice(&self.magic.to_le_bytes());
        b[4..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b[20..24].copy_from_slice(&self.count.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; HEADER]) -> Header {
        let u32_at = |i: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(b.get(i..).and_then(|r| r.get(..4)).unwrap_or(&[0; 4]));
            u32::from_le_bytes(w)
        };
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&b[8..16]);
        Header {
            magic: u32_at(0),
            flags: u32_at(4),
            seq: u64::from_le_bytes(seq),
            len: u32_at(16),
            count: u32_at(20),
        }
    }
}

/// Little-endian fields appended to a buffer.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
}

/// The matching reader; every getter fails (None) past the end instead of panicking.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    pub fn u32(&mut self) -> Option<u32> {
        let mut w = [0u8; 4];
        w.copy_from_slice(self.take(4)?);
        Some(u32::from_le_bytes(w))
    }
    pub fn u64(&mut self) -> Option<u64> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Some(u64::from_le_bytes(w))
    }
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// Room for `MAX_FDS` descriptors in one control message (u64 words keep it aligned).
type ControlBuf = [u64; 8];
const _: () = assert!(std::mem::size_of::<ControlBuf>() >= 16 + 4 * MAX_FDS);

/// One `sendmsg` of `parts` (gathered) with `fds` attached; returns the bytes sent (a stream
/// socket may take fewer than offered).
pub fn send(
    sock: RawFd,
    parts: &[&[u8]],
    fds: &[RawFd],
    flags: libc::c_int,
) -> std::io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut iov: [libc::iovec; 2] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2];
    let n = parts.len().min(iov.len());
    for (slot, part) in iov.iter_mut().zip(parts) {
        slot.iov_base = part.as_ptr() as *mut libc::c_void;
        slot.iov_len = part.len();
    }
    let mut control: ControlBuf = [0; 8];
    // SAFETY: msghdr is plain data; the control buffer is large enough for MAX_FDS (checked
    // above and at compile time) and aligned for cmsghdr.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        if !fds.is_empty() {
            let data_len = std::mem::size_of_val(fds) as u32;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(data_len) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                data_len as usize,
            );
        }
        let r = libc::sendmsg(sock, &msg, flags | libc::MSG_NOSIGNAL);
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

/// One `recvmsg` into `buf`; descriptors that came along are appended to `fds` (close-on-exec).
/// A truncated control message is an error (its descriptors are closed).
pub fn recv(
    sock: RawFd,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    flags: libc::c_int,
) -> std::io::Result<usize> {
    let mut control: ControlBuf = [0; 8];
    // SAFETY: as in `send`; every descriptor the kernel hands over is taken into an OwnedFd.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of::<ControlBuf>() as _;
        let r = libc::recvmsg(sock, &mut msg, flags | libc::MSG_CMSG_CLOEXEC);
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let header = libc::CMSG_LEN(0) as usize;
                let n = ((*cmsg).cmsg_len as usize).saturating_sub(header) / 4;
                for i in 0..n {
                    let mut fd: RawFd = -1;
                    std::ptr::copy_nonoverlapping(
                        data.add(i.saturating_mul(4)),
                        (&mut fd as *mut RawFd).cast::<u8>(),
                        4,
                    );
                    if fd >= 0 {
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(std::io::Error::other(
                "descriptors were cut off (MSG_CTRUNC)",
            ));
        }
        Ok(r as usize)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn header_round_trips() {
        let h = Header {
            magic: REQUEST_MAGIC,
            flags: 3,
            seq: u64::MAX - 1,
            len: 77,
            count: 9,
        };
        assert_eq!(Header::decode(&h.encode()), h);
    }

    #[test]
    fn reader_stops_at_the_end_instead_of_panicking() {
        let mut w = Writer::default();
        w.u32(7);
        w.bytes(b"abc");
        let mut r = Reader(&w.0);
        assert_eq!(r.u32(), Some(7));
        assert_eq!(r.bytes(), Some(&b"abc"[..]));
        assert_eq!(r.u32(), None);
        // A length that claims more than is there.
        let mut r = Reader(&[255, 255, 0, 0, 1]);
        assert_eq!(r.bytes(), None);
    }

    #[test]
    fn descriptors_travel_with_the_bytes() {
        let mut sv = [0; 2];
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        let (pr, pw) = crate::fd::pipe_high().unwrap();
        let sent = send(a.as_raw_fd(), &[b"he", b"llo"], &[pw.as_raw_fd()], 0).unwrap();
        assert_eq!(sent, 5);
        drop(pw);
        let mut buf = [0u8; 16];
        let mut fds = Vec::new();
        let n = recv(b.as_raw_fd(), &mut buf, &mut fds, 0).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        // The received end is a working copy of the pipe's write end, close-on-exec.
        let flags = unsafe { libc::fcntl(fds[0].as_raw_fd(), libc::F_GETFD) };
        assert!(flags & libc::FD_CLOEXEC != 0);
        let copy = fds.pop().unwrap();
        std::io::Write::write_all(&mut std::fs::File::from(copy), b"x").unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(pr), &mut got).unwrap();
        assert_eq!(got, "x");
    }
}
