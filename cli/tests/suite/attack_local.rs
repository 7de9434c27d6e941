//! The attacker's suite against the real `kube-harness local exec` binary (the README's embedded
//! default), as root and as an unprivileged user: state carried between commands, the
//! emulation-gap retry under a deny policy, a fork bomb (issue 12, failures 4, 5 and 6).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::procs::sleeping;
use super::support::bound::Bound;
use super::support::{exec, kh, show, text};

#[test]
fn start_up_code_is_never_carried_to_the_next_command() {
    let tmp = tempfile::tempdir().unwrap();
    let first = exec(
        tmp.path(),
        &[],
        r#"echo 'echo PWNED-$0' > /session/e.sh
export BASH_ENV=/session/e.sh ENV=/session/e.sh PROMPT_COMMAND='echo PC' SHELLOPTS=xtrace:errexit
export PS4='$(echo PS4-RAN >&2) ' BASHOPTS=extdebug LD_PRELOAD=/session/x.so GCONV_PATH=/session
export NODE_OPTIONS='--require /session/x.js' IFS=: KEEP=kept
export PYTHONPATH=/session PERL5OPT=-Mevil PERL5LIB=/session RUBYOPT=-revil MAKEFLAGS=--eval=x
export GLIBC_TUNABLES=x GIT_TEMPLATE_DIR=/session XDG_CONFIG_HOME=/session
f() { echo F; }; export -f f
echo first"#,
    );
    assert_eq!(
        (first.status.code(), text(&first.stdout)),
        (Some(0), "first\n".into()),
        "{}",
        show(&first)
    );
    let second = exec(
        tmp.path(),
        &[],
        "echo second; bash -c 'echo nested'; env | grep -cE '^(BASH_ENV|ENV|PROMPT_COMMAND|SHELLOPTS|BASHOPTS|PS4|LD_PRELOAD|GCONV_PATH|NODE_OPTIONS|IFS|BASH_FUNC_|PYTHONPATH|PERL5|RUBYOPT|MAKEFLAGS|GLIBC_TUNABLES|GIT_TEMPLATE_DIR|XDG_CONFIG_HOME)'; echo $KEEP",
    );
    assert_eq!(
        (second.status.code(), text(&second.stdout)),
        (Some(0), "second\nnested\n0\nkept\n".into()),
        "{}",
        show(&second)
    );
    assert!(
        !text(&second.stderr).contains("PS4-RAN"),
        "{}",
        show(&second)
    );
    // The same holds for a command escalated to Tier-1 (the local host's toolchain tier).
    let third = exec(
        tmp.path(),
        &[],
        "git --version >/dev/null; echo tier1; bash -c 'echo nested'",
    );
    assert_eq!(
        (third.status.code(), text(&third.stdout)),
        (Some(0), "tier1\nnested\n".into()),
        "{}",
        show(&third)
    );
}

/// Each way a Tier-0 tool can run another program; on Tier-0 they fail with the shell's
/// "not found", which used to make the runtime retry the whole script on Tier-1.
const HIDDEN_GIT: &[&str] = &[
    r#"awk 'BEGIN{system("git --version")}'"#,
    r#"python3 -c 'import os; os.system("git --version")'"#,
    r#"echo x | sed '1e git --version'"#,
    r#"tar -cf /tmp/t.tar --checkpoint=1 --checkpoint-action=exec='git --version' /session/a"#,
    r#"sqlite3 :memory: '.shell git --version'"#,
];

