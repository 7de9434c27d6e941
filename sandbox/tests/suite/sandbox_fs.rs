//! Landlock (plus, on the local host, the mount namespace) confines the filesystem: read-write
//! only on writable mounts, read-only on read-only mounts and dynamic read-only prefixes,
//! nothing outside; planted symlinks do not help. The tests run as root: uid 0 in the sandbox is
//! still confined.

use super::util::*;
use kube_harness_sandbox::Tier0Sandbox;
use std::path::{Path, PathBuf};

/// Both presentations over one data dir, with `/persistent/company` read-only, plus a sibling
/// "other session" directory holding a secret.
struct Fixture {
    data: Data,
    other: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let data = Data::new();
        std::fs::create_dir_all(data.path("persistent/company")).unwrap();
        std::fs::write(data.path("persistent/company/kb.md"), "kb").unwrap();
        std::fs::create_dir_all(data.path("persistent/user")).unwrap();
        std::fs::write(data.path(".agents/skill.md"), "skill").unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("secret.txt"), "other-session-secret").unwrap();
        Fixture { data, other }
    }

    /// (sandbox, how the script names each mount: session, agents, persistent)
    fn sandboxes(&self) -> Vec<(Tier0Sandbox, [PathBuf; 3])> {
        let ns = ns_sandbox(&self.data, false, vec!["/persistent/company".into()]);
        let direct = direct_sandbox(
            &self.data,
            false,
            vec![self.data.path("persistent/company")],
        );
        vec![
            (
                ns,
                ["/session".into(), "/.agents".into(), "/persistent".into()],
            ),
            (
                direct,
                [
                    self.data.path("session"),
                    self.data.path(".agents"),
                    self.data.path("persistent"),
                ],
            ),
        ]
    }
}

#[test]
fn writes_are_confined_to_writable_mounts() {
    let fx = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    let _ = std::fs::remove_file("/tmp/kh-evil-host");
    for (sb, [session, agents, persistent]) in fx.sandboxes() {
        let script = format!(
            r#"
w() {{ if ( echo x > "$1" ) 2>/dev/null; then echo "WROTE $1"; else echo "denied $1"; fi; }}
w {s}/ok.txt
w {p}/user/notes.md
w {a}/evil.md
w {p}/company/kb.md
w {p}/company/new.md
w /etc/kh-evil
w {o}/evil
w {data}/evil
( echo x > /tmp/kh-evil-host ) 2>/dev/null
mkdir {p}/company/sub 2>/dev/null && echo "WROTE mkdir" || echo "denied mkdir"
rm -f {p}/company/kb.md 2>/dev/null; test -e {p}/company/kb.md && echo "kept kb" || echo "REMOVED kb"
mv {p}/company/kb.md {s}/stolen 2>/dev/null && echo "MOVED kb" || echo "denied mv"
truncate -s 0 {p}/company/kb.md 2>/dev/null && echo "TRUNCATED" || echo "denied truncate"
"#,
            s = session.display(),
            p = persistent.display(),
            a = agents.display(),
            o = outside.path().display(),
            data = fx.data.root().display(),
        );
        let o = run(&sb, &session, &script);
        let out = text(&o.stdout);
        assert!(
            out.contains(&format!("WROTE {}/ok.txt", session.display())),
            "{}",
            show(&o)
        );
        assert!(
            out.contains("WROTE") && out.contains("/user/notes.md"),
            "{}",
            show(&o)
        );
        let wrote: Vec<&str> = out.lines().filter(|l| l.starts_with("WROTE")).collect();
        assert_eq!(
            wrote.len(),
            2,
            "only the two writable targets: {}",
            show(&o)
        );
        assert!(
            out.contains("kept kb") && out.contains("denied mv") && out.contains("denied truncate"),
            "{}",
            show(&o)
        );
        assert!(out.contains("denied mkdir"), "{}", show(&o));
        assert_eq!(
            std::fs::read_to_string(fx.data.path("persistent/company/kb.md")).unwrap(),
            "kb"
        );
        assert!(!fx.data.path(".agents/evil.md").exists());
        assert!(!Path::new("/etc/kh-evil").exists());
        assert!(!outside.path().join("evil").exists());
        assert!(!Path::new("/tmp/kh-evil-host").exists());
        assert!(!fx.data.path("evil").exists());
    }
}

