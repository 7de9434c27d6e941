//! The seccomp filter, compiled once per sandbox. Default allow; a deny list of syscalls that a
//! file-and-text toolset never needs and that widen the kernel attack surface or escape the other
//! layers. Each entry says why (docs/security-model.md has the table).

use super::SandboxError;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use std::collections::BTreeMap;

/// Syscalls refused with EPERM, with the reason.
pub const DENIED: &[(&str, &str)] = &[
    ("ptrace", "inspect or control other processes"),
    ("process_vm_readv", "read another process's memory"),
    ("process_vm_writev", "write another process's memory"),
    ("kcmp", "compare kernel objects of other processes"),
    ("pidfd_getfd", "steal file descriptors from another process"),
    ("mount", "change the filesystem view"),
    ("umount2", "change the filesystem view"),
    ("pivot_root", "change the filesystem view"),
    ("chroot", "change the filesystem view"),
    ("fsopen", "new mount API"),
    ("fsconfig", "new mount API"),
    ("fsmount", "new mount API"),
    ("fspick", "new mount API"),
    ("move_mount", "new mount API"),
    ("open_tree", "new mount API"),
    ("mount_setattr", "new mount API"),
    (
        "unshare",
        "new namespaces (user namespaces reopen capabilities)",
    ),
    ("setns", "join other namespaces"),
    (
        "clone3",
        "flags live in memory seccomp cannot read; libc falls back to clone (ENOSYS)",
    ),
    ("keyctl", "kernel keyrings hold credentials"),
    ("add_key", "kernel keyrings"),
    ("request_key", "kernel keyrings"),
    ("bpf", "load kernel programs"),
    ("perf_event_open", "kernel profiling, side channels"),
    ("userfaultfd", "a common kernel-exploit primitive"),
    (
        "io_uring_setup",
        "io_uring performs I/O (including sockets) beside seccomp",
    ),
    ("io_uring_enter", "io_uring"),
    ("io_uring_register", "io_uring"),
    (
        "open_by_handle_at",
        "opens files by handle, bypassing path checks",
    ),
    ("name_to_handle_at", "file handles"),
    ("kexec_load", "replace the kernel"),
    ("kexec_file_load", "replace the kernel"),
    ("init_module", "load kernel modules"),
    ("finit_module", "load kernel modules"),
    ("delete_module", "unload kernel modules"),
    ("reboot", "host control"),
    ("swapon", "host control"),
    ("swapoff", "host control"),
    ("acct", "host control"),
    ("quotactl", "host control"),
    ("syslog", "kernel log"),
    ("settimeofday", "host clock"),
    ("clock_settime", "host clock"),
    ("clock_adjtime", "host clock"),
    ("adjtimex", "host clock"),
    ("sethostname", "host identity"),
    ("setdomainname", "host identity"),
    ("iopl", "raw hardware access"),
    ("ioperm", "raw hardware access"),
    ("fanotify_init", "watch the whole filesystem"),
    ("lookup_dcookie", "kernel internals"),
    ("personality", "disables ASLR and other hardening"),
    ("vhangup", "terminal control"),
];

/// Socket families allowed with network off (and also on): local IPC only.
const AF_UNIX: u64 = libc::AF_UNIX as u64;
/// Added when network is on: IPv4, IPv6, and netlink (glibc's getaddrinfo uses it).
const AF_NET: &[u64] = &[
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
    libc::AF_NETLINK as u64,
];

/// Compiles the filter for this CPU.
pub fn build(network: bool) -> Result<BpfProgram, SandboxError> {
    let arch = std::env::consts::ARCH;
    let target = arch
        .try_into()
        .map_err(|_| SandboxError::UnsupportedArch(arch.to_string()))?;
    let err = |e: seccompiler::BackendError| SandboxError::Seccomp(e.to_string());
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (name, _) in DENIED.iter().filter(|(n, _)| *n != "clone3") {
        if let Some(nr) = syscall_number(name) {
            rules.insert(nr, Vec::new());
        }
    }
    // socket(family, …): refuse every family not allowed. One rule whose conditions (ANDed) say
    // "family is none of the allowed ones".
    let mut allowed = vec![AF_UNIX];
    if network {
        allowed.extend_from_slice(AF_NET);
    }
    let conditions = allowed
        .iter()
        .map(|af| SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *af))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    rules.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(conditions).map_err(err)?],
    );
    // clone(flags, …) with any namespace flag: same reason as unshare.
    let clone_rules = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWCGROUP,
    ]
    .iter()
    .map(|f| {
        let f = *f as u64;
        SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f)
            .and_then(|c| SeccompRule::new(vec![c]))
    })
    .collect::<Result<Vec<_>, _>>()
    .map_err(err)?;
    rules.insert(libc::SYS_clone, clone_rules);

    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target,
    )
    .map_err(err)?;
    let mut program: BpfProgram = filter.try_into().map_err(err)?;
    insert_prefix(&mut program, arch == "x86_64");
    Ok(program)
}

