//! Bad input: `classify` never panics, never hangs, and always answers with a decision that its
//! reasons justify. Runs arbitrary bytes (the fuzz target's property, in CI) and pathological
//! 64 KiB scripts under a time bound.

use kube_harness_classify::{classify, ClassifyOptions, Decision, Reason, MAX_SCRIPT_BYTES};
use proptest::prelude::*;
use std::time::Duration;

/// Generous for debug builds; the parse budget itself is 500 ms. Measured in CPU time of the
/// classifying thread, so that a loaded machine (or the other tests of this binary) does not
/// count: what this bounds is the work a script can make the classifier do.
const BOUND: Duration = Duration::from_secs(5);

/// CPU time used by the calling thread so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn check(script: &str, options: &ClassifyOptions) -> Decision {
    let got = classify(script, options);
    assert!(!got.reasons.is_empty(), "no reasons for {script:?}");
    for reason in &got.reasons {
        if let Reason::ClassifierUnavailable { detail } = reason {
            assert_ne!(
                detail, "internal classifier error",
                "the walk panicked on {script:?}"
            );
        }
    }
    let only_tier0 = got
        .reasons
        .iter()
        .all(|r| matches!(r, Reason::Tier0Supported { .. } | Reason::EmptyScript));
    assert_eq!(got.decision == Decision::Tier0, only_tier0, "{got:?}");
    got.decision
}

fn timed(label: &str, script: &str) -> Decision {
    let options = ClassifyOptions {
        policy: kube_harness_classify::Policy {
            deny_commands: vec!["docker".into()],
            rule: None,
        },
        ..ClassifyOptions::default()
    };
    let start = thread_cpu();
    let decision = check(script, &options);
    let took = thread_cpu().saturating_sub(start);
    assert!(
        took < BOUND,
        "{label}: {} bytes took {took:?}",
        script.len()
    );
    decision
}

const TOKENS: &[&str] = &[
    " ",
    "\n",
    ";",
    "&&",
    "||",
    "|",
    "|&",
    "&",
    "(",
    ")",
    "{",
    "}",
    "$(",
    "`",
    "'",
    "\"",
    "\\",
    "<<EOF",
    "<<'EOF'",
    "EOF",
    "<<<",
    "<(",
    ">(",
    ">",
    "2>&1",
    "!",
    "if",
    "then",
    "fi",
    "for",
    "in",
    "do",
    "done",
    "case",
    "esac",
    ";;",
    "f()",
    "function",
    "bash -c",
    "sh -c",
    "eval",
    "env",
    "xargs",
    "timeout 5",
    "find . -exec",
    "\\;",
    "{}",
    "git",
    "ls",
    "cat",
    "make",
    "$X",
    "${X:-",
    "$((",
    "))",
    "[[",
    "]]",
    "=",
    "a=",
    "export",
    "local",
    "#",
    "$'\\x67'",
    "source",
    "./x.sh",
    "docker",
    "curl",
    "python3 -m pip",
    // Substitutions left as text, evaluated values, wrappers and env -S (issue 12, second round).
    "${x@P}",
    "${x#",
    "=~",
    "\\\n",
    "$\\\n(",
    "env -S",
    "env -S '\\_",
    "coproc",
    "flock f -c",
    "su -c",
    "watch",
    "parallel",
    ":::",
    "gdb --args",
    "declare -n r=",
    "TAR_OPTIONS",
    "read",
    "printf -v",
    "mapfile",
    "é",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check(&String::from_utf8_lossy(&bytes), &ClassifyOptions::default());
    }

    #[test]
    fn shell_token_soup_never_panics(tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..200)) {
        let script = tokens.concat();
        check(&script, &ClassifyOptions::default());
    }
}

/// Pieces of awk, sed and sqlite3 programs, for the scanners that read a tool's own program.
const PROGRAM_TOKENS: &[&str] = &[
    " ",
    "\n",
    ";",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "/",
    "\\",
    "\"",
    "'",
    "#",
    "|",
    "|&",
    "||",
    "@",
    "@/",
    "$",
    "system",
    "getline",
    "print",
    "printf",
    "if",
    "while",
    "for",
    "in",
    "BEGIN",
    "git",
    "ls",
    "=",
    ",",
    "!",
    "~",
    "++",
    "1",
    "\\x67",
    "\\151",
    "e",
    "s",
    "y",
    "a",
    "i",
    "c",
    "w",
    "r",
    ":",
    "b",
    "p",
    "{}",
    "[:alpha:]",
    "^",
    "$!",
    ".shell",
    ".system",
    ".once",
    ".read",
    ".import",
    "|git",
    "edit(",
    "load_extension(",
    "--",
    "-e",
    "-f",
    "-W",
    "--source=",
    "--to-command=",
    "--checkpoint-action=exec=",
    "-I",
    "\0",
    "é",
    "\u{10FFFF}",
];