#[test]
fn reads_outside_the_mount_table_fail() {
    let fx = Fixture::new();
    std::fs::create_dir_all("/root").ok();
    for (sb, [session, agents, _]) in fx.sandboxes() {
        let script = format!(
            r#"
cat {a}/skill.md
ls /root >/dev/null 2>&1 && echo "LISTED root" || echo "denied root"
cat /etc/shadow >/dev/null 2>&1 && echo "READ shadow" || echo "denied shadow"
cat {o}/secret.txt 2>/dev/null || echo "denied other"
ls {data} >/dev/null 2>&1 && echo "LISTED data dir" || echo "denied data dir"
head -c 20 /etc/passwd >/dev/null && echo "passwd readable"
"#,
            a = agents.display(),
            o = fx.other.path().display(),
            data = fx.data.root().display(),
        );
        let o = run(&sb, &session, &script);
        let out = text(&o.stdout);
        assert!(out.contains("skill"), "{}", show(&o));
        for want in [
            "denied root",
            "denied shadow",
            "denied other",
            "denied data dir",
            "passwd readable",
        ] {
            assert!(out.contains(want), "missing {want}: {}", show(&o));
        }
        assert!(!out.contains("other-session-secret"), "{}", show(&o));
    }
}

#[test]
fn planted_symlinks_cannot_reach_outside() {
    let fx = Fixture::new();
    for (sb, [session, _, persistent]) in fx.sandboxes() {
        // Planted from inside the sandbox…
        let script = format!(
            r#"
ln -s /etc {s}/etc-link
ln -s {o} {s}/other-link
ln -s {p}/company {s}/company-link
cat {s}/etc-link/shadow >/dev/null 2>&1 && echo "READ shadow" || echo "denied shadow"
cat {s}/other-link/secret.txt 2>/dev/null || echo "denied other read"
( echo pwned > {s}/other-link/pwned ) 2>/dev/null && echo "WROTE other" || echo "denied other write"
( echo pwned > {s}/etc-link/kh-pwned ) 2>/dev/null && echo "WROTE etc" || echo "denied etc write"
( echo pwned > {s}/company-link/kb.md ) 2>/dev/null && echo "WROTE company" || echo "denied company write"
"#,
            s = session.display(),
            p = persistent.display(),
            o = fx.other.path().display(),
        );
        let o = run(&sb, &session, &script);
        let out = text(&o.stdout);
        for want in [
            "denied shadow",
            "denied other read",
            "denied other write",
            "denied etc write",
            "denied company write",
        ] {
            assert!(out.contains(want), "missing {want}: {}", show(&o));
        }
        assert!(!out.contains("other-session-secret"));
        assert!(!fx.other.path().join("pwned").exists());
        assert!(!Path::new("/etc/kh-pwned").exists());
        assert_eq!(
            std::fs::read_to_string(fx.data.path("persistent/company/kb.md")).unwrap(),
            "kb"
        );
        for l in ["etc-link", "other-link", "company-link"] {
            std::fs::remove_file(fx.data.path("session").join(l)).unwrap();
        }
    }
    // …and planted by the host before the sandbox is built (a symlink inside a writable mount
    // with read-only prefixes must not be granted as if it were a directory of the mount).
    std::os::unix::fs::symlink(fx.other.path(), fx.data.path("persistent/host-link")).unwrap();
    for (sb, [session, _, persistent]) in fx.sandboxes() {
        let script = format!(
            "cat {p}/host-link/secret.txt 2>/dev/null || echo denied-read; ( echo x > {p}/host-link/w ) 2>/dev/null && echo WROTE || echo denied-write",
            p = persistent.display()
        );
        let o = run(&sb, &session, &script);
        let out = text(&o.stdout);
        assert!(
            out.contains("denied-read") && out.contains("denied-write"),
            "{}",
            show(&o)
        );
        assert!(!fx.other.path().join("w").exists());
    }
}

#[test]
fn nothing_in_the_workspace_executes_and_root_is_powerless() {
    let fx = Fixture::new();
    for (sb, [session, _, _]) in fx.sandboxes() {
        let script = format!(
            r#"
cp "$(command -v ls)" {s}/myls && chmod +x {s}/myls && {s}/myls / >/dev/null 2>&1 && echo "EXECUTED copy" || echo "denied copy exec"
printf '#!/bin/sh\necho script-ran\n' > {s}/x.sh && chmod +x {s}/x.sh
{s}/x.sh 2>/dev/null || echo "denied script exec"
bash {s}/x.sh
id -u
grep -E '^(NoNewPrivs|Seccomp|CapEff|CapPrm|CapBnd):' /proc/self/status
"#,
            s = session.display()
        );
        let o = run(&sb, &session, &script);
        let out = text(&o.stdout);
        assert!(out.contains("denied copy exec"), "{}", show(&o));
        // Namespace mode: data mounts are noexec, so even the loader cannot map a copied binary
        // (Direct mode cannot stop that; docs/security-model.md says so).
        if session == Path::new("/session") {
            let loader = ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
                .into_iter()
                .find(|l| Path::new(l).exists());
            if let Some(loader) = loader {
                let o = run(
                    &sb,
                    &session,
                    &format!("{loader} /session/myls /session; echo rc=$?"),
                );
                assert!(!text(&o.stdout).contains("rc=0"), "{}", show(&o));
                assert!(
                    text(&o.stderr).contains("failed to map segment"),
                    "{}",
                    show(&o)
                );
            }
        }
        assert!(out.contains("denied script exec"), "{}", show(&o));
        assert!(
            out.contains("script-ran"),
            "bash reads scripts: {}",
            show(&o)
        );
        assert!(out.contains("NoNewPrivs:\t1"), "{}", show(&o));
        assert!(out.contains("Seccomp:\t2"), "{}", show(&o));
        // uid 0 also loses its bounding set (and SECBIT_NOROOT keeps exec from restoring
        // capabilities); other users have none to begin with.
        let caps: &[&str] = if unsafe { libc::geteuid() } == 0 {
            &["CapEff", "CapPrm", "CapBnd"]
        } else {
            &["CapEff", "CapPrm"]
        };
        for cap in caps {
            assert!(
                out.contains(&format!("{cap}:\t0000000000000000")),
                "{cap}: {}",
                show(&o)
            );
        }
    }
}

