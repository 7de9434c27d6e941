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

mod lex;

use super::args::c_string;
use super::found::too_many;
use crate::parser::getopt::{getopt, Arg, Ev, Has, Spec};
use crate::parser::inner::{Inner, Seen};
use lex::{lex, unqualified, Tok, CONDITION, OPERAND_NEXT};

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

#[cfg(test)]
mod tests;
