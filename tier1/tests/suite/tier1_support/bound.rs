//! A pids cgroup (v1) with a low limit around the processes of one test, so that what an attack
//! starts cannot take the machine down however the code under test fails. Removed on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct PidsBound(PathBuf);

impl PidsBound {
    /// A bound of its own for each test (the tests of one binary run at once). Root only.
    pub fn new(name: &str, max: u32) -> PidsBound {
        let dir = Path::new("/sys/fs/cgroup/pids")
            .join(format!("kh-attack-tier1-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("as root this test needs a cgroup v1 pids hierarchy");
        std::fs::write(dir.join("pids.max"), max.to_string()).unwrap();
        PidsBound(dir)
    }

    /// Makes `cmd` join the bound before it runs anything.
    pub fn hold(&self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        let procs =
            std::ffi::CString::new(self.0.join("cgroup.procs").to_string_lossy().as_bytes())
                .unwrap();
        // SAFETY: open, write and close are async-signal-safe; `procs` outlives the spawn.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                Ok(())
            });
        }
    }

    /// The processes in the bound (host pids).
    pub fn procs(&self) -> Vec<i32> {
        std::fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// How often the bound refused a fork (`pids.events`): 0 when the attack ran whole within it.
    pub fn refused(&self) -> u64 {
        let events = std::fs::read_to_string(self.0.join("pids.events")).unwrap();
        events.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for PidsBound {
    fn drop(&mut self) {
        // Its processes may take a moment to be released after the agent's namespace went.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
