//! Per-command pids cgroups: the process bound for commands of uid 0, and the whole-tree kill.
//!
//! `RLIMIT_NPROC` bounds a non-root command's processes, but the kernel never applies it to uid 0
//! (even with every capability dropped), so a fork bomb run by the local host as root would fill
//! the machine. When the worker is root, each command therefore runs in a pids cgroup of its own
//! whose `pids.max` is [`super::Limits::max_processes`]: forks past it fail with `EAGAIN`, and at
//! the end the supervisor kills every process the cgroup lists until it is empty (with
//! `cgroup.kill` first where the kernel has it), whatever process group or session they moved to.
//!
//! The cgroups nest under the worker's own pids cgroup (cgroup v1, where the hierarchy has no
//! "no internal processes" rule), so a bound placed on the worker (a test harness, a systemd
//! unit) also holds its commands. On a cgroup v2 host they go under `/sys/fs/cgroup/kube-harness`
//! instead, because v2 cannot enable a controller below a cgroup that has processes of its own.
//! Command cgroups are reused once empty: making and removing one per command cost about as much
//! as the rest of the sandbox's setup.
//!
//! Each command also gets a **cpu cgroup** where the host has the cpu controller (best effort: the
//! pids bound is required, the CPU bound is not): the whole tree then weighs as one task against
//! the host's (cgroup v1 `cpu.shares`, v2 `cpu.weight`, both at their defaults), however many
//! processes or sessions it makes, and `cpu.cfs_quota_us` (v1) or `cpu.max` (v2) caps it at
//! [`super::Limits::max_cpu_millicores`]. On v2 it is the pids cgroup itself with the cpu
//! controller enabled; on v1 a cgroup of the same name in the cpu hierarchy, which the command
//! joins beside the pids one.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::SandboxError;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Where the pids controller is and which cgroup version it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// The directory under which the sandbox's cgroups are made.
    pub parent: PathBuf,
    pub v2: bool,
}

/// Finds the pids controller from `/proc/self/cgroup` and `/proc/self/mountinfo`.
pub fn locate() -> Result<Hierarchy, String> {
    locate_controller("pids")
}

/// Finds `controller` (`pids`, `cpu`) as [`locate`] does.
pub fn locate_controller(controller: &str) -> Result<Hierarchy, String> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("reading /proc/self/cgroup: {e}"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    let v2_controllers = |mount: &Path| {
        std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default()
    };
    locate_in(&cgroup, &mountinfo, controller, v2_controllers)
}

/// [`locate_controller`] over the files' text (`v2_controllers` reads a v2 mount's root
/// controllers).
pub fn locate_in(
    cgroup: &str,
    mountinfo: &str,
    controller: &str,
    v2_controllers: impl Fn(&Path) -> String,
) -> Result<Hierarchy, String> {
    // cgroup v1 with a hierarchy of the controller: "N:pids:/path" (possibly co-mounted:
    // "N:cpu,cpuacct:/path").
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        if !controllers.split(',').any(|c| c == controller) {
            continue;
        }
        let mount = mounts(mountinfo)
            .find(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == controller));
        let Some(mount) = mount else {
            return Err(format!(
                "the {controller} cgroup controller is in use but not mounted"
            ));
        };
        let rel = Path::new(path).strip_prefix(&mount.root).map_err(|_| {
            format!("this process's {controller} cgroup {path} is outside the mounted tree")
        })?;
        return Ok(Hierarchy {
            parent: mount.point.join(rel),
            v2: false,
        });
    }
    // cgroup v2: the controller must be available at the root of the unified hierarchy.
    let mount = mounts(mountinfo).find(|m| m.fstype == "cgroup2" && m.root == Path::new("/"));
    if let Some(mount) = mount {
        if v2_controllers(&mount.point)
            .split_whitespace()
            .any(|c| c == controller)
        {
            return Ok(Hierarchy {
                parent: mount.point.join("kube-harness"),
                v2: true,
            });
        }
    }
    Err(format!("no {controller} cgroup controller is mounted (neither a cgroup v1 `{controller}` hierarchy nor `{controller}` in the cgroup v2 root's cgroup.controllers)"))
}

