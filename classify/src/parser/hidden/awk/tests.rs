//! The awk scanner's and option reader's unit tests.

use super::super::args::test_args as args;
use super::*;

fn found(program: &str) -> Vec<Inner> {
    let mut out = Vec::new();
    scan(program, &mut out);
    out
}

fn shell(s: &str) -> Inner {
    Inner::Shell(s.into())
}

#[test]
fn finds_literal_commands() {
    let cases: &[(&str, &str)] = &[
        (r#"BEGIN{system("git --version")}"#, "git --version"),
        (r#"BEGIN { system ("git" " status") }"#, "git status"),
        (
            r#"{ print $0 | "git hash-object --stdin" }"#,
            "git hash-object --stdin",
        ),
        (r#"{ printf("%s\n", $1) | ("sort" " -u") }"#, "sort -u"),
        (
            r#"BEGIN { while (("git log" | getline line) > 0) n++ }"#,
            "git log",
        ),
        (r#"BEGIN { "date" | getline d; print d }"#, "date"),
        (r#"BEGIN { "git" |& getline x }"#, "git"),
        (r#"BEGIN { print "x" |& "git" }"#, "git"),
        (r#"BEGIN { system("g\151t") }"#, "git"),
        (r#"BEGIN { system("\x67it") }"#, "git"),
        (r#"BEGIN { system("git\0 harmless") }"#, "git"),
        (r#"BEGIN { awk::system("git") }"#, "git"),
        // A regexp in an `if` statement's body: its quote does not start a string.
        ("{ if (1) /\"/; system(\"git\") }", "git"),
        // Divisions are not regexps: the quotes are strings.
        (r#"{ x = a / 2; system("git"); y = b / 3 }"#, "git"),
        ("# system(\"ls\")\nBEGIN { system(\"git\") }", "git"),
    ];
    for (program, command) in cases {
        assert_eq!(found(program), vec![shell(command)], "{program}");
    }
}

#[test]
fn run_time_commands_are_dynamic() {
    for program in [
        r#"{ system($0) }"#,
        r#"{ system("git add " $1) }"#,
        r#"{ print | cmd }"#,
        r#"{ cmd | getline }"#,
        r#"BEGIN { f = "system"; @f("git") }"#,
        r#"BEGIN { x = system }"#,
        r#"BEGIN { system("git"#,
        "BEGIN { system(\"\\x67abc\") }",
    ] {
        let got = found(program);
        assert!(
            matches!(got.as_slice(), [Inner::Dynamic { .. }]),
            "{program}: {got:?}"
        );
    }
    let got = found(r#"{ system("git add " $1) }"#);
    assert!(
        matches!(&got[0], Inner::Dynamic { seen: Seen::Pieces(fragments), .. } if fragments == &["git add "]),
        "{got:?}"
    );
}

#[test]
fn data_is_not_code() {
    for program in [
        "{print $1}",
        r#"{ print "system(\"git\")" }"#,
        r#"/system|git/ { n++ } END { print n }"#,
        r#"$0 ~ "a|b" { print }"#,
        "# system(\"git\")\n{ print }",
        r#"{ print "| %s |" }"#,
        r#"/[/|]/ { print }"#,
        r#"@/a|b/ { print }"#,
        r#"@namespace "x"; { print }"#,
        r#"NR > 1 || NF == 0 { print }"#,
        r#"{ a = $1 / 2; b = $2 / 4 } END { print a "|" b }"#,
    ] {
        assert_eq!(found(program), vec![], "{program}");
    }
}

#[test]
fn includes_and_extensions_are_opaque() {
    assert_eq!(
        found(r#"@include "lib.awk"; BEGIN { f() }"#),
        vec![Inner::Opaque("awk @include lib.awk".into())]
    );
    assert_eq!(
        found(r#"@load "fork""#),
        vec![Inner::Opaque("awk @load fork".into())]
    );
}

fn run(tool: &str, words: &[&str]) -> Vec<Inner> {
    let mut out = Vec::new();
    find(tool, &args(words), &mut out);
    out
}

#[test]
fn finds_the_program_where_awk_does() {
    let prog = r#"BEGIN{system("git")}"#;
    for words in [
        vec![prog],
        vec!["-F,", prog, "file"],
        vec!["-F", ",", "-v", "x=1", prog],
        vec!["--", prog],
        vec!["-e", prog, "file"],
        vec!["--source", prog],
        vec!["--sou=BEGIN{system(\"git\")}"],
        vec!["-W", "source=BEGIN{system(\"git\")}"],
        vec!["-Wsource", prog],
        vec!["-i", "inplace", prog, "f"],
    ] {
        let got = run("gawk", &words);
        assert!(got.contains(&shell("git")), "{words:?}: {got:?}");
    }
    // After the program, operands are files and assignments, never programs or options.
    assert_eq!(run("awk", &["{print}", prog, "-e", prog]), vec![]);
    // With -e or -f, the first operand is a file.
    assert_eq!(run("awk", &["-e", "{print}", prog]), vec![]);
    assert_eq!(
        run("awk", &["-f", "prog.awk", prog]),
        vec![Inner::Opaque("awk -f prog.awk".into())]
    );
    assert!(matches!(
        run("awk", &["$"]).as_slice(),
        [Inner::Dynamic { .. }]
    ));
    assert!(matches!(
        run("awk", &["-e", "$"]).as_slice(),
        [Inner::Dynamic { .. }]
    ));
    assert_eq!(
        run("mawk", &["-W", "exec", "x.awk"]),
        vec![Inner::Opaque("mawk --exec x.awk".into())]
    );
    assert_eq!(
        run("gawk", &["-l", "ext", "{print}"]),
        vec![Inner::Opaque("gawk --load ext".into())]
    );
    assert_eq!(run("awk", &["-F", "$", "{print $1}"]), vec![]);
}