#[test]
fn a_denied_command_hidden_in_a_tool_is_refused_on_every_tier() {
    let tmp = tempfile::tempdir().unwrap();
    exec(tmp.path(), &[], "echo a > /session/a");
    for script in HIDDEN_GIT {
        let o = exec(tmp.path(), &["--deny", "git"], script);
        assert_eq!(o.status.code(), Some(126), "{script}: {}", show(&o));
        assert!(
            !text(&o.stdout).contains("git version"),
            "{script}: {}",
            show(&o)
        );
        assert!(text(&o.stderr).contains("git"), "{script}: {}", show(&o));
    }
    // Without the deny policy the same scripts escalate and git runs on Tier-1.
    let o = exec(tmp.path(), &[], HIDDEN_GIT[0]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(text(&o.stdout).contains("git version"), "{}", show(&o));
}

/// Second outside attack: with `--deny git`, scripts whose command the classifier cannot name
/// escalated, and git ran on Tier-1 (the tier with every program).
const UNNAMED_GIT: &[&str] = &[
    "x=git; $x --version",
    "echo git --version | bash",
    "bash <(echo git --version)",
    "f() { \"$@\"; }; f git --version",
    "g{i,}t --version",
];

#[test]
fn a_command_the_classifier_cannot_name_does_not_reach_tier1_under_a_deny_policy() {
    let tmp = tempfile::tempdir().unwrap();
    for script in UNNAMED_GIT {
        let o = exec(tmp.path(), &["--deny", "git"], script);
        assert_eq!(o.status.code(), Some(126), "{script}: {}", show(&o));
        assert!(
            !text(&o.stdout).contains("git version"),
            "{script}: {}",
            show(&o)
        );
        assert!(
            text(&o.stderr).contains("fail closed"),
            "{script}: {}",
            show(&o)
        );
    }
    // Without a policy they escalate as before.
    let o = exec(tmp.path(), &[], UNNAMED_GIT[0]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(text(&o.stdout).contains("git version"), "{}", show(&o));
}

#[test]
fn a_forged_gap_does_not_smuggle_a_denied_command_to_tier1() {
    let tmp = tempfile::tempdir().unwrap();
    // The real "git: not found" is hidden and a harmless gap forged: the retry on Tier-1 would
    // run git unseen.
    let forged = r#"python3 -c 'import os, sys; os.system("git --version > /session/ran 2>&1"); sys.stderr.write("bash: jq: command not found\n")'"#;
    let o = exec(tmp.path(), &["--deny", "git"], forged);
    assert_not_retried(tmp.path(), &o);
    assert!(
        tmp.path()
            .join(".little-harness/sessions/s1/session/ran")
            .exists(),
        "the script ran on Tier-0 (and found no git there)"
    );
    // Two gaps, the first forged: every gap line is checked.
    let two = r#"awk 'BEGIN{print "bash: jq: command not found" > "/dev/stderr"; system("git --version")}'"#;
    let o = exec(tmp.path(), &["--deny", "git"], two);
    assert_eq!(o.status.code(), Some(126), "{}", show(&o));
    assert!(!text(&o.stdout).contains("git version"), "{}", show(&o));
}

/// A fork bomb through the real binary, as root (a pids cgroup per command bounds it) and as an
/// unprivileged uid (RLIMIT_NPROC does): the command returns, nothing of the bomb is left, and
/// the outer bound this test puts around it never had to refuse a fork. Root only: the bound needs
/// a cgroup, and switching uid needs root.
#[test]
fn a_fork_bomb_through_the_cli_dies_whole() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let bound = Bound::new("bomb", 1500);
    for uid in [None, Some(65533)] {
        let dir = tempfile::tempdir().unwrap();
        if let Some(uid) = uid {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid)).unwrap();
        }
        let mut cmd = kh(dir.path());
        cmd.args([
            "local",
            "exec",
            "--session",
            "s1",
            "--",
            "b(){ b|b& }; b; sleep 2; echo done",
        ])
        .env("HOME", dir.path());
        bound.hold(&mut cmd, uid);
        let started = Instant::now();
        let o = cmd.output().unwrap();
        assert_eq!(
            (o.status.code(), text(&o.stdout)),
            (Some(0), "done\n".into()),
            "uid {uid:?}: {}",
            show(&o)
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "uid {uid:?}: {:?}",
            started.elapsed()
        );
        // Supervisors finish exiting in the background after they report: give them 3 s. A
        // process of the bomb would still be there.
        let deadline = Instant::now() + Duration::from_secs(3);
        let (left, refused) = loop {
            let (left, refused) = bound.census();
            if left.is_empty() || Instant::now() > deadline {
                break (left, refused);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(
            left,
            Vec::<String>::new(),
            "uid {uid:?}: bomb processes left"
        );
        assert_eq!(refused, 0, "uid {uid:?}: the bomb reached the outer bound");
    }
}

/// File sizes are the command's to choose: a sparse terabyte costs nothing to make. The host
/// must not read it whole to hash it (that took minutes per turn, beyond any timeout), and a
/// handoff of it is refused at its limit instead of read.
#[test]
fn sparse_giants_cost_the_host_nothing_to_track_and_are_refused_at_handoff() {
    let tmp = tempfile::tempdir().unwrap();
    let events = |o: &std::process::Output| -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["events"].as_array().unwrap().clone()
    };
    let file_events = |evs: &[serde_json::Value], ty: &str| -> Vec<String> {
        evs.iter()
            .filter(|e| e["type"] == ty)
            .map(|e| e["data"]["path"].as_str().unwrap().to_string())
            .collect()
    };
    let started = Instant::now();
    let o = exec(
        tmp.path(),
        &["--json"],
        "for i in 1 2 3 4; do truncate -s 1000M /session/s$i; done",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let created = file_events(&events(&o), "harness.file.created");
    assert_eq!(
        created,
        ["/session/s1", "/session/s2", "/session/s3", "/session/s4"]
    );

    // A write to one of them is still seen; the others are unchanged.
    let started = Instant::now();
    let o = exec(tmp.path(), &["--json"], "echo x >> /session/s2");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let evs = events(&o);
    assert_eq!(file_events(&evs, "harness.file.modified"), ["/session/s2"]);
    assert!(file_events(&evs, "harness.file.created").is_empty());

    // Escalating hands the workspace over: refused at the archive's limit, at once.
    let started = Instant::now();
    let o = exec(tmp.path(), &[], "git --version");
    assert_eq!(o.status.code(), Some(126), "{}", show(&o));
    assert!(
        text(&o.stderr).contains("over the limit of 1073741824 bytes"),
        "{}",
        show(&o)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// A session commits a symlink into its Persistent Dir's source (`pd/mem/inner ->
/// ../../sessions/victim`); another turn names a source through it. Before, that turn read the
/// victim session's files and trace; now the source is a path error and nothing is read.
#[test]
fn a_persistent_source_through_a_committed_symlink_reaches_no_other_session() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join(".little-harness");
    let o = kh(tmp.path())
        .args([
            "local",
            "exec",
            "--session",
            "victim",
            "--tier1",
            "none",
            "--",
        ])
        .arg("echo VICTIM-SECRET > /session/secret.txt")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = kh(tmp.path())
        .args(["local", "exec", "--session", "a1", "--tier1", "none"])
        .args(["--persistent-dir", "/persistent/mem=pd/mem", "--"])
        .arg("ln -s ../../sessions/victim /persistent/mem/inner")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(std::fs::symlink_metadata(data.join("pd/mem/inner"))
        .unwrap()
        .file_type()
        .is_symlink());
    let o = kh(tmp.path())
        .args(["local", "exec", "--session", "a2", "--tier1", "none"])
        .args(["--persistent-dir", "/persistent/v=pd/mem/inner", "--"])
        .arg("cat /persistent/v/session/secret.txt")
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!text(&o.stdout).contains("VICTIM-SECRET"), "{}", show(&o));
    assert!(
        text(&o.stderr).contains("passes through the symlink"),
        "{}",
        show(&o)
    );
    assert!(!data.join("sessions/a2/session").join("ran").exists());
}

/// Denied commands are not in Tier-0's tool set at all: however a script reaches one (here a
/// command substitution in a variable's value, evaluated by arithmetic, which classification
/// cannot follow), it does not run there; the "not found" it leaves names it, and that refuses
/// the retry.
#[test]
fn a_denied_tool_cannot_run_on_tier0_however_it_is_reached() {
    let tmp = tempfile::tempdir().unwrap();
    let o = exec(tmp.path(), &[], "touch /session/f");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // The value is built at run time, so classification cannot see the rm in it.
    let o = exec(
        tmp.path(),
        &["--deny", "rm", "--tier1", "none"],
        "a='a[$'; b='(rm -f /session/f)]'; x=\"$a$b\"; echo $((x)); ls /session",
    );
    assert_eq!(o.status.code(), Some(126), "{}", show(&o));
    assert!(
        text(&o.stderr).contains("refused by policy: rm"),
        "{}",
        show(&o)
    );
    assert!(tmp
        .path()
        .join(".little-harness/sessions/s1/session/f")
        .exists());
    // Other tools are untouched by the policy.
    let o = exec(
        tmp.path(),
        &["--deny", "rm"],
        "ls /session; cat /session/f; echo ok",
    );
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "f\nok\n".into()),
        "{}",
        show(&o)
    );
}

