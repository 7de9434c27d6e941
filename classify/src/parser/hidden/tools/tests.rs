//! tar's, sort's, split's, rg's and the builtins' unit tests.

use super::super::args::test_args as args;
use super::*;

fn shell(s: &str) -> Inner {
    Inner::Shell(s.into())
}

fn tar_of(words: &[&str]) -> Vec<Inner> {
    let mut out = Vec::new();
    tar(&args(words), &mut out);
    out
}

#[test]
fn tar_options_that_run_commands() {
    assert_eq!(
        tar_of(&["-xf", "a.tar", "--to-command=git apply"]),
        vec![shell("git apply")]
    );
    assert_eq!(
        tar_of(&["-xf", "a.tar", "--to-command", "git"]),
        vec![shell("git")]
    );
    assert_eq!(tar_of(&["--to-c=git", "-xf", "a.tar"]), vec![shell("git")]);
    assert_eq!(
        tar_of(&[
            "-cf",
            "x",
            "--checkpoint=1",
            "--checkpoint-action=exec=git status",
            "."
        ]),
        vec![shell("git status")]
    );
    assert_eq!(
        tar_of(&["--checkpoint-act=exec=git", "-cf", "x", "."]),
        vec![shell("git")]
    );
    assert_eq!(
        tar_of(&["--checkpoint-action=dot", "-cf", "x", "."]),
        vec![]
    );
    assert_eq!(tar_of(&["-I", "git", "-cf", "x", "."]), vec![shell("git")]);
    assert_eq!(tar_of(&["-cIgit", "-f", "x", "."]), vec![shell("git")]);
    assert_eq!(tar_of(&["-cvI", "git", "-f", "x", "."]), vec![shell("git")]);
    assert_eq!(
        tar_of(&["--use-compress-program=zstd -19", "-cf", "x", "."]),
        vec![shell("zstd -19")]
    );
    assert_eq!(tar_of(&["cIf", "git", "x.tar", "."]), vec![shell("git")]);
    assert_eq!(tar_of(&["-F", "git", "-cf", "x", "."]), vec![shell("git")]);
    assert_eq!(
        tar_of(&["--info-script=git", "-cf", "x", "."]),
        vec![shell("git")]
    );
    assert_eq!(
        tar_of(&["--new-volume-script", "git", "-cf", "x"]),
        vec![shell("git")]
    );
    assert_eq!(
        tar_of(&["--rsh-command=/usr/bin/git", "-cf", "h:x", "."]),
        vec![Inner::Program("/usr/bin/git".into())]
    );
    assert_eq!(
        tar_of(&["-cf", "host:x.tar", "."]),
        vec![Inner::Program("rsh".into())]
    );
    assert!(matches!(
        tar_of(&["--to-command", "$", "-xf", "a"]).as_slice(),
        [Inner::Dynamic { .. }]
    ));
    assert!(matches!(
        tar_of(&["--to-command=\0", "-xf", "a"]).as_slice(),
        [Inner::Dynamic { .. }]
    ));
    assert!(matches!(
        tar_of(&["-xI\0", "-f", "a"]).as_slice(),
        [Inner::Dynamic { .. }]
    ));
    assert_eq!(tar_of(&["-xf", "a", "--\0"]), vec![]);
}

#[test]
fn ordinary_tar_runs_nothing() {
    for words in [
        vec!["-xzf", "a.tgz"],
        vec!["-czf", "/artifacts/s.tgz", "-C", "/session", "."],
        vec!["xzf", "a.tgz", "-C", "out"],
        vec!["-tvf", "a.tar"],
        vec!["-cf", "x.tar", "--force-local", "back:up.tar"],
        vec!["-cf", "./a:b.tar", "."],
        vec!["-cf", "x.tar", "--", "--to-command=git"],
        vec!["-xf", "a.tar", "--checkpoint=10", "--to-stdout"],
        vec!["-cf", "x.tar", "-C", "$", "."],
    ] {
        assert_eq!(tar_of(&words), vec![], "{words:?}");
    }
}

#[test]
fn sort_split_rg() {
    let run = |f: fn(&[Option<String>], &mut Vec<Inner>), words: &[&str]| {
        let mut out = Vec::new();
        f(&args(words), &mut out);
        out
    };
    assert_eq!(
        run(sort, &["--compress-program=git", "f"]),
        vec![Inner::Program("git".into())]
    );
    assert_eq!(
        run(sort, &["--compress", "git", "f"]),
        vec![Inner::Program("git".into())]
    );
    assert_eq!(run(sort, &["-u", "-k2", "f"]), vec![]);
    assert_eq!(
        run(split, &["--filter=git apply", "f"]),
        vec![shell("git apply")]
    );
    assert_eq!(run(split, &["-l", "100", "f", "part_"]), vec![]);
    assert_eq!(
        run(rg, &["--pre", "git", "x"]),
        vec![Inner::Program("git".into())]
    );
    assert_eq!(
        run(rg, &["--pre=git", "x"]),
        vec![Inner::Program("git".into())]
    );
    assert_eq!(run(rg, &["--pre-glob=*.pdf", "x"]), vec![]);
    assert_eq!(run(rg, &["-n", "--", "--pre=git"]), vec![]);
}

fn builtin_of(name: &str, words: &[&str]) -> Vec<Inner> {
    let mut out = Vec::new();
    builtin(name, &args(words), &mut out);
    out
}

#[test]
fn builtins_that_evaluate_code() {
    let same = |s: &str| Inner::SameShell(s.into());
    assert_eq!(
        builtin_of("trap", &["git status", "EXIT"]),
        vec![same("git status")]
    );
    assert_eq!(
        builtin_of("trap", &["--", "git", "INT", "TERM"]),
        vec![same("git")]
    );
    assert_eq!(builtin_of("trap", &["-", "EXIT"]), vec![]);
    assert_eq!(builtin_of("trap", &["EXIT"]), vec![]);
    assert_eq!(builtin_of("trap", &["-p"]), vec![]);
    assert_eq!(builtin_of("trap", &["", "INT"]), vec![]);
    assert!(matches!(
        builtin_of("trap", &["$", "EXIT"]).as_slice(),
        [Inner::Dynamic { .. }]
    ));
    assert_eq!(builtin_of("alias", &["ll=ls -l"]), vec![same("ls -l")]);
    assert_eq!(
        builtin_of("hash", &["-p", "/usr/bin/git", "ls"]),
        vec![Inner::Program("/usr/bin/git".into())]
    );
    assert_eq!(builtin_of("hash", &["-r"]), vec![]);
    assert_eq!(
        builtin_of("enable", &["-f", "./x.so", "x"]),
        vec![Inner::Opaque("enable -f ./x.so".into())]
    );
    assert_eq!(
        builtin_of("mapfile", &["-t", "-C", "git", "-c", "1", "a"]),
        vec![same("git")]
    );
    assert_eq!(
        builtin_of("unset", &["a[$(git)]"]),
        vec![same(": a[$(git)]")]
    );
    assert_eq!(
        builtin_of("let", &["x=a[`git`]"]),
        vec![same(": x=a[`git`]")]
    );
    assert_eq!(
        builtin_of("printf", &["-v", "a[$(git)]", "%s", "x"]),
        vec![same(": a[$(git)]")]
    );
    assert_eq!(builtin_of("printf", &["%s\\n", "$(not run)"]), vec![]);
    assert_eq!(builtin_of("read", &["-r", "line"]), vec![]);
}
