//! awk, gawk, mawk: program text given on the command line is scanned for what can start a
//! command: `system(…)`, output pipes (`print … | "cmd"`), input pipes (`"cmd" | getline`),
//! gawk's coprocesses (`|&`), gawk's indirect calls (`@f(…)`, which can call `system`), and
//! `@include`/`@load`. Program files (`-f`, `-E`, `-i`) and extensions (`-l`) are opaque.
//!
//! The scan is lexical, not a parser: it tokenises strings, regular expressions, comments and
//! line continuations the way gawk does (a `/` starts a regular expression where an operand is
//! expected, as after an operator, `(`, a newline or the `)` of an `if`/`while`/`for` condition,
//! and is a division after an operand), then reads the command expression next to each `system`,
//! `|` and `|&`. A command is literal only when that expression is made of string constants;
//! anything else is [`Inner::Dynamic`], and so is a program the scan cannot tokenise.

use super::args::c_string;
use super::found::too_many;
use crate::parser::getopt::{getopt, Arg, Ev, Has, Spec};
use crate::parser::inner::{Inner, Seen};

pub fn is_awk(name: &str) -> bool {
    matches!(name, "awk" | "gawk" | "mawk" | "nawk" | "original-awk")
}

/// gawk 5's options (mawk's `-W` options are read as gawk's long ones, `-W exec FILE` included).
const SPEC: Spec = Spec {
    short_req: "FfvWeEilZ",
    short_opt: "dDLop",
    long: &[
        ("assign", Has::Req),
        ("bignum", Has::No),
        ("characters-as-bytes", Has::No),
        ("copyright", Has::No),
        ("csv", Has::No),
        ("debug", Has::Opt),
        ("dump-variables", Has::Opt),
        ("exec", Has::Req),
        ("field-separator", Has::Req),
        ("file", Has::Req),
        ("gen-pot", Has::No),
        ("help", Has::No),
        ("include", Has::Req),
        ("lint", Has::Opt),
        ("lint-old", Has::No),
        ("load", Has::Req),
        ("no-optimize", Has::No),
        ("non-decimal-data", Has::No),
        ("optimize", Has::No),
        ("persist", Has::Opt),
        ("posix", Has::No),
        ("pretty-print", Has::Opt),
        ("profile", Has::Opt),
        ("re-interval", Has::No),
        ("sandbox", Has::No),
        ("source", Has::Req),
        ("trace", Has::No),
        ("traditional", Has::No),
        ("usage", Has::No),
        ("use-lc-numeric", Has::No),
        ("version", Has::No),
    ],
    exact_long: false,
    stop_at_operand: true,
    w_is_long: true,
};

pub fn find(tool: &str, args: &[Option<String>], out: &mut Vec<Inner>) {
    let mut has_source = false;
    let mut texts: Vec<&str> = Vec::new();
    let mut first_operand = None;
    getopt(&SPEC, args, |ev| {
        let (what, value) = match ev {
            Ev::Short('f', v) | Ev::Long("file", v) => ("-f", v),
            Ev::Short('E', v) | Ev::Long("exec", v) => ("--exec", v),
            Ev::Short('i', v) | Ev::Long("include", v) => ("--include", v),
            Ev::Short('l', v) | Ev::Long("load", v) => ("--load", v),
            Ev::Short('D', v) | Ev::Long("debug", v) => ("--debug", v),
            Ev::Short('e', v) | Ev::Long("source", v) => {
                has_source = true;
                match v {
                    Some(Arg::Lit(text)) => texts.push(text),
                    _ => out.push(Inner::dynamic(
                        "the awk program text is only known at run time",
                    )),
                }
                return;
            }
            Ev::Operand(arg) => {
                first_operand.get_or_insert(arg);
                return;
            }
            _ => return,
        };
        has_source |= what == "-f" || what == "--exec";
        let value = value.map_or("", Arg::show);
        let described = match what {
            "--debug" => format!("{tool} --debug (debugger commands)"),
            _ => format!("{tool} {what} {value}"),
        };
        out.push(Inner::Opaque(described));
    });
    if !has_source {
        match first_operand {
            Some(Arg::Lit(text)) => texts.push(text),
            Some(Arg::Dyn) => out.push(Inner::dynamic("the awk program is only known at run time")),
            None => {}
        }
    }
    for text in texts {
        scan(text, out);
    }
}

