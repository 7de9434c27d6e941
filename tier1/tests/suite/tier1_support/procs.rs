//! The processes a test's commands left behind, found by command line. Shared by the Tier-1
//! tests and the local host's attack tests (`cli/tests/suite/attack_local.rs` includes this file).

/// Pids of the live (not zombie) `sleep N` processes, for these `N`.
pub fn sleeping(seconds: &[&str]) -> Vec<i32> {
    let wanted: Vec<String> = seconds.iter().map(|n| format!("sleep {n}")).collect();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                        let c = String::from_utf8_lossy(&c).replace('\0', " ");
                        wanted.iter().any(|w| c.trim() == w)
                    }) && !process_gone(*pid)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Gone, or a zombie nobody reaped yet.
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}