#[test]
fn dangerous_syscalls_are_refused_even_for_uid_0() {
    let fx = Fixture::new();
    let py = r#"
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def check(name, rc):
    print(name, "REFUSED" if rc == -1 and ctypes.get_errno() in (errno.EPERM, errno.ENOSYS) else "ALLOWED rc=%d errno=%d" % (rc, ctypes.get_errno()))
check("unshare", libc.unshare(0x10000000))
check("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
check("ptrace", libc.ptrace(16, 1, None, None))
check("keyctl", libc.syscall(250, 0, 0, 0, 0, 0))
check("bpf", libc.syscall(321, 0, 0, 0))
check("chroot", libc.chroot(b"/tmp"))
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM); print("inet ALLOWED")
except OSError as e:
    print("inet REFUSED", e.errno)
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print("packet ALLOWED")
except OSError as e:
    print("packet REFUSED", e.errno)
try:
    os.kill(1, 0); print("signal-init ALLOWED")
except OSError as e:
    print("signal-init REFUSED", e.errno)
"#;
    for (sb, [session, _, _]) in fx.sandboxes() {
        let o = run(&sb, &session, &format!("python3 - <<'EOF'\n{py}\nEOF"));
        let out = text(&o.stdout);
        assert_eq!(o.exit_code, 0, "{}", show(&o));
        for name in [
            "unshare", "mount", "ptrace", "keyctl", "bpf", "chroot", "inet", "packet",
        ] {
            assert!(
                out.contains(&format!("{name} REFUSED")),
                "{name}: {}",
                show(&o)
            );
        }
        // Landlock ABI >= 6 scopes signals: processes outside the sandbox (PID 1, the worker, the
        // supervisor) cannot be signalled, even by uid 0.
        let abi = kube_harness_sandbox::probe().landlock_abi.unwrap_or(0);
        if abi >= 6 {
            assert!(out.contains("signal-init REFUSED"), "{}", show(&o));
            let o = run(&sb, &session, "kill -9 $PPID; echo rc=$?");
            assert!(
                text(&o.stdout).contains("rc=1"),
                "the supervisor survives: {}",
                show(&o)
            );
        }
        assert!(!out.contains("ALLOWED"), "{}", show(&o));
    }
}

/// Files move and link between directories of the workspace, between writable mounts and through
/// /tmp, as in any shell (landlock's "refer" right: each command's own landlock domain must not
/// take it away).
#[test]
fn files_move_and_link_across_directories() {
    let data = Data::new();
    for (mode, sb, s, p) in [
        (
            "namespace",
            ns_sandbox(&data, false, vec![]),
            PathBuf::from("/session"),
            PathBuf::from("/persistent"),
        ),
        (
            "direct",
            direct_sandbox(&data, false, vec![]),
            data.path("session"),
            data.path("persistent"),
        ),
    ] {
        let script = format!(
            "cd {s} && mkdir -p a b && echo x > a/f && mv a/f b/f && ln b/f a/g && cat a/g && \
             mv b {p}/b && cat {p}/b/f && mv {p}/b $TMPDIR/b && mv $TMPDIR/b ./b2 && cat b2/f",
            s = s.display(),
            p = p.display()
        );
        let o = rt().block_on(sb.run(&inv(&script, &s)));
        assert_eq!(
            (o.exit_code, text(&o.stdout)),
            (0, "x\nx\nx\n".to_string()),
            "{mode}: {}",
            show(&o)
        );
        for d in ["session/a", "session/b2"] {
            std::fs::remove_dir_all(data.path(d)).unwrap();
        }
    }
}
