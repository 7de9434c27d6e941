//! File descriptors for talking to a forked child: pipes whose ends sit above the fds the child
//! rearranges. A leaf shared by the Tier-0 runner, the cgroup slots and the namespace helper, and
//! by Tier-1's shell (kube-harness-tier1), which starts its commands the same way.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A close-on-exec pipe whose ends sit at fd 10 or above, so the child can dup2 one of them to
/// fd 3 without clobbering the other.
pub fn pipe_high() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((raise(r)?, raise(w)?))
}

pub fn raise(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() >= 10 {
        return Ok(fd);
    }
    // SAFETY: duplicating a valid fd; the original is closed when `fd` drops.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if high < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(high) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn cloexec(fd: &OwnedFd) -> bool {
        // SAFETY: reading the flags of a valid fd.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
        flags >= 0 && flags & libc::FD_CLOEXEC != 0
    }

    #[test]
    fn pipe_ends_are_high_close_on_exec_and_connected() {
        let (r, w) = pipe_high().unwrap();
        for end in [&r, &w] {
            assert!(end.as_raw_fd() >= 10, "fd {} is below 10", end.as_raw_fd());
            assert!(cloexec(end));
        }
        std::fs::File::from(w).write_all(b"x").unwrap();
        let mut got = String::new();
        std::fs::File::from(r).read_to_string(&mut got).unwrap();
        assert_eq!(got, "x");
    }

    #[test]
    fn raise_keeps_a_high_fd_and_moves_a_low_one_up() {
        let (r, _w) = pipe_high().unwrap();
        let raw = r.as_raw_fd();
        assert_eq!(raise(r).unwrap().as_raw_fd(), raw);
        // Free fds below 10 are taken lowest first: dup onto the lowest free one from 3.
        // SAFETY: duplicating stdin, which the test harness keeps open; we own the copy.
        let low = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
        assert!(low >= 0);
        // SAFETY: fresh fd.
        let low = unsafe { OwnedFd::from_raw_fd(low) };
        let raised = raise(low).unwrap();
        assert!(raised.as_raw_fd() >= 10);
        assert!(cloexec(&raised));
    }
}
