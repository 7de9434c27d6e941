//! The sqlite3 reader's unit tests.

use super::super::args::test_args as args;
use super::*;

fn run_with(words: &[&str], stdin: Option<Option<String>>) -> Vec<Inner> {
    let mut out = Vec::new();
    let stdin = move || stdin.clone();
    find(&args(words), &stdin, &mut out);
    out
}

fn run(words: &[&str]) -> Vec<Inner> {
    run_with(words, None)
}

fn shell(s: &str) -> Inner {
    Inner::Shell(s.into())
}

#[test]
fn dot_commands_that_start_programs() {
    assert_eq!(
        run(&["db", ".shell git --version"]),
        vec![shell("git --version")]
    );
    assert_eq!(
        run(&["db", ".system git status"]),
        vec![shell("git status")]
    );
    assert_eq!(run(&["db", ".sh git"]), vec![shell("git")]);
    assert_eq!(run(&["db", ".shell 'git log'"]), vec![shell("\"git log\"")]);
    assert_eq!(
        run(&[":memory:", ".once |git hash-object --stdin", "select 1"]),
        vec![shell("git hash-object --stdin")]
    );
    assert_eq!(
        run(&["db", ".output '|git apply'"]),
        vec![shell("git apply")]
    );
    assert_eq!(run(&["db", ".read '|git show'"]), vec![shell("git show")]);
    assert_eq!(
        run(&["db", ".import --csv '|git log' t"]),
        vec![shell("git log")]
    );
    assert_eq!(
        run(&["db", ".excel"]),
        vec![Inner::Program("xdg-open".into())]
    );
    assert_eq!(
        run(&["-cmd", ".shell git", "db", "select 1"]),
        vec![shell("git")]
    );
    assert_eq!(
        run(&["--cmd", ".shell git", "db", "select 1"]),
        vec![shell("git")]
    );
    assert_eq!(
        run(&["db", "select edit('x', 'git commit -F')"]),
        vec![shell("git commit -F \"/tmp/sqlite-edit\"")]
    );
    assert_eq!(
        run(&["db", "select \"EDIT\"('x', 'git')"]),
        vec![shell("git \"/tmp/sqlite-edit\"")]
    );
    assert_eq!(
        run_with(&["db"], Some(Some("select 1;\n.shell git\n".into()))),
        vec![shell("git")]
    );
}

#[test]
fn files_extensions_and_stdin_are_opaque() {
    assert_eq!(
        run(&["db", ".read x.sql"]),
        vec![Inner::Opaque("sqlite3 .read x.sql".into())]
    );
    assert_eq!(
        run(&["-init", "x.sql", "db", "select 1"]),
        vec![Inner::Opaque("sqlite3 -init x.sql".into())]
    );
    assert_eq!(
        run(&["db", ".load ./x.so"]),
        vec![Inner::Opaque("sqlite3 .load ./x.so".into())]
    );
    assert_eq!(
        run(&["db", "select load_extension('x')"]),
        vec![Inner::Opaque("sqlite3 load_extension()".into())]
    );
    assert_eq!(
        run(&["db"]),
        vec![Inner::Opaque("sqlite3 (commands on stdin)".into())]
    );
    assert!(matches!(
        run_with(&["db"], Some(None)).as_slice(),
        [Inner::Dynamic { .. }]
    ));
    assert!(matches!(
        run(&["db", "$"]).as_slice(),
        [Inner::Dynamic { .. }]
    ));
    assert!(matches!(
        run(&["db", "select edit(x)"]).as_slice(),
        [Inner::Dynamic { .. }]
    ));
}

#[test]
fn plain_sql_runs_nothing() {
    for words in [
        vec!["db", "select 1"],
        vec!["db", ".tables"],
        vec!["-json", "db", "select * from t limit 5"],
        vec![
            "db",
            "select 'edit(1, ''git'')', \"credit\" from t -- edit('x','git')",
        ],
        vec!["db", "update t set edited = 1 /* edit('a','git') */"],
        vec!["db", ".open other.db", ".once out.txt", "select 1"],
        vec!["-separator", ".shell git", "db", "select 1"],
        vec!["-version"],
        vec!["db", ".mode csv", ".import data.csv t"],
        vec!["-A", "db", "-x", ".shell git"],
    ] {
        assert_eq!(run(&words), vec![], "{words:?}");
    }
}