/// Instructions seccompiler cannot express, inserted right after its architecture check (the
/// first three instructions): clone3 gets ENOSYS (its flags live in memory the filter cannot
/// read, and libc falls back to clone only on ENOSYS), and on x86_64 every x32 syscall
/// (number | 0x4000_0000, same audit arch) gets ENOSYS, since the per-number rules would miss it.
fn insert_prefix(program: &mut BpfProgram, x86_64: bool) {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x05 | 0x10;
    const JGE_K: u16 = 0x05 | 0x30;
    const RET_K: u16 = 0x06;
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let x32 = if x86_64 { 0x4000_0000 } else { u32::MAX };
    let insns = [
        insn(LD_W_ABS, 0, 0, 0), // accumulator = seccomp_data.nr
        insn(JGE_K, 1, 0, x32),
        insn(JEQ_K, 0, 1, libc::SYS_clone3 as u32),
        insn(RET_K, 0, 0, enosys),
    ];
    let at = 3.min(program.len());
    program.splice(at..at, insns);
}

/// Syscall numbers by name for this architecture (the ones `DENIED` lists).
fn syscall_number(name: &str) -> Option<i64> {
    use libc::*;
    Some(match name {
        "ptrace" => SYS_ptrace,
        "process_vm_readv" => SYS_process_vm_readv,
        "process_vm_writev" => SYS_process_vm_writev,
        "kcmp" => SYS_kcmp,
        "pidfd_getfd" => SYS_pidfd_getfd,
        "mount" => SYS_mount,
        "umount2" => SYS_umount2,
        "pivot_root" => SYS_pivot_root,
        "chroot" => SYS_chroot,
        "fsopen" => SYS_fsopen,
        "fsconfig" => SYS_fsconfig,
        "fsmount" => SYS_fsmount,
        "fspick" => SYS_fspick,
        "move_mount" => SYS_move_mount,
        "open_tree" => SYS_open_tree,
        "mount_setattr" => SYS_mount_setattr,
        "unshare" => SYS_unshare,
        "setns" => SYS_setns,
        "clone3" => SYS_clone3,
        "keyctl" => SYS_keyctl,
        "add_key" => SYS_add_key,
        "request_key" => SYS_request_key,
        "bpf" => SYS_bpf,
        "perf_event_open" => SYS_perf_event_open,
        "userfaultfd" => SYS_userfaultfd,
        "io_uring_setup" => SYS_io_uring_setup,
        "io_uring_enter" => SYS_io_uring_enter,
        "io_uring_register" => SYS_io_uring_register,
        "open_by_handle_at" => SYS_open_by_handle_at,
        "name_to_handle_at" => SYS_name_to_handle_at,
        "kexec_load" => SYS_kexec_load,
        "kexec_file_load" => SYS_kexec_file_load,
        "init_module" => SYS_init_module,
        "finit_module" => SYS_finit_module,
        "delete_module" => SYS_delete_module,
        "reboot" => SYS_reboot,
        "swapon" => SYS_swapon,
        "swapoff" => SYS_swapoff,
        "acct" => SYS_acct,
        "quotactl" => SYS_quotactl,
        "syslog" => SYS_syslog,
        "settimeofday" => SYS_settimeofday,
        "clock_settime" => SYS_clock_settime,
        "clock_adjtime" => SYS_clock_adjtime,
        "adjtimex" => SYS_adjtimex,
        "sethostname" => SYS_sethostname,
        "setdomainname" => SYS_setdomainname,
        #[cfg(target_arch = "x86_64")]
        "iopl" => SYS_iopl,
        #[cfg(target_arch = "x86_64")]
        "ioperm" => SYS_ioperm,
        "fanotify_init" => SYS_fanotify_init,
        "lookup_dcookie" => SYS_lookup_dcookie,
        "personality" => SYS_personality,
        "vhangup" => SYS_vhangup,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_denied_syscall_has_a_number_here() {
        for (name, why) in DENIED {
            assert!(!why.is_empty());
            if cfg!(target_arch = "x86_64") {
                assert!(syscall_number(name).is_some(), "{name}");
            }
        }
    }

    #[test]
    fn filter_compiles_both_ways() {
        let off = build(false).unwrap();
        let on = build(true).unwrap();
        assert!(!off.is_empty() && !on.is_empty());
        assert_ne!(off, on);
    }
}