/// yq is a python3 script: python code runs in it, which classification cannot see. Under a deny
/// policy a forged gap line does not get the script retried on Tier-1.
#[test]
fn no_retry_under_a_deny_policy_whatever_the_script_hides() {
    let tmp = tempfile::tempdir().unwrap();
    exec(
        tmp.path(),
        &[],
        r#"printf 'import os\nos.system("git --version > /session/ran 2>&1")\n' > /session/sitecustomize.py"#,
    );
    let o = exec(
        tmp.path(),
        &["--deny", "git"],
        r#"PYTHONPATH=/session yq -n 1 >/dev/null 2>&1; echo "bash: make: command not found" >&2"#,
    );
    assert_not_retried(tmp.path(), &o);
}

/// Refused with 126 and "not retried", and the git the script hid in `/session/ran` never ran
/// (it cannot on Tier-0, where git is not a tool; it would have on Tier-1).
fn assert_not_retried(home: &Path, o: &std::process::Output) {
    assert_eq!(o.status.code(), Some(126), "{}", show(o));
    assert!(
        text(&o.stderr).contains("not retried on a higher tier"),
        "{}",
        show(o)
    );
    let ran = std::fs::read_to_string(home.join(".little-harness/sessions/s1/session/ran"))
        .unwrap_or_default();
    assert!(!ran.contains("git version"), "git ran: {ran:?}");
}