struct MountLine {
    root: PathBuf,
    point: PathBuf,
    fstype: String,
    super_options: String,
}

/// The fields of `/proc/self/mountinfo` this module needs (octal escapes decoded).
fn mounts(mountinfo: &str) -> impl Iterator<Item = MountLine> + '_ {
    mountinfo.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        Some(MountLine {
            root: PathBuf::from(unescape(left.get(3)?)),
            point: PathBuf::from(unescape(left.get(4)?)),
            fstype: right.first()?.to_string(),
            super_options: right.get(2).copied().unwrap_or_default().to_string(),
        })
    })
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut rest = b;
    while let Some((&first, tail)) = rest.split_first() {
        let octal = tail
            .get(..3)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (first, octal) {
            (b'\\', Some(o)) => {
                let v = o.iter().fold(0u32, |acc, c| {
                    acc.wrapping_mul(8)
                        .wrapping_add(u32::from(c.wrapping_sub(b'0')))
                });
                out.push(v as u8);
                rest = tail.get(3..).unwrap_or_default();
            }
            _ => {
                out.push(first);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One command's cgroup, open and ready: the command joins it through `procs_w` before exec, the
/// supervisor lists and kills its members through `procs_r` (and `kill`, on cgroup v2).
pub struct Slot {
    dir: PathBuf,
    procs_w: OwnedFd,
    procs_r: OwnedFd,
    kill: Option<OwnedFd>,
    /// cgroup v1: the command's cgroup in the cpu hierarchy and its `cgroup.procs` for writing.
    cpu: Option<(PathBuf, OwnedFd)>,
}

impl Slot {
    pub fn cpu_w(&self) -> Option<RawFd> {
        self.cpu.as_ref().map(|(_, fd)| fd.as_raw_fd())
    }
    pub fn procs_w(&self) -> RawFd {
        self.procs_w.as_raw_fd()
    }
    pub fn procs_r(&self) -> RawFd {
        self.procs_r.as_raw_fd()
    }
    pub fn kill_fd(&self) -> RawFd {
        self.kill.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    /// Whether no process is left in the cgroup (an unreadable list counts as not empty).
    fn is_empty(&self) -> bool {
        let Ok(fd) = self.procs_r.try_clone() else {
            return false;
        };
        let mut file = std::fs::File::from(fd);
        let mut text = String::new();
        file.seek(SeekFrom::Start(0)).is_ok()
            && file.read_to_string(&mut text).is_ok()
            && text.trim().is_empty()
    }
}

/// How a command's CPU is bounded, decided once per sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CpuPlan {
    /// No cpu controller (or it refused): the commands' nice value and `RLIMIT_CPU` only.
    None,
    /// cgroup v2: the pids cgroups have the cpu controller too; `cpu.max` of each.
    V2 { max: String },
    /// cgroup v1: a parallel cgroup under `base` in the cpu hierarchy, with this quota (µs per
    /// 100 ms period; -1: none).
    V1 { base: PathBuf, quota: i64 },
}

/// CFS period of the cpu quota: 100 ms, the kernel's default.
const CPU_PERIOD_US: i64 = 100_000;

/// The sandbox's cgroup and its pool of empty command cgroups.
pub struct Pids {
    base: PathBuf,
    v2: bool,
    max: u64,
    cpu: CpuPlan,
    next: AtomicU64,
    free: Mutex<Vec<Slot>>,
    /// Given back while processes were still in them (a cancelled run whose supervisor is still
    /// killing): reused once empty, removed with the sandbox.
    dirty: Mutex<Vec<Slot>>,
}

/// Sandboxes of this process, for unique cgroup names.
static SANDBOXES: AtomicU64 = AtomicU64::new(0);

impl Pids {
    /// Makes the sandbox's cgroup under `h`, for commands of at most `max` tasks each and at most
    /// `cpu_millicores` of CPU (0: no quota, the weight of one task only).
    pub fn new(h: &Hierarchy, max: u64, cpu_millicores: u64) -> Result<Pids, SandboxError> {
        let err =
            |what: String, e: std::io::Error| SandboxError::PidsCgroup(format!("{what}: {e}"));
        if h.v2 {
            // The v2 parent sits at the hierarchy root, whose pids controller must be enabled for
            // its children (systemd usually has it on).
            let root = h.parent.parent().unwrap_or(Path::new("/"));
            enable(root, "pids")
                .map_err(|e| err(format!("enabling pids in {}", root.display()), e))?;
            mkdir(&h.parent).map_err(|e| err(format!("creating {}", h.parent.display()), e))?;
            enable(&h.parent, "pids")
                .map_err(|e| err(format!("enabling pids in {}", h.parent.display()), e))?;
        }
        sweep(&h.parent, true);
        let n = SANDBOXES.fetch_add(1, Ordering::Relaxed);
        // SAFETY: plain getter.
        let pid = unsafe { libc::getpid() };
        let base = h.parent.join(format!("kube-harness-{pid}-{n}"));
        mkdir(&base).map_err(|e| err(format!("creating {}", base.display()), e))?;
        if h.v2 {
            enable(&base, "pids")
                .map_err(|e| err(format!("enabling pids in {}", base.display()), e))?;
        }
        let cpu = cpu_plan(h, &base, n, cpu_millicores);
        let mut pids = Pids {
            base,
            v2: h.v2,
            max,
            cpu,
            next: AtomicU64::new(0),
            free: Mutex::new(Vec::new()),
            dirty: Mutex::new(Vec::new()),
        };
        // Made once now so that a host that refuses cgroup writes fails here, with a message;
        // one that refuses only the cpu settings loses the cpu bound, not its commands.
        let slot = match pids.make() {
            Ok(slot) => slot,
            Err(_) if pids.cpu != CpuPlan::None => {
                pids.drop_cpu();
                pids.make()?
            }
            Err(e) => return Err(e),
        };
        pids.give_back(slot);
        Ok(pids)
    }

    /// Whether commands get a cpu cgroup (a weight of one task and the quota).
    pub fn cpu_bounded(&self) -> bool {
        self.cpu != CpuPlan::None
    }

    fn drop_cpu(&mut self) {
        if let CpuPlan::V1 { base, .. } = &self.cpu {
            let _ = std::fs::remove_dir(base);
        }
        self.cpu = CpuPlan::None;
    }

    /// An empty command cgroup: a reused one, or a new one.
    pub fn take(&self) -> Result<Slot, SandboxError> {
        if let Some(slot) = self.free.lock().ok().and_then(|mut f| f.pop()) {
            return Ok(slot);
        }
        if let Ok(mut dirty) = self.dirty.lock() {
            if let Some(i) = dirty.iter().position(Slot::is_empty) {
                return Ok(dirty.swap_remove(i));
            }
        }
        self.make()
    }

    /// Returns a cgroup after its command: kept for reuse when it is empty, set aside until it
    /// is otherwise.
    pub fn give_back(&self, slot: Slot) {
        let list = if slot.is_empty() {
            &self.free
        } else {
            &self.dirty
        };
        if let Ok(mut list) = list.lock() {
            list.push(slot);
        }
    }

    fn make(&self) -> Result<Slot, SandboxError> {
        let err = |what: &str, dir: &Path, e: std::io::Error| {
            SandboxError::PidsCgroup(format!("{what} {}: {e}", dir.display()))
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("c{n}");
        let dir = self.base.join(&name);
        mkdir(&dir).map_err(|e| err("creating", &dir, e))?;
        std::fs::write(dir.join("pids.max"), self.max.to_string())
            .map_err(|e| err("setting pids.max of", &dir, e))?;
        let cpu = match &self.cpu {
            CpuPlan::None => None,
            CpuPlan::V2 { max } => {
                std::fs::write(dir.join("cpu.max"), max)
                    .map_err(|e| err("setting cpu.max of", &dir, e))?;
                None
            }
            CpuPlan::V1 { base, quota } => {
                let cpu_dir = base.join(&name);
                mkdir(&cpu_dir).map_err(|e| err("creating", &cpu_dir, e))?;
                std::fs::write(cpu_dir.join("cpu.cfs_quota_us"), quota.to_string())
                    .map_err(|e| err("setting cpu.cfs_quota_us of", &cpu_dir, e))?;
                let w = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(cpu_dir.join("cgroup.procs"))
                    .map(OwnedFd::from)
                    .map_err(|e| err("opening cgroup.procs of", &cpu_dir, e))?;
                Some((cpu_dir, raise(w)?))
            }
        };
        let open = |name: &str, write: bool| {
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .custom_flags(libc::O_CLOEXEC)
                .open(dir.join(name))
                .map(OwnedFd::from)
                .map_err(|e| err(&format!("opening {name} of"), &dir, e))
        };
        let procs_w = raise(open("cgroup.procs", true)?)?;
        let procs_r = raise(open("cgroup.procs", false)?)?;
        let kill = match self.v2 {
            true => open("cgroup.kill", true).ok().map(raise).transpose()?,
            false => None,
        };
        Ok(Slot {
            dir,
            procs_w,
            procs_r,
            kill,
            cpu,
        })
    }
}

/// How this sandbox bounds its commands' CPU, checked by making its cpu cgroup now. Best effort:
/// any refusal leaves the nice value and `RLIMIT_CPU` as the only bounds.
fn cpu_plan(pids: &Hierarchy, base: &Path, n: u64, millicores: u64) -> CpuPlan {
    // µs of CPU per period; -1 is "no quota" in both versions' files ("max" in v2's).
    let quota = match i64::try_from(millicores) {
        Ok(0) | Err(_) => -1,
        Ok(m) => m.saturating_mul(CPU_PERIOD_US) / 1000,
    };
    if pids.v2 {
        let root = pids.parent.parent().unwrap_or(Path::new("/"));
        let on = [root, &pids.parent, base]
            .iter()
            .all(|dir| enable(dir, "cpu").is_ok());
        if !on {
            return CpuPlan::None;
        }
        let max = if quota < 0 {
            format!("max {CPU_PERIOD_US}")
        } else {
            format!("{quota} {CPU_PERIOD_US}")
        };
        return CpuPlan::V2 { max };
    }
    let Ok(h) = locate_controller("cpu") else {
        return CpuPlan::None;
    };
    if h.v2 {
        return CpuPlan::None;
    }
    sweep(&h.parent, false);
    // SAFETY: plain getter.
    let pid = unsafe { libc::getpid() };
    let base = h.parent.join(format!("kube-harness-{pid}-{n}"));
    match mkdir(&base) {
        Ok(()) => CpuPlan::V1 { base, quota },
        Err(_) => CpuPlan::None,
    }
}

impl Drop for Pids {
    fn drop(&mut self) {
        for list in [&self.free, &self.dirty] {
            if let Ok(mut list) = list.lock() {
                for slot in list.drain(..) {
                    let _ = std::fs::remove_dir(&slot.dir);
                    if let Some((cpu_dir, _)) = &slot.cpu {
                        let _ = std::fs::remove_dir(cpu_dir);
                    }
                }
            }
        }
        // Fails (and leaves the directory) only if a command cgroup is still busy.
        let _ = std::fs::remove_dir(&self.base);
        self.drop_cpu();
    }
}

/// Removes the cgroups of sandboxes whose process is gone, killing what is left in them (`kill`):
/// a worker killed with SIGKILL, together with a command's supervisor, leaves the command's tree
/// running in its cgroup. Only the pids hierarchy kills: a worker's cpu cgroup is usually the
/// root one, shared with workers under other pids cgroups whose leftovers are not its own to end
/// (their own next sandbox sweeps them); the cpu sweep removes what is empty. Best effort,
/// bounded.
fn sweep(parent: &Path, kill: bool) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("kube-harness-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let base = entry.path();
        for cmd in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            if cmd.file_type().is_ok_and(|t| t.is_dir()) {
                if kill {
                    empty(&cmd.path());
                }
                let _ = std::fs::remove_dir(cmd.path());
            }
        }
        let _ = std::fs::remove_dir(&base);
    }
}

/// SIGKILLs every process a cgroup lists until it lists none (at most a few hundred rounds).
fn empty(dir: &Path) {
    for _ in 0..500 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<i32> = procs
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: a signal to a pid the cgroup lists (it cannot be recycled while listed).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn mkdir(p: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(p) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// Enables `controller` for the children of the v2 cgroup `dir`.
fn enable(dir: &Path, controller: &str) -> std::io::Result<()> {
    let control = dir.join("cgroup.subtree_control");
    let now = std::fs::read_to_string(&control)?;
    if now.split_whitespace().any(|c| c == controller) {
        return Ok(());
    }
    std::fs::write(control, format!("+{controller}"))
}

/// The supervisor keeps a few descriptors and closes the rest by range: keep these above 10.
fn raise(fd: OwnedFd) -> Result<OwnedFd, SandboxError> {
    super::fd::raise(fd).map_err(|e| SandboxError::io("duplicating a cgroup descriptor", e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 24 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
38 30 0:34 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_pids_nests_under_this_process_cgroup() {
        let cg = "9:name=systemd:/\n8:pids:/kh-test/bound\n0::/\n";
        let h = locate_in(cg, MOUNTINFO, "pids", |_| String::new()).unwrap();
        assert_eq!(h.parent, Path::new("/sys/fs/cgroup/pids/kh-test/bound"));
        assert!(!h.v2);
    }

    #[test]
    fn a_container_mount_of_a_subtree_is_mapped() {
        let mi = "38 30 0:34 /pod1 /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n";
        let h = locate_in("5:pids:/pod1/c\n", mi, "pids", |_| String::new()).unwrap();
        assert_eq!(h.parent, Path::new("/sys/fs/cgroup/pids/c"));
        let e = locate_in("5:pids:/other\n", mi, "pids", |_| String::new()).unwrap_err();
        assert!(e.contains("outside"), "{e}");
    }

    #[test]
    fn v2_needs_pids_at_the_root_and_goes_under_kube_harness() {
        let mi = "41 30 0:37 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let h = locate_in("0::/user.slice/x\n", mi, "pids", |_| {
            "cpu io memory pids".into()
        })
        .unwrap();
        assert_eq!(h.parent, Path::new("/sys/fs/cgroup/kube-harness"));
        assert!(h.v2);
        let e = locate_in("0::/\n", mi, "pids", |_| "cpu memory".into()).unwrap_err();
        assert!(e.contains("no pids cgroup controller"), "{e}");
    }

    #[test]
    fn a_co_mounted_v1_cpu_hierarchy_is_found() {
        let mi = "39 30 0:35 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        let h = locate_in("4:cpu,cpuacct:/user/1\n", mi, "cpu", |_| String::new()).unwrap();
        assert_eq!(h.parent, Path::new("/sys/fs/cgroup/cpu,cpuacct/user/1"));
        assert!(!h.v2);
        // "cpuacct" alone is not "cpu".
        let e = locate_in("4:cpuacct:/\n", mi, "cpu", |_| String::new()).unwrap_err();
        assert!(e.contains("no cpu cgroup controller"), "{e}");
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/a\04"), r"/a\04");
    }
}
