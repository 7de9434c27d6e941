//! What the seccomp filter costs the syscalls it checks, ours (`seccomp::build`, hand-assembled)
//! against the same policy built by seccompiler, and against no filter: each installed in a
//! forked child, which then opens and closes /dev/null in a loop (openat is the checked syscall
//! programs make most: its mode is inspected for setuid bits) or execs a program. Since the
//! forker installs the filter once per sandbox, its install cost no longer matters; this does.
//!
//! seccompiler has one match action per filter, so the policy takes two filters (EPERM, and
//! ENOSYS for clone3/pidfd_open/openat2), and it cannot express the x32 rule (any syscall number
//! with bit 30 set is refused by ours; seccompiler only matches exact numbers).
//!
//! Run: `cargo run --release -p kube-harness-sandbox --example seccomp_cost` (any user).

use kube_harness_sandbox::seccomp::{self, DENIED, ENOSYS_DENIED, NO_SETID_MODE, SELF_ONLY};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::time::Instant;

type Program = Vec<libc::sock_filter>;

/// The policy of `seccomp.rs` in seccompiler's terms (network off).
fn seccompiler_filters() -> (Program, Program) {
    let arch: TargetArch = std::env::consts::ARCH.try_into().unwrap();
    let cond = |arg: u8, op: SeccompCmpOp, v: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, v).unwrap()
    };
    let rule = |c: Vec<SeccompCondition>| SeccompRule::new(c).unwrap();
    let (mut eperm, mut enosys) = (BTreeMap::new(), BTreeMap::new());
    for (name, _) in DENIED {
        let Some(nr) = seccomp::syscall_number(name) else {
            continue;
        };
        if ENOSYS_DENIED.contains(name) {
            enosys.insert(nr, vec![]);
        } else {
            eperm.insert(nr, vec![]);
        }
    }
    for (name, _) in SELF_ONLY {
        let nr = seccomp::syscall_number(name).unwrap();
        eperm.insert(nr, vec![rule(vec![cond(0, SeccompCmpOp::Ne, 0)])]);
    }
    for (name, arg) in NO_SETID_MODE {
        let Some(nr) = seccomp::syscall_number(name) else {
            continue;
        };
        let bit = |b: u64| rule(vec![cond(*arg as u8, SeccompCmpOp::MaskedEq(b), b)]);
        eperm.insert(
            nr,
            vec![bit(libc::S_ISUID as u64), bit(libc::S_ISGID as u64)],
        );
    }
    let not = |arg: u8, v: u64| rule(vec![cond(arg, SeccompCmpOp::Ne, v)]);
    eperm.insert(libc::SYS_setpriority, vec![not(0, 0), not(1, 0)]);
    eperm.insert(libc::SYS_ioprio_set, vec![not(0, 1), not(1, 0)]);
    eperm.insert(
        libc::SYS_socket,
        vec![rule(vec![cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)])],
    );
    let namespaces = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWCGROUP,
    ];
    eperm.insert(
        libc::SYS_clone,
        namespaces
            .iter()
            .map(|f| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*f as u64), *f as u64)]))
            .collect(),
    );
    let compile = |rules, errno: i32| -> Program {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .unwrap();
        let program: BpfProgram = filter.try_into().unwrap();
        program
            .into_iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect()
    };
    (compile(eperm, libc::EPERM), compile(enosys, libc::ENOSYS))
}

fn install(filters: &[Program]) {
    for p in filters {
        let prog = libc::sock_fprog {
            len: p.len() as u16,
            filter: p.as_ptr() as *mut libc::sock_filter,
        };
        unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            assert_eq!(
                libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog),
                0
            );
        }
    }
}

/// Nanoseconds per openat+close, in a child with `filters` installed.
fn opens(filters: &[Program], n: usize) -> f64 {
    let mut pipe = [0; 2];
    unsafe { libc::pipe(pipe.as_mut_ptr()) };
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        install(filters);
        let t = Instant::now();
        for _ in 0..n {
            unsafe {
                let fd = libc::openat(
                    libc::AT_FDCWD,
                    c"/dev/null".as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                );
                libc::close(fd);
            }
        }
        let ns = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        unsafe {
            libc::write(pipe[1], (&ns as *const f64).cast(), 8);
            libc::_exit(0)
        }
    }
    let mut ns = 0f64;
    unsafe {
        libc::read(pipe[0], (&mut ns as *mut f64).cast(), 8);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
    ns
}

/// Milliseconds for a program to run to its end, with `filters` installed before its exec.
fn exec(filters: &[Program], argv: &[&std::ffi::CStr]) -> f64 {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let t = Instant::now();
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        install(filters);
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            libc::dup2(null, 1);
            libc::execv(ptrs[0], ptrs.as_ptr());
            libc::_exit(127)
        }
    }
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    t.elapsed().as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let ours = seccomp::build(false).unwrap();
    let (eperm, enosys) = seccompiler_filters();
    println!(
        "instructions: ours {}; seccompiler {} + {} (two filters); load average {}",
        ours.len(),
        eperm.len(),
        enosys.len(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let variants: [(&str, Vec<Program>); 3] = [
        ("no filter", vec![]),
        ("ours", vec![ours]),
        ("seccompiler", vec![eperm, enosys]),
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for _ in 0..9 {
        for (i, (_, f)) in variants.iter().enumerate() {
            results[i].push(opens(f, 200_000));
        }
    }
    for ((name, _), r) in variants.iter().zip(results) {
        println!(
            "{name:<12} openat+close: median {:.0} ns (9 runs, interleaved)",
            median(r)
        );
    }
    let programs: [&[&std::ffi::CStr]; 2] = [
        &[c"/usr/bin/find", c"/usr/lib/python3", c"-name", c"x"],
        &[c"/usr/bin/python3", c"-c", c"import json, sqlite3, ssl"],
    ];
    for argv in programs {
        let mut results: Vec<Vec<f64>> = vec![Vec::new(); 3];
        for _ in 0..31 {
            for (i, (_, f)) in variants.iter().enumerate() {
                results[i].push(exec(f, argv));
            }
        }
        let shown: Vec<_> = argv.iter().map(|a| a.to_string_lossy()).collect();
        for ((name, _), r) in variants.iter().zip(results) {
            println!(
                "{name:<12} {}: median {:.2} ms (31 runs, interleaved)",
                shown.join(" "),
                median(r)
            );
        }
    }
}