/// The worker, its forker and a command's supervisor are killed with SIGKILL mid-command
/// (`pkill -9 -f kube-harness` does all three): nothing is left to kill the command's tree. The
/// next sandbox of this user, as root, kills what the dead one's cgroups still hold and removes
/// its runtime directory (its private /tmp held the commands' files).
#[test]
fn what_a_killed_worker_leaves_is_swept_by_the_next_sandbox() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_kube-harness");
    // Its own pids cgroup and TMPDIR: a sandbox started by another test of this binary sweeps
    // dead workers' command cgroups and runtime directories next to its own, and would sweep
    // this one's before the test looks.
    let bound = Bound::new("sweep", 200);
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let mut cmd = kh(tmp.path());
    cmd.env("TMPDIR", &scratch)
        .args(["local", "exec", "--session", "k", "--tier1", "none", "--"])
        .arg(
            "echo left > $TMPDIR/marker; sleep 3001 & (nohup sleep 3002 >/dev/null &); sleep 3003",
        );
    bound.hold(&mut cmd, None);
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleepers().len() < 3 {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // This worker, its sandbox's forker (its child, an exec of the same binary) and the
    // forker's children (the supervisors and the spare, forked copies of it) only: other tests
    // run the same binary at the same time. Deepest first, as `pkill -9` would take them all at
    // once: a supervisor that saw its forker die first would kill the tree itself.
    let pid = child.id();
    let children_of = |parent: u32| -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                    let after = st.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
                    after.split_whitespace().nth(1) == Some(&parent.to_string())
                }) && std::fs::read_link(format!("/proc/{p}/exe"))
                    .is_ok_and(|exe| exe == std::path::Path::new(bin))
            })
            .collect()
    };
    let forkers = children_of(pid);
    let supervisors: Vec<u32> = forkers.iter().flat_map(|f| children_of(*f)).collect();
    assert!(!supervisors.is_empty(), "no supervisor found");
    for p in supervisors.iter().chain(&forkers).chain([&pid]) {
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        sleepers().len(),
        3,
        "the tree outlives its worker until swept"
    );
    let dead_dirs = || runtime_dirs_of(&scratch, pid);
    assert!(!dead_dirs().is_empty());

    let mut next = kh(tmp.path());
    next.env("TMPDIR", &scratch).args([
        "local",
        "exec",
        "--session",
        "s1",
        "--tier1",
        "none",
        "--",
        "true",
    ]);
    bound.hold(&mut next, None);
    let o = next.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sleepers().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(sleepers(), Vec::<i32>::new(), "left after the sweep");
    assert_eq!(dead_dirs(), Vec::<std::path::PathBuf>::new());
}

