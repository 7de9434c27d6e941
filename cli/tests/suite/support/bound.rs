//! A pids cgroup (v1) of one test, with a low limit: whatever a sandbox lets through stays inside
//! it, so a broken sandbox cannot take the machine down. Root only.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Bound(pub PathBuf);

impl Bound {
    /// A bound of its own for each test that needs one (tests of one binary run at once): `name`
    /// must be unique among them.
    pub fn new(name: &str, max: u32) -> Bound {
        let dir = Path::new("/sys/fs/cgroup/pids")
            .join(format!("kh-attack-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("as root this test needs a cgroup v1 pids hierarchy");
        std::fs::write(dir.join("pids.max"), max.to_string()).unwrap();
        Bound(dir)
    }

    /// Makes `cmd` join the bound, in a process group of its own, and drop to `uid` (after it
    /// joined: a plain uid cannot move itself between cgroups).
    pub fn hold(&self, cmd: &mut Command, uid: Option<u32>) {
        let procs =
            std::ffi::CString::new(self.0.join("cgroup.procs").to_string_lossy().as_bytes())
                .unwrap();
        cmd.process_group(0);
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                if let Some(uid) = uid {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(uid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// Processes in the bound itself.
    pub fn procs(&self) -> Vec<i32> {
        std::fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Waits up to `within` for the bound to hold no process; what is left.
    pub fn drained(&self, within: Duration) -> Vec<i32> {
        let deadline = Instant::now() + within;
        while !self.procs().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.procs()
    }

    /// Processes in the bound or any cgroup nested in it, and how often it refused a fork.
    pub fn census(&self) -> (Vec<String>, u64) {
        let mut left = Vec::new();
        let mut stack = vec![self.0.clone()];
        while let Some(d) = stack.pop() {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            left.extend(
                procs
                    .split_whitespace()
                    .map(|p| format!("{p} in {}", d.display())),
            );
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                }
            }
        }
        let events = std::fs::read_to_string(self.0.join("pids.events")).unwrap();
        let refused = events.split_whitespace().nth(1).unwrap().parse().unwrap();
        (left, refused)
    }

    /// SIGKILLs whatever is still in the bound (a test that failed leaves its processes there).
    pub fn kill_all(&self) {
        for _ in 0..50 {
            let procs = self.procs();
            if procs.is_empty() {
                return;
            }
            for p in procs {
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bound {
    /// Kills what a failed test left in the bound, then removes it and the command cgroups a
    /// sandbox made inside it (they nest under the worker's own cgroup; a worker killed here does
    /// not remove its own), deepest first, once their processes are gone.
    fn drop(&mut self) {
        self.kill_all();
        fn dirs(d: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs(&e.path(), out);
                }
            }
            out.push(d.to_path_buf());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut all = Vec::new();
            dirs(&self.0, &mut all);
            for d in &all {
                let _ = std::fs::remove_dir(d);
            }
            if !self.0.exists() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