/// A tool run with `program` as its program text, quoted for the shell.
fn tool_with(tool: usize, program: &str) -> String {
    let quoted = format!("'{}'", program.replace('\'', r"'\''"));
    match tool % 8 {
        0 => format!("awk {quoted} f"),
        1 => format!("gawk -e {quoted} -f x {quoted}"),
        2 => format!("sed -n {quoted} f"),
        3 => format!("sqlite3 db {quoted}"),
        4 => format!("sqlite3 db <<'EOF'\n{program}\nEOF"),
        5 => format!("tar -xf a.tar {quoted}"),
        6 => format!("trap {quoted} EXIT; unset {quoted}"),
        _ => format!("sort {quoted} f; split {quoted}; rg {quoted}"),
    }
}

fn denying_git() -> ClassifyOptions {
    let mut options = ClassifyOptions::default();
    options.policy.deny_commands.push("git".into());
    options
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// The scanners for programs inside Tier-0 tools (awk, sed, sqlite3, tar, builtins) never
    /// panic or hang on arbitrary program text, and the decision follows from the reasons.
    #[test]
    fn arbitrary_tool_programs_never_panic(tool in 0..8usize, bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
        let script = tool_with(tool, &String::from_utf8_lossy(&bytes));
        check(&script, &denying_git());
    }

    #[test]
    fn tool_program_token_soup_never_panics(
        tool in 0..8usize,
        tokens in prop::collection::vec(prop::sample::select(PROGRAM_TOKENS), 0..120),
    ) {
        let script = tool_with(tool, &tokens.concat());
        check(&script, &denying_git());
    }
}

fn repeat_to(unit: &str, bytes: usize) -> String {
    unit.repeat(bytes / unit.len().max(1))
}

#[test]
fn pathological_64k_scripts_are_classified_in_bounded_time() {
    const K64: usize = 64 * 1024;
    let cases: Vec<(&str, String)> = vec![
        ("open parens", repeat_to("(", K64)),
        ("open substitutions", repeat_to("$(", K64)),
        (
            "balanced nested substitutions",
            format!("{}ls{}", "$(".repeat(4000), ")".repeat(4000)),
        ),
        (
            "nested subshells",
            format!("{}ls{}", "(".repeat(8000), ")".repeat(8000)),
        ),
        ("long and-chain", repeat_to("ls && ", K64) + "ls"),
        ("long pipeline", repeat_to("cat | ", K64) + "cat"),
        ("many heredocs", repeat_to("cat <<EOF\n$(ls)\nEOF\n", K64)),
        (
            "backquotes in heredoc",
            format!("cat <<EOF\n{}\nEOF", repeat_to("`ls` ", K64)),
        ),
        ("one huge word", "a".repeat(K64)),
        ("huge quoted string", format!("echo '{}'", "x".repeat(K64))),
        (
            "bang chain",
            format!("{}if true; then ls; fi", "! ".repeat(K64 / 2)),
        ),
        ("eval chain", repeat_to("eval ", K64) + "ls"),
        ("deep functions", repeat_to("f() { ", K64 / 2)),
        (
            "random bytes",
            (0..K64)
                .map(|i| ((i * 7919 + 13) % 251) as u8 as char)
                .collect(),
        ),
        ("docker everywhere", repeat_to("docker ps; ", K64)),
        // Substitutions left as text, values, wrappers (issue 12, second round).
        (
            "prompt expansions",
            repeat_to("x=$(ls); echo ${x@P} ${y@P}; ", K64),
        ),
        (
            "backquotes in expansions",
            repeat_to("echo ${x:-`ls`}; ", K64),
        ),
        (
            "nested backquotes",
            format!("echo {}", repeat_to("`echo \\`ls\\`` ", K64 - 8)),
        ),
        ("evaluated values", repeat_to("x='a[$(ls)]'; ", K64)),
        ("line continuations", repeat_to("l\\\ns ", K64)),
        ("env -S chain", repeat_to("env -S ", K64) + "ls"),
        (
            "wrapper chain",
            repeat_to("setsid nohup flock f ", K64) + "ls",
        ),
        (
            "nameref chain",
            (0..3000)
                .map(|i| format!("declare -n r{}=r{i}; ", i + 1))
                .collect::<String>()
                + "declare -n r0=TAR_OPTIONS; r3000=-Igit",
        ),
        // Programs inside Tier-0 tools (issue 12, failure 5): every scanner stays linear.
        (
            "awk: thousands of system calls",
            format!("awk '{}'", repeat_to("system(", K64 - 8)),
        ),
        (
            "awk: system calls with literal commands",
            format!(
                "awk 'BEGIN {{ {} }}'",
                repeat_to("system(\"ls\"); ", K64 - 16)
            ),
        ),
        (
            "awk: deep parentheses after system",
            format!("awk 'BEGIN {{ system{} }}'", repeat_to("(", K64 - 20)),
        ),
        (
            "awk: pipes",
            format!("awk '{}'", repeat_to("print | x ", K64 - 8)),
        ),
        (
            "awk: getline pipes",
            format!("awk '{}'", repeat_to("x | getline ", K64 - 8)),
        ),
        (
            "awk: regexps",
            format!("awk '{}'", repeat_to("/[[:alpha:]|]/ ", K64 - 8)),
        ),
        (
            "sed: e commands",
            format!("sed '{}' f", repeat_to("1e ls\n", K64 - 8)),
        ),
        (
            "sed: blocks",
            format!("sed '{}' f", repeat_to("1{", K64 - 8)),
        ),
        (
            "sed: s///e",
            format!("sed '{}' f", repeat_to("s/.*/ls/e;", K64 - 8)),
        ),
        (
            "sqlite3: dot-commands",
            format!(
                "sqlite3 db <<'EOF'\n{}EOF",
                repeat_to(".shell ls\n", K64 - 16)
            ),
        ),
        (
            "sqlite3: edit calls",
            format!("sqlite3 db \"{}\"", repeat_to("edit(", K64 - 16)),
        ),
        (
            "tar: exec options",
            format!("tar {}", repeat_to("--to-command=ls ", K64 - 8)),
        ),
        ("trap actions", repeat_to("trap 'ls' EXIT; ", K64)),
    ];
    for (label, script) in &cases {
        timed(label, script);
    }
}

