//! sqlite3 (the command-line shell): arguments after the database are SQL or dot-commands, and
//! so are `-cmd` values and a literal heredoc or here-string on stdin. Dot-commands that start
//! programs: `.shell`/`.system` (through `system()`), `.once|.output |cmd`, `.read |cmd`,
//! `.import |cmd` (through `popen()`), `.excel`, `.once -x|-e` and `.www` (through `xdg-open`).
//! `.read FILE`, `-init FILE`, `.load` and `load_extension()` are opaque; the SQL function
//! `edit(text, editor)` runs its editor through `system()`. Like sqlite3, a dot-command name may be
//! abbreviated; every command an abbreviation could mean is assumed.
//!
//! Without SQL arguments sqlite3 reads its commands from stdin, which is opaque unless it is a
//! literal heredoc or here-string.

use super::args::{c_string, Stdin};
use super::found::too_many;
use crate::parser::getopt::Arg;
use crate::parser::inner::{Inner, Seen};

/// Options whose value is the next argument (`-lookaside` and `-pagecache` take two).
const WITH_VALUE: &[&str] = &[
    "separator",
    "nullvalue",
    "newline",
    "cmd",
    "init",
    "heap",
    "threadsafe",
    "mmap",
    "vfs",
    "maxsize",
    "nonce",
    "lookaside",
    "pagecache",
];

pub fn find(args: &[Option<String>], stdin: Stdin, out: &mut Vec<Inner>) {
    let mut database_seen = false;
    let mut reads_stdin = true;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let Some(text) = arg else {
            if database_seen {
                reads_stdin = false;
                out.push(Inner::dynamic(
                    "sqlite3 SQL or dot-command only known at run time",
                ));
            }
            database_seen = true;
            continue;
        };
        let Some(option) = text.strip_prefix('-').filter(|o| !o.is_empty()) else {
            if database_seen {
                reads_stdin = false;
                command(text, out);
            }
            database_seen = true;
            continue;
        };
        let option = option.strip_prefix('-').unwrap_or(option);
        match option {
            "version" | "help" => reads_stdin = false,
            // `-A ARGS…`: the rest are `.archive` arguments, which run nothing.
            "A" => return,
            "init" => {
                let file = args.get(i).map_or("", |a| Arg::of(a).show());
                out.push(Inner::Opaque(format!("sqlite3 -init {file}")));
                i += 1;
            }
            "cmd" => {
                match args.get(i) {
                    Some(Some(text)) => command(text, out),
                    Some(None) => out.push(Inner::dynamic("sqlite3 -cmd only known at run time")),
                    None => {}
                }
                i += 1;
            }
            "lookaside" | "pagecache" => i += 2,
            o if WITH_VALUE.contains(&o) => i += 1,
            _ => {}
        }
    }
    if reads_stdin {
        match stdin() {
            Some(Some(text)) => input(&text, out),
            Some(None) => out.push(Inner::dynamic(
                "sqlite3 commands on stdin only known at run time",
            )),
            None => out.push(Inner::Opaque("sqlite3 (commands on stdin)".into())),
        }
    }
}

/// Text read as sqlite3's input: lines starting with `.` are dot-commands; all of it is SQL.
fn input(text: &str, out: &mut Vec<Inner>) {
    for line in text.lines() {
        if too_many(out) {
            return;
        }
        let line = line.trim_start();
        if line.starts_with('.') {
            dot(line, out);
        }
    }
    sql(text, out);
}

/// One SQL-or-dot-command argument.
fn command(text: &str, out: &mut Vec<Inner>) {
    if text.starts_with('.') {
        dot(text, out);
    }
    sql(text, out);
}

/// Dot-commands that can start a program, by full name.
const SPAWNING: &[&str] = &[
    "shell", "system", "once", "output", "read", "import", "excel", "www", "load", "selftest",
];

