//! CPU time and memory of a process on this host, from /proc: the test cluster's containers are
//! host processes, so the operator's pod is one of them (found by its pod UID in /proc/*/cgroup).

use std::path::Path;

/// Clock ticks per second of /proc/<pid>/stat: USER_HZ, 100 on every Linux architecture this
/// project builds for (it is part of the kernel ABI, independent of CONFIG_HZ).
const USER_HZ: f64 = 100.0;

/// One reading of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcSample {
    /// Resident set now (VmRSS).
    pub rss_bytes: u64,
    /// Highest resident set since the process started (VmHWM).
    pub peak_rss_bytes: u64,
    /// User + system CPU of all its threads, living and ended.
    pub cpu_seconds: f64,
}

/// Reads `/proc/<pid>`; `None` when the process is gone or unreadable.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let dir = Path::new("/proc").join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    Some(ProcSample {
        rss_bytes: status_kib(&status, "VmRSS:")? * 1024,
        peak_rss_bytes: status_kib(&status, "VmHWM:")? * 1024,
        cpu_seconds: stat_cpu_seconds(&stat)?,
    })
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2) is
/// in parentheses and may hold spaces, so fields are counted after its closing parenthesis.
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): utime is field 14, index 11 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// The main process of pod `uid`'s container named by `comm` (the executable's name, as in
/// /proc/<pid>/comm): a process whose cgroup path names the pod (`pod<uid>`, or the systemd
/// driver's `pod<uid with underscores>`).
pub fn find_pod_process(uid: &str, comm: &str) -> Option<u32> {
    let dashed = format!("pod{uid}");
    let underscored = format!("pod{}", uid.replace('-', "_"));
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cgroup) = std::fs::read_to_string(entry.path().join("cgroup")) else {
            continue;
        };
        if !(cgroup.contains(&dashed) || cgroup.contains(&underscored)) {
            continue;
        }
        let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if name.trim() == comm {
            found.push(pid);
        }
    }
    // The container's first process (its children, if any, have higher pids).
    found.into_iter().min()
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_comes_from_utime_and_stime_after_a_command_name_with_spaces() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1 1 1";
        assert_eq!(stat_cpu_seconds(stat), Some(3.0));
        assert_eq!(stat_cpu_seconds("42 (x) S 1"), None);
    }

    #[test]
    fn this_process_reads_back_with_a_peak_at_least_its_resident_set() {
        let s = sample(std::process::id()).expect("own /proc entry");
        assert!(s.rss_bytes > 0 && s.peak_rss_bytes >= s.rss_bytes, "{s:?}");
        assert!(sample(u32::MAX).is_none());
        assert!(find_pod_process("00000000-0000-0000-0000-000000000000", "x").is_none());
    }
}