/// Pids of the `sleep 300N` processes the test above starts.
fn sleepers() -> Vec<i32> {
    sleeping(&["3001", "3002", "3003"])
}

fn runtime_dirs_of(tmp: &Path, pid: u32) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("kube-harness-sandbox-{pid}-")))
        })
        .collect()
}

/// Third outside attack: Ctrl-C (or SIGTERM) to `local exec` during a local Tier-1 command left
/// the command running as root with every capability, re-parented to PID 1 with no limits, and
/// left the Tier-1 scratch copy of the workspace in TMPDIR for good. The command now runs in a
/// PID namespace that dies with the host process, and the next provisioning removes the copy.
#[test]
fn a_signal_to_the_host_during_a_local_tier1_command_leaves_nothing_running() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let ours = ["3011", "3012", "3013"];
    let mut dead = Vec::new();
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let mut cmd = kh(tmp.path());
        cmd.env("TMPDIR", &scratch)
            .args(["local", "exec", "--session", "t1", "--"])
            .arg("git --version >/dev/null; setsid sleep 3011 & (nohup sleep 3012 >/dev/null &); sleep 3013");
        // A test run from a background job inherits SIGINT ignored (and exec keeps that): the
        // host gets the signals' default actions, as from a terminal.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM] {
                    if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while sleeping(&ours).len() < 3 {
            assert!(
                Instant::now() < deadline,
                "the Tier-1 command never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(child.id() as i32, signal) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                for p in sleeping(&ours) {
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
                panic!("the host did not stop on signal {signal}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        dead.push(child.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sleeping(&ours).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = sleeping(&ours);
        for p in &left {
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        assert_eq!(
            left,
            Vec::<i32>::new(),
            "outlived the host (signal {signal})"
        );
    }
    // The next escalation removes the scratch copies the killed hosts left.
    let o = kh(tmp.path())
        .env("TMPDIR", &scratch)
        .args(["local", "exec", "--session", "t1", "--", "git --version"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let left: Vec<String> = std::fs::read_dir(&scratch)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| {
            dead.iter()
                .any(|pid| n.starts_with(&format!("kube-harness-tier1-{pid}-")))
        })
        .collect();
    assert_eq!(left, Vec::<String>::new(), "scratch copies of killed hosts");
}

/// A write under a name the file tracking cannot follow (not UTF-8) used to leave no event and
/// no word in the trace: now the command's completed event says what was skipped.
#[test]
fn writes_the_tracking_cannot_follow_are_not_silent() {
    let tmp = tempfile::tempdir().unwrap();
    let o = exec(
        tmp.path(),
        &["--json"],
        r"mkdir $'/session/\xff' && echo x > $'/session/\xff/p'",
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let completed = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "harness.runtime.command.completed")
        .unwrap()
        .clone();
    let skipped = &completed["data"]["fileTrackingSkipped"];
    assert_eq!(skipped["count"], 1, "{completed}");
    assert!(
        skipped["first"][0].as_str().unwrap().contains("UTF-8"),
        "{completed}"
    );
    // Said once, not after every later command.
    let o = exec(tmp.path(), &["--json"], "true");
    assert!(
        !text(&o.stdout).contains("fileTrackingSkipped"),
        "{}",
        show(&o)
    );
}