fn dot(line: &str, out: &mut Vec<Inner>) {
    let words = tokenize(&line[1..]);
    let Some(typed) = words.first() else {
        return;
    };
    let args = &words[1..];
    for name in SPAWNING
        .iter()
        .filter(|n| !typed.is_empty() && n.starts_with(typed.as_str()))
    {
        match *name {
            "shell" | "system" => {
                let joined: Vec<String> = args
                    .iter()
                    .map(|a| {
                        if a.contains(' ') {
                            format!("\"{a}\"")
                        } else {
                            a.clone()
                        }
                    })
                    .collect();
                if !joined.is_empty() {
                    out.push(Inner::Shell(joined.join(" ")));
                }
            }
            "once" | "output" => {
                for (i, arg) in args.iter().enumerate() {
                    match arg.as_str() {
                        "-x" | "-e" => out.push(Inner::Program("xdg-open".into())),
                        a if a.starts_with('-') => {}
                        a => {
                            // `|cmd` takes the rest of the line's arguments with it.
                            if let Some(cmd) = a.strip_prefix('|') {
                                let rest = args[i + 1..].iter().map(String::as_str);
                                let words: Vec<&str> = std::iter::once(cmd).chain(rest).collect();
                                out.push(Inner::Shell(words.join(" ")));
                            }
                            break;
                        }
                    }
                }
            }
            "read" => {
                if let Some(a) = args.first() {
                    match a.strip_prefix('|') {
                        Some(cmd) => out.push(Inner::Shell(cmd.to_string())),
                        None => out.push(Inner::Opaque(format!("sqlite3 .read {a}"))),
                    }
                }
            }
            "import" => {
                let mut rest = args.iter();
                while let Some(a) = rest.next() {
                    match a.as_str() {
                        "--skip" | "--schema" => {
                            rest.next();
                        }
                        a if a.starts_with('-') => {}
                        a => {
                            if let Some(cmd) = a.strip_prefix('|') {
                                out.push(Inner::Shell(cmd.to_string()));
                            }
                            break;
                        }
                    }
                }
            }
            "excel" | "www" => out.push(Inner::Program("xdg-open".into())),
            "load" => {
                let file = args.first().map_or("", String::as_str);
                out.push(Inner::Opaque(format!("sqlite3 .load {file}")));
            }
            _ => out.push(Inner::dynamic(
                "sqlite3 .selftest runs SQL stored in the database",
            )),
        }
    }
}

/// Splits a dot-command line as sqlite3 does: words, `'…'` taken as is, `"…"` and bare words with
/// C escapes resolved.
fn tokenize(line: &str) -> Vec<String> {
    let b = line.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    loop {
        while b.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        let Some(&c) = b.get(i) else {
            return words;
        };
        let mut word = Vec::new();
        if c == b'\'' || c == b'"' {
            i += 1;
            while let Some(&d) = b.get(i) {
                if d == c {
                    i += 1;
                    break;
                }
                if d == b'\\' && c == b'"' && i + 1 < b.len() {
                    word.push(d);
                    i += 1;
                }
                word.push(b[i]);
                i += 1;
            }
            if c == b'"' {
                word = unescape(&word);
            }
        } else {
            while let Some(&d) = b.get(i).filter(|d| !d.is_ascii_whitespace()) {
                word.push(d);
                i += 1;
            }
            word = unescape(&word);
        }
        words.push(c_string(&word));
    }
}

/// sqlite3's `resolve_backslashes`: `\a \b \t \n \v \f \r \" \' \\` and up to three octal digits.
fn unescape(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&c) = raw.get(i) {
        i += 1;
        if c != b'\\' || i >= raw.len() {
            out.push(c);
            continue;
        }
        let e = raw[i];
        i += 1;
        out.push(match e {
            b'a' => 7,
            b'b' => 8,
            b't' => b'\t',
            b'n' => b'\n',
            b'v' => 11,
            b'f' => 12,
            b'r' => b'\r',
            b'0'..=b'7' => {
                let mut n = u32::from(e - b'0');
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            n = n * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                (n & 0xff) as u8
            }
            other => other,
        });
    }
    out
}