/// Finds the commands an awk program would run.
pub fn scan(program: &str, out: &mut Vec<Inner>) {
    // Every way to start a command needs one of these; most programs have none.
    if !program.contains("system") && !program.contains(['|', '@']) {
        return;
    }
    let Ok(toks) = lex(program.as_bytes()) else {
        out.push(Inner::dynamic(
            "an awk program the classifier could not read",
        ));
        return;
    };
    for (i, tok) in toks.iter().enumerate() {
        if too_many(out) {
            return;
        }
        match tok {
            Tok::Name(name) if unqualified(name) == "system" => {
                if toks.get(i + 1) != Some(&Tok::Op(b"(")) {
                    out.push(Inner::dynamic("awk `system` without a call"));
                    continue;
                }
                match closing_paren(&toks, i + 1) {
                    Some(end) => out.push(command(&toks[i + 2..end], "system()")),
                    None => out.push(Inner::dynamic("awk system() the classifier could not read")),
                }
            }
            Tok::Op(b"|") | Tok::Op(b"|&") => {
                let reads =
                    matches!(toks.get(i + 1), Some(Tok::Name(n)) if unqualified(n) == "getline");
                let expr = if reads {
                    left_operand(&toks, i)
                } else {
                    right_operand(&toks, i + 1)
                };
                out.push(command(
                    expr,
                    if reads { "| getline" } else { "output pipe" },
                ));
            }
            Tok::At(name) => match *name {
                "namespace" => {}
                "include" | "load" => {
                    let file = match toks.get(i + 1) {
                        Some(Tok::Str(value, _)) => c_string(value),
                        _ => "<run-time value>".into(),
                    };
                    out.push(Inner::Opaque(format!("awk @{name} {file}")));
                }
                _ => out.push(Inner::dynamic(
                    "a gawk indirect function call (it can call system)",
                )),
            },
            _ => {}
        }
    }
}

/// `awk::system` is `system`.
fn unqualified(name: &str) -> &str {
    name.rsplit("::").next().unwrap_or(name)
}

/// The command an expression stands for: literal when it is only string constants (and
/// parentheses), which awk concatenates.
fn command(expr: &[Tok], context: &str) -> Inner {
    let mut value = Vec::new();
    let mut literal = true;
    let mut fragments = Vec::new();
    for tok in expr {
        match tok {
            Tok::Str(bytes, certain) => {
                value.extend_from_slice(bytes);
                literal &= *certain;
                fragments.push(c_string(bytes));
            }
            Tok::Op(b"(") | Tok::Op(b")") => {}
            _ => literal = false,
        }
    }
    if literal && !value.is_empty() {
        return Inner::Shell(c_string(&value));
    }
    Inner::Dynamic {
        detail: format!("awk {context} with a command only known at run time"),
        seen: Seen::Pieces(fragments),
    }
}

/// The index of the `)` matching the `(` at `open`.
fn closing_paren(toks: &[Tok], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, tok) in toks.iter().enumerate().skip(open) {
        match tok {
            Tok::Op(b"(") => depth += 1,
            Tok::Op(b")") => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Keywords after which an operand (so a regular expression) is expected.
const OPERAND_NEXT: &[&str] = &[
    "print", "printf", "return", "case", "in", "do", "else", "exit",
];
/// Keywords whose `(…)` condition is followed by a statement, which may begin with a regexp.
const CONDITION: &[&str] = &["if", "while", "for", "switch"];

/// Tokens that end an operand: the command expression of a pipe does not reach past them.
fn ends_expr(tok: &Tok) -> bool {
    match tok {
        Tok::Newline => true,
        Tok::Name(name) => {
            let n = unqualified(name);
            OPERAND_NEXT.contains(&n) || CONDITION.contains(&n) || n == "getline"
        }
        Tok::Op(op) => !matches!(
            *op,
            b"(" | b")"
                | b"["
                | b"]"
                | b"$"
                | b"+"
                | b"-"
                | b"*"
                | b"/"
                | b"%"
                | b"^"
                | b"**"
                | b"++"
                | b"--"
                | b"."
        ),
        _ => false,
    }
}

/// The operand left of a `|` that feeds `getline`: back to the start of the expression.
fn left_operand<'t, 'a>(toks: &'t [Tok<'a>], pipe: usize) -> &'t [Tok<'a>] {
    let mut depth = 0usize;
    let mut start = pipe;
    while start > 0 {
        let tok = &toks[start - 1];
        match tok {
            Tok::Op(b")") => depth += 1,
            Tok::Op(b"(") => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => break,
            },
            t if depth == 0 && ends_expr(t) => break,
            _ => {}
        }
        start -= 1;
    }
    &toks[start..pipe]
}

