//! The vendored grammar: it loads, pipelines parse as bash groups them (one flat `pipeline` node per
//! pipeline, tighter than `&&`/`||`), and the scanner survives any code point.

use kube_harness_bash_grammar::{LANGUAGE, NODE_TYPES};
use tree_sitter::{Language, Parser};

fn parser() -> Parser {
    let mut parser = Parser::new();
    parser
        .set_language(&LANGUAGE.into())
        .expect("the vendored grammar loads");
    parser
}

fn sexp(script: &str) -> String {
    let tree = parser().parse(script, None).expect("parse");
    tree.root_node().to_sexp()
}

#[test]
fn abi_and_node_types_match_the_runtime() {
    let language: Language = LANGUAGE.into();
    assert_eq!(language.abi_version(), tree_sitter::LANGUAGE_VERSION);
    assert!(NODE_TYPES.contains("\"pipeline\""));
    assert!(language.id_for_node_kind("pipeline", true) != 0);
}

#[test]
fn pipelines_stay_one_flat_node() {
    let cmd = "(command name: (command_name (word)))";
    assert_eq!(
        sexp("a | b | c"),
        format!("(program (pipeline {cmd} {cmd} {cmd}))")
    );
    assert_eq!(
        sexp("a |& b | c |& d | e"),
        format!("(program (pipeline {cmd} {cmd} {cmd} {cmd} {cmd}))")
    );
    assert_eq!(sexp("a|b"), format!("(program (pipeline {cmd} {cmd}))"));
}

#[test]
fn pipelines_bind_tighter_than_and_or() {
    // Upstream's GLR pick read `a | b | c && d | e` as `a | (b | c && d | e)`; bash (and this
    // grammar) reads `(a | b | c) && (d | e)`.
    let cmd = "(command name: (command_name (word)))";
    assert_eq!(
        sexp("a | b | c && d | e"),
        format!("(program (list (pipeline {cmd} {cmd} {cmd}) (pipeline {cmd} {cmd})))")
    );
    assert_eq!(
        sexp("a | b || c | d | e && f"),
        format!(
            "(program (list (list (pipeline {cmd} {cmd}) (pipeline {cmd} {cmd} {cmd})) {cmd}))"
        )
    );
}

#[test]
fn redirects_and_heredocs_keep_their_upstream_places() {
    // As upstream: the redirect takes the pipeline before it (bash gives it to `b` alone; the same
    // commands run either way).
    let s = sexp("a | b > f | c");
    assert!(
        s.starts_with("(program (pipeline (redirected_statement body: (pipeline"),
        "{s}"
    );
    let s = sexp("a | bash <<EOF\necho hi\nEOF\n");
    assert!(
        s.starts_with("(program (redirected_statement body: (pipeline"),
        "{s}"
    );
}

#[test]
fn read_write_redirects_parse() {
    // Upstream had no `<>` token: these failed to parse.
    for (script, descriptor) in [
        ("exec 3<> /tmp/f", true),
        ("cat <> f", false),
        ("echo a 1<>f", true),
    ] {
        let s = sexp(script);
        assert!(
            !s.contains("ERROR") && !s.contains("MISSING"),
            "{script}: {s}"
        );
        assert!(s.contains("(file_redirect"), "{script}: {s}");
        assert_eq!(
            s.contains("descriptor: (file_descriptor)"),
            descriptor,
            "{script}: {s}"
        );
    }
    // `<` and `>` on their own are what they were.
    let s = sexp("a < in > out");
    assert_eq!(s.matches("(file_redirect").count(), 2, "{s}");
}

#[test]
fn scanner_survives_high_code_points_after_a_brace() {
    // Upstream's scanner called isdigit() on the lookahead here, which reads outside glibc's ctype
    // table for code points past one byte and crashed the process.
    let mut parser = parser();
    for c in [
        '\u{ff}',
        '\u{100}',
        '\u{ffff}',
        '\u{10000}',
        '\u{10ffff}',
        'é',
        '٣',
    ] {
        for script in [
            format!("echo {{{c}"),
            format!("echo {{1..{c}"),
            format!("echo {{{c}..2}}"),
        ] {
            let tree = parser.parse(&script, None).expect("parse");
            assert_eq!(tree.root_node().kind(), "program", "{script:?}");
        }
    }
    // The ASCII path is unchanged: a brace range is still a brace expression.
    assert!(sexp("echo {1..3}").contains("(brace_expression (number) (number))"));
}