/// SQL functions of the sqlite3 shell that start programs or load code: `edit(text, editor)` and
/// `load_extension(file)`. Strings, quoted identifiers and comments are skipped.
fn sql(text: &str, out: &mut Vec<Inner>) {
    let lower = text.to_ascii_lowercase();
    if !lower.contains("edit") && !lower.contains("load_extension") {
        return;
    }
    let toks = sql_tokens(text.as_bytes());
    for (i, tok) in toks.iter().enumerate() {
        if too_many(out) {
            return;
        }
        let SqlTok::Name(name) = tok else {
            continue;
        };
        if toks.get(i + 1) != Some(&SqlTok::Punct(b'(')) {
            continue;
        }
        if name.eq_ignore_ascii_case("load_extension") {
            out.push(Inner::Opaque("sqlite3 load_extension()".into()));
        } else if name.eq_ignore_ascii_case("edit") {
            out.push(edit(&toks[i + 2..]));
        }
    }
}

/// `edit(text, 'editor')` runs `editor "TEMPFILE"` through `system()`; with one argument it runs
/// `$VISUAL`.
fn edit(after_paren: &[SqlTok]) -> Inner {
    let mut depth = 0usize;
    let mut args: Vec<Vec<&SqlTok>> = vec![Vec::new()];
    for tok in after_paren {
        match tok {
            SqlTok::Punct(b'(') => depth += 1,
            SqlTok::Punct(b')') if depth == 0 => break,
            SqlTok::Punct(b')') => depth -= 1,
            SqlTok::Punct(b',') if depth == 0 => {
                args.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = args.last_mut() {
            last.push(tok);
        }
    }
    if let [_, editor] = args.as_slice() {
        if let [SqlTok::Str(editor)] = editor.as_slice() {
            return Inner::Shell(format!("{editor} \"/tmp/sqlite-edit\""));
        }
    }
    let fragments = args
        .iter()
        .flatten()
        .filter_map(|t| match t {
            SqlTok::Str(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    Inner::Dynamic {
        detail: "sqlite3 edit() runs an editor only known at run time".into(),
        seen: Seen::Pieces(fragments),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum SqlTok {
    /// A bare or quoted identifier (`edit`, `"edit"`, `[edit]`, `` `edit` ``).
    Name(String),
    Str(String),
    Punct(u8),
    Other,
}

fn sql_tokens(b: &[u8]) -> Vec<SqlTok> {
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            c if c.is_ascii_whitespace() => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while b.get(i).is_some_and(|&c| c != b'\n') {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = b[i + 2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(b.len(), |p| i + 2 + p + 2);
            }
            b'\'' | b'"' | b'`' | b'[' => {
                let close = if c == b'[' { b']' } else { c };
                let mut value = Vec::new();
                i += 1;
                while let Some(&d) = b.get(i) {
                    i += 1;
                    if d == close {
                        // A doubled quote is one quote character (not for `[…]`).
                        if c != b'[' && b.get(i) == Some(&close) {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    value.push(d);
                }
                let value = String::from_utf8_lossy(&value).into_owned();
                toks.push(if c == b'\'' {
                    SqlTok::Str(value)
                } else {
                    SqlTok::Name(value)
                });
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                let start = i;
                while b.get(i).is_some_and(|&d| {
                    d.is_ascii_alphanumeric() || d == b'_' || d == b'$' || d >= 0x80
                }) {
                    i += 1;
                }
                toks.push(SqlTok::Name(
                    String::from_utf8_lossy(&b[start..i]).into_owned(),
                ));
            }
            b'(' | b')' | b',' => {
                toks.push(SqlTok::Punct(c));
                i += 1;
            }
            _ => {
                toks.push(SqlTok::Other);
                i += 1;
            }
        }
    }
    toks
}

#[cfg(test)]
mod tests;
