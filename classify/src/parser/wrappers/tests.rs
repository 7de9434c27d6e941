//! The wrapper grammars and the `env -S` splitter.

use super::options::split_string;
use super::*;

fn lits(words: &[&str]) -> Vec<Option<String>> {
    words
        .iter()
        .map(|w| (*w != "$").then(|| w.to_string()))
        .collect()
}

fn words(line: &[&str]) -> Vec<Option<String>> {
    lits(line)
}

#[test]
fn finds_inner_commands() {
    use Inner::*;
    let shell = |s: &str| Shell(s.to_string());
    let dynamic = Inner::wrapped_at_run_time;
    let cases: Vec<(&str, &[&str], Vec<Inner>)> = vec![
        ("env", &["FOO=1", "git", "status"], vec![At(1)]),
        ("env", &["-i", "-u", "HOME", "A=b", "cargo"], vec![At(4)]),
        ("env", &[], vec![]),
        (
            "env",
            &["-S", "git status"],
            vec![Env(words(&["git", "status"]))],
        ),
        (
            "env",
            &["--split-string=make all"],
            vec![Env(words(&["make", "all"]))],
        ),
        (
            "env",
            &["-S", "env", "git"],
            vec![Env(words(&["env", "git"]))],
        ),
        ("env", &["-S", "-i git"], vec![Env(words(&["-i", "git"]))]),
        ("env", &["-Si", "git"], vec![Env(words(&["i", "git"]))]),
        ("env", &["--", "X=1", "git"], vec![At(2)]),
        ("env", &["-", "git"], vec![At(1)]),
        ("sudo", &["-Eu", "root", "apt-get", "install"], vec![At(2)]),
        ("sudo", &["-u", "root", "--", "make"], vec![At(3)]),
        ("sudo", &["-l"], vec![]),
        ("timeout", &["-s", "KILL", "5", "docker", "ps"], vec![At(3)]),
        ("timeout", &["--kill-after=1", "5s", "ls"], vec![At(2)]),
        ("timeout", &["5"], vec![]),
        ("timeout", &["--", "5", "make"], vec![At(2)]),
        ("nice", &["-n", "10", "make"], vec![At(2)]),
        ("nice", &["-10", "make"], vec![At(1)]),
        ("stdbuf", &["-oL", "grep", "x"], vec![At(1)]),
        ("command", &["-v", "git"], vec![]),
        ("command", &["-p", "git"], vec![At(1)]),
        ("xargs", &["-I{}", "cargo", "build"], vec![At(1)]),
        ("xargs", &["-I", "{}", "-P", "4", "git", "x"], vec![At(4)]),
        ("xargs", &["-0", "-n1"], vec![]),
        ("xargs", &["-i{}", "rm", "{}"], vec![At(1)]),
        ("exec", &["-a", "name", "make"], vec![At(2)]),
        ("env", &["$", "git"], vec![dynamic()]),
        ("setsid", &["-f", "git"], vec![At(1)]),
        ("coproc", &["git", "status"], vec![At(0)]),
        ("coproc", &["NAME", "{", "git"], vec![At(1)]),
        ("coproc", &["{", "git"], vec![At(0)]),
        ("flock", &["/tmp/l", "git", "status"], vec![At(1)]),
        (
            "flock",
            &["-w", "5", "/tmp/l", "-c", "git status"],
            vec![shell("git status")],
        ),
        ("flock", &["-n", "9"], vec![]),
        ("watch", &["-n", "1", "git", "status"], vec![Joined(2, 4)]),
        ("chroot", &["--userspec=a:b", "/srv", "git"], vec![At(2)]),
        ("chroot", &["/srv"], vec![StdinShell]),
        (
            "unshare",
            &["-r", "--propagation", "private", "git"],
            vec![At(3)],
        ),
        ("unshare", &["-m"], vec![StdinShell]),
        ("ionice", &["-c3", "git"], vec![At(1)]),
        ("ionice", &["-c", "3", "-p", "12"], vec![]),
        ("taskset", &["-c", "0", "git"], vec![At(2)]),
        ("taskset", &["-p", "3", "12"], vec![]),
        ("chrt", &["1", "git"], vec![At(1)]),
        ("chrt", &["-o", "git"], vec![At(1)]),
        ("chrt", &["-f", "-T", "5", "10", "git"], vec![At(4)]),
        ("runuser", &["-u", "x", "--", "git", "-c", "y"], vec![At(3)]),
        ("runuser", &["x", "-c", "git"], vec![shell("git")]),
        ("su", &["-c", "git"], vec![shell("git")]),
        ("su", &["-", "root", "-c", "git"], vec![shell("git")]),
        (
            "su",
            &["-s", "/usr/bin/git", "root"],
            vec![Program("/usr/bin/git".into()), StdinShell],
        ),
        ("su", &["root", "x.sh"], vec![Opaque("su … x.sh".into())]),
        ("su", &[], vec![StdinShell]),
        ("script", &["-qc", "git", "/dev/null"], vec![shell("git")]),
        (
            "script",
            &["-q", "/dev/null", "--command=git"],
            vec![shell("git")],
        ),
        ("parallel", &["git", ":::", "a"], vec![shell("git a")]),
        (
            "parallel",
            &["-j", "2", ":::", "git status", "ls"],
            vec![shell("git status"), shell("ls")],
        ),
        ("parallel", &["{}", "x", ":::", "git"], vec![shell("git x")]),
        ("parallel", &["gzip"], vec![Joined(0, 1)]),
        ("parallel", &[], vec![dynamic()]),
        // An option's value missing at the end: commands come from stdin (it once panicked).
        ("parallel", &["-j"], vec![dynamic()]),
        ("parallel", &["--jobs", "2", "-S"], vec![dynamic()]),
        ("busybox", &["git"], vec![At(0)]),
        ("busybox", &["--list"], vec![]),
        ("strace", &["-f", "-o", "log", "git"], vec![At(3)]),
        ("valgrind", &["--tool=memcheck", "-q", "git"], vec![At(2)]),
        ("gdb", &["--args", "git", "status"], vec![At(1)]),
        ("gdb", &["-batch", "-ex", "run", "git"], vec![At(3)]),
        (
            "gdb",
            &["-ex", "shell git status"],
            vec![shell(" git status")],
        ),
        ("gdb", &["-x", "cmds"], vec![Opaque("gdb -x cmds".into())]),
        ("lldb", &["--", "git"], vec![At(1)]),
        ("doas", &["-u", "x", "git"], vec![At(2)]),
        ("nohup", &["git"], vec![At(0)]),
        ("sg", &["wheel", "-c", "git status"], vec![Joined(2, 3)]),
        ("entr", &["-s", "git status"], vec![Joined(1, 2)]),
        ("pee", &["git", "ls"], vec![shell("git"), shell("ls")]),
        ("pkexec", &["--user", "x", "git"], vec![At(2)]),
        ("setpriv", &["--reuid", "1", "git"], vec![At(2)]),
        ("setarch", &["x86_64", "-R", "git"], vec![At(2)]),
        ("prlimit", &["--nofile=10", "git"], vec![At(1)]),
        ("numactl", &["-N", "0", "git"], vec![At(2)]),
    ];
    for (wrapper, args, expected) in cases {
        assert_eq!(
            inner_command(wrapper, &lits(args)),
            expected,
            "{wrapper} {args:?}"
        );
    }
}

#[test]
fn splits_strings_like_gnu_env() {
    let split = |s: &str| split_string(s);
    assert_eq!(split("git status"), words(&["git", "status"]));
    assert_eq!(split(r"\_git"), words(&["git"]));
    assert_eq!(split(r"a\_b"), words(&["a", "b"]));
    assert_eq!(split(r#""a\_b" 'c d'"#), words(&["a b", "c d"]));
    assert_eq!(split(r"g\it"), words(&["git"]));
    assert_eq!(split("x # comment"), words(&["x"]));
    assert_eq!(split(r"a\cb c"), words(&["a"]));
    assert_eq!(
        split("a ${HOME} b"),
        vec![Some("a".into()), None, Some("b".into())]
    );
    assert_eq!(split("'' x"), words(&["", "x"]));
}

#[test]
fn finds_every_find_exec_command() {
    let args = lits(&[
        ".", "-name", "x", "-exec", "rm", "{}", ";", "-execdir", "git", "add", "{}", "+",
    ]);
    assert_eq!(find_exec_commands(&args), vec![(4, 6), (8, 11)]);
    assert!(find_exec_commands(&lits(&[".", "-exec"])).is_empty());
}