#[test]
fn nested_scripts_stop_at_the_nesting_limit() {
    let script = format!("{}git status", "eval ".repeat(40));
    let got = classify(&script, &ClassifyOptions::default());
    assert_eq!(got.decision, Decision::Escalate);
    assert!(got.kinds().contains(&"classifier-unavailable"), "{got:?}");
    let mut script = "git status".to_string();
    for _ in 0..(kube_harness_classify::MAX_NESTING + 2) {
        script = format!("bash -c {}", shell_quote(&script));
    }
    let got = classify(&script, &ClassifyOptions::default());
    assert!(got.kinds().contains(&"classifier-unavailable"), "{got:?}");
}

/// Double-quoting grows linearly with depth (single-quote escaping would grow exponentially).
fn shell_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[test]
fn oversized_scripts_are_unavailable_not_parsed_and_denied_words_still_refuse() {
    let script = format!("{}docker ps", "ls\n".repeat(MAX_SCRIPT_BYTES / 3 + 1));
    let got = classify(&script, &ClassifyOptions::default());
    assert_eq!(got.decision, Decision::Escalate);
    assert_eq!(got.kinds(), ["classifier-unavailable"]);
    assert_eq!(
        timed("oversized with a denied word", &script),
        Decision::Refuse
    );
}

/// tree-sitter-bash's scanner crashed on a high code point after `{` (isdigit() past the ctype
/// table); the classifier parses an ASCII stand-in. Non-ASCII text is still classified as written.
#[test]
fn non_ascii_text_is_classified_and_never_crashes_the_scanner() {
    for c in ['\u{10FFFF}', '\u{FFFD}', 'é', '😀', '\u{A0}'] {
        for script in [
            format!("echo {{{c}"),
            format!("echo {{{c}..5}}"),
            format!("{c}"),
            format!("cat <<{c}EOF\n$(git x)\n{c}EOF"),
            format!("echo '{c}' \"{c}\" $'{c}' {c}{c}"),
            // An ERROR node that ends inside the character (found by the property test in CI).
            format!("\\\r{c}\0"),
            format!("\\\r{c}\"s{c}"),
        ] {
            check(&script, &ClassifyOptions::default());
        }
    }
    let got = classify(
        "echo héllo wörld > /session/ü.txt && cat /session/ü.txt",
        &ClassifyOptions::default(),
    );
    assert_eq!(got.decision, Decision::Tier0);
    let got = classify("gït status", &ClassifyOptions::default());
    assert_eq!(
        got.reasons[0],
        Reason::UnknownCommand {
            command: "gït".into()
        }
    );
    let got = classify("echo ✓ && git status", &ClassifyOptions::default());
    assert_eq!(got.decision, Decision::Escalate);
}