/// The operand right of a `|` that a `print` writes to: up to the end of the statement.
fn right_operand<'t, 'a>(toks: &'t [Tok<'a>], from: usize) -> &'t [Tok<'a>] {
    let mut depth = 0usize;
    let mut end = from;
    while let Some(tok) = toks.get(end) {
        match tok {
            Tok::Op(b"(") => depth += 1,
            Tok::Op(b")") => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => break,
            },
            t if depth == 0 && ends_expr(t) => break,
            _ => {}
        }
        end += 1;
    }
    &toks[from..end]
}

#[derive(Debug, PartialEq, Eq)]
enum Tok<'a> {
    /// A string constant's bytes after escapes; `false` when an escape's meaning differs between
    /// awk versions (`\x` with more than two hex digits).
    Str(Vec<u8>, bool),
    Regex,
    Num,
    Name(&'a str),
    /// `@include`, `@load`, `@namespace`, or an indirect call `@f`.
    At(&'a str),
    Op(&'a [u8]),
    Newline,
}

const OPS3: &[&[u8]] = &[b"**="];
const OPS2: &[&[u8]] = &[
    b"||", b"&&", b"|&", b"==", b"!=", b"<=", b">=", b"++", b"--", b"+=", b"-=", b"*=", b"/=",
    b"%=", b"^=", b"**", b"!~", b">>",
];

fn lex(src: &[u8]) -> Result<Vec<Tok<'_>>, ()> {
    let mut toks: Vec<Tok> = Vec::new();
    // Whether a `/` here starts a regular expression (an operand is expected).
    let mut regex_ok = true;
    // For each open parenthesis: whether it holds an `if`/`while`/`for`/`switch` condition.
    let mut parens: Vec<bool> = Vec::new();
    let mut i = 0;
    while let Some(&c) = src.get(i) {
        match c {
            b' ' | b'\t' | b'\r' | b'\x0b' | b'\x0c' => i += 1,
            b'\\' => match (src.get(i + 1), src.get(i + 2)) {
                (Some(b'\n'), _) => i += 2,
                (Some(b'\r'), Some(b'\n')) => i += 3,
                _ => return Err(()),
            },
            b'\n' => {
                toks.push(Tok::Newline);
                regex_ok = true;
                i += 1;
            }
            b'#' => {
                while src.get(i).is_some_and(|&b| b != b'\n') {
                    i += 1;
                }
            }
            b'"' => {
                let (value, certain, end) = string(src, i + 1)?;
                toks.push(Tok::Str(value, certain));
                regex_ok = false;
                i = end;
            }
            b'/' if regex_ok => {
                i = regex_end(src, i + 1)?;
                toks.push(Tok::Regex);
                regex_ok = false;
            }
            b'@' if src.get(i + 1) == Some(&b'/') => {
                // gawk's strongly typed regexp constant `@/…/`.
                i = regex_end(src, i + 2)?;
                toks.push(Tok::Regex);
                regex_ok = false;
            }
            b'@' => {
                let end = name_end(src, i + 1);
                let name = std::str::from_utf8(&src[i + 1..end]).map_err(|_| ())?;
                toks.push(Tok::At(name));
                regex_ok = false;
                i = end;
            }
            b'0'..=b'9' | b'.' if c != b'.' || src.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i += 1;
                while let Some(&b) = src.get(i) {
                    let sign = matches!(b, b'+' | b'-') && matches!(src[i - 1], b'e' | b'E');
                    if b.is_ascii_alphanumeric() || b == b'.' || sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
                toks.push(Tok::Num);
                regex_ok = false;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let end = name_end(src, i);
                let name = std::str::from_utf8(&src[i..end]).map_err(|_| ())?;
                regex_ok = OPERAND_NEXT.contains(&unqualified(name));
                toks.push(Tok::Name(name));
                i = end;
            }
            _ => {
                let len = [OPS3, OPS2]
                    .iter()
                    .zip([3, 2])
                    .find(|(ops, n)| src.get(i..i + n).is_some_and(|s| ops.contains(&s)))
                    .map_or(1, |(_, n)| n);
                let op = &src[i..i + len];
                match op {
                    b"(" => {
                        let condition = matches!(toks.last(), Some(Tok::Name(n)) if CONDITION.contains(&unqualified(n)));
                        parens.push(condition);
                        regex_ok = true;
                    }
                    b")" => regex_ok = parens.pop().unwrap_or(false),
                    b"]" | b"++" | b"--" => regex_ok = false,
                    _ => regex_ok = true,
                }
                toks.push(Tok::Op(op));
                i += len;
            }
        }
    }
    Ok(toks)
}

/// End of a name: letters, digits, `_`, and gawk's `ns::name`.
fn name_end(src: &[u8], mut i: usize) -> usize {
    loop {
        match src.get(i) {
            Some(b) if b.is_ascii_alphanumeric() || *b == b'_' => i += 1,
            Some(b':') if src.get(i + 1) == Some(&b':') => i += 2,
            _ => return i,
        }
    }
}

/// Reads a string constant after its opening quote: its bytes, whether every escape is read the
/// same by all awks, and the index after the closing quote. A raw newline is an error in awk.
fn string(src: &[u8], mut i: usize) -> Result<(Vec<u8>, bool, usize), ()> {
    let mut value = Vec::new();
    let mut certain = true;
    loop {
        let c = *src.get(i).ok_or(())?;
        i += 1;
        match c {
            b'"' => return Ok((value, certain, i)),
            b'\n' => return Err(()),
            b'\\' => {
                let e = *src.get(i).ok_or(())?;
                i += 1;
                match e {
                    b'\n' => {}
                    b'n' => value.push(b'\n'),
                    b't' => value.push(b'\t'),
                    b'r' => value.push(b'\r'),
                    b'a' => value.push(7),
                    b'b' => value.push(8),
                    b'f' => value.push(12),
                    b'v' => value.push(11),
                    b'0'..=b'7' => {
                        let mut n = u32::from(e - b'0');
                        for _ in 0..2 {
                            match src.get(i) {
                                Some(d @ b'0'..=b'7') => {
                                    n = n * 8 + u32::from(d - b'0');
                                    i += 1;
                                }
                                _ => break,
                            }
                        }
                        value.push((n & 0xff) as u8);
                    }
                    b'x' => {
                        let digits = src[i..]
                            .iter()
                            .take_while(|d| d.is_ascii_hexdigit())
                            .count();
                        // gawk 5 reads two hex digits; older awks read them all.
                        certain &= digits <= 2;
                        let take = digits.min(2);
                        match std::str::from_utf8(&src[i..i + take])
                            .ok()
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                        {
                            Some(b) => value.push(b),
                            None => {
                                value.extend_from_slice(b"\\x");
                                certain = false;
                            }
                        }
                        i += take;
                    }
                    // `\"`, `\\`, `\/`, and (gawk: with a warning) any other character as itself.
                    other => value.push(other),
                }
            }
            _ => value.push(c),
        }
    }
}

/// Reads a regular expression constant after its opening `/`; returns the index after the
/// closing `/`. A `/` inside a bracket expression does not close it (gawk and mawk agree).
fn regex_end(src: &[u8], mut i: usize) -> Result<usize, ()> {
    let mut in_bracket = false;
    loop {
        let c = *src.get(i).ok_or(())?;
        match c {
            b'\n' => return Err(()),
            b'\\' => {
                src.get(i + 1).ok_or(())?;
                i += 2;
            }
            b'[' if !in_bracket => {
                in_bracket = true;
                i += 1;
                if src.get(i) == Some(&b'^') {
                    i += 1;
                }
                if src.get(i) == Some(&b']') {
                    i += 1;
                }
            }
            b'[' if matches!(src.get(i + 1), Some(b':' | b'.' | b'=')) => {
                // `[:alpha:]`, `[.x.]`, `[=x=]` inside a bracket expression.
                let close = [src[i + 1], b']'];
                let rest = &src[i + 2..];
                let end = rest.windows(2).position(|w| w == close).ok_or(())?;
                i += 2 + end + 2;
            }
            b']' if in_bracket => {
                in_bracket = false;
                i += 1;
            }
            b'/' if !in_bracket => return Ok(i + 1),
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
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
}
