//! sed (GNU): the `e` command runs a command (`e CMD`) or the pattern space (`e`), and the `e`
//! flag of `s///` runs the pattern space after the substitution. Scripts come from the first
//! operand or every `-e`; `-f FILE` is opaque. The script is read with GNU sed's own rules
//! (addresses, `{}` blocks, the text of `a`/`i`/`c`, file names of `r`/`w` up to the end of the
//! line, custom delimiters, bracket expressions), because an `e` inside text, a file name or a
//! regular expression runs nothing.

use super::found::{too_many, MAX_FOUND};
use crate::parser::getopt::{getopt, Arg, Ev, Has, Spec};
use crate::parser::inner::{Inner, Seen};

const SPEC: Spec = Spec {
    short_req: "efl",
    short_opt: "i",
    long: &[
        ("binary", Has::No),
        ("debug", Has::No),
        ("expression", Has::Req),
        ("file", Has::Req),
        ("follow-symlinks", Has::No),
        ("help", Has::No),
        ("in-place", Has::Opt),
        ("line-length", Has::Req),
        ("null-data", Has::No),
        ("posix", Has::No),
        ("quiet", Has::No),
        ("regexp-extended", Has::No),
        ("sandbox", Has::No),
        ("separate", Has::No),
        ("silent", Has::No),
        ("unbuffered", Has::No),
        ("version", Has::No),
        ("zero-terminated", Has::No),
    ],
    exact_long: false,
    stop_at_operand: false,
    w_is_long: false,
};

pub fn find(tool: &str, args: &[Option<String>], out: &mut Vec<Inner>) {
    let mut pieces: Vec<&str> = Vec::new();
    let mut has_script = false;
    let mut dynamic = false;
    let mut first_operand = None;
    getopt(&SPEC, args, |ev| match ev {
        Ev::Short('e', v) | Ev::Long("expression", v) => {
            has_script = true;
            match v {
                Some(Arg::Lit(text)) => pieces.push(text),
                _ => dynamic = true,
            }
        }
        Ev::Short('f', v) | Ev::Long("file", v) => {
            has_script = true;
            let file = v.map_or("", Arg::show);
            out.push(Inner::Opaque(format!("{tool} -f {file}")));
        }
        Ev::Operand(arg) => {
            first_operand.get_or_insert(arg);
        }
        _ => {}
    });
    if !has_script {
        match first_operand {
            Some(Arg::Lit(text)) => pieces.push(text),
            Some(Arg::Dyn) => dynamic = true,
            None => {}
        }
    }
    if dynamic {
        out.push(Inner::dynamic("the sed script is only known at run time"));
    }
    // GNU sed joins the -e pieces with newlines into one script.
    let script = pieces.join("\n");
    scan(&script, out);
}

/// Finds what a sed script would run.
pub fn scan(script: &str, out: &mut Vec<Inner>) {
    // The `e` command and the `e` flag both need the letter.
    if !script.contains('e') {
        return;
    }
    let mut p = Parser {
        src: script.as_bytes(),
        i: 0,
        uncertain: false,
    };
    let mut found = Vec::new();
    let complete = p.script(&mut found).is_ok();
    if !complete || p.uncertain {
        out.push(Inner::dynamic("a sed script the classifier could not read"));
    }
    if found.len() > MAX_FOUND {
        found.truncate(MAX_FOUND);
        too_many(&mut found);
    }
    out.extend(found);
}

struct Parser<'a> {
    src: &'a [u8],
    i: usize,
    /// A delimiter or backslash inside a bracket expression: sed versions read these differently.
    uncertain: bool,
}

type Res<T> = Result<T, ()>;

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.i).copied()
    }

    fn next(&mut self) -> Res<u8> {
        let c = self.peek().ok_or(())?;
        self.i += 1;
        Ok(c)
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
            self.i += 1;
        }
    }

    /// The rest of the line (not including the newline).
    fn rest_of_line(&mut self) -> &[u8] {
        let start = self.i;
        while self.peek().is_some_and(|c| c != b'\n') {
            self.i += 1;
        }
        &self.src[start..self.i]
    }

    fn script(&mut self, found: &mut Vec<Inner>) -> Res<()> {
        loop {
            while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n' | b';')) {
                self.i += 1;
            }
            let Some(c) = self.peek() else {
                return Ok(());
            };
            if c == b'#' {
                self.rest_of_line();
                continue;
            }
            if self.address()? {
                self.skip_blanks();
                if self.peek() == Some(b',') {
                    self.i += 1;
                    self.skip_blanks();
                    if !self.address()? {
                        return Err(());
                    }
                }
            }
            self.skip_blanks();
            while self.peek() == Some(b'!') {
                self.i += 1;
                self.skip_blanks();
            }
            let cmd = self.next()?;
            match cmd {
                b'{' => continue,
                b'}' | b'=' | b'd' | b'D' | b'g' | b'G' | b'h' | b'H' | b'n' | b'N' | b'p'
                | b'P' | b'x' | b'z' | b'F' => {}
                b'l' | b'L' | b'q' | b'Q' => {
                    self.skip_blanks();
                    while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        self.i += 1;
                    }
                }
                b':' | b'b' | b't' | b'T' | b'v' => {
                    // A label (or version) ends at a newline or `;`.
                    while self.peek().is_some_and(|c| c != b'\n' && c != b';') {
                        self.i += 1;
                    }
                    continue;
                }
                b'a' | b'i' | b'c' => {
                    self.text()?;
                    continue;
                }
                b'r' | b'R' | b'w' | b'W' => {
                    self.rest_of_line();
                    continue;
                }
                b'e' => {
                    self.skip_blanks();
                    let command = String::from_utf8_lossy(self.rest_of_line()).into_owned();
                    found.push(if command.trim().is_empty() {
                        Inner::dynamic("sed `e` runs the pattern space as a command")
                    } else {
                        Inner::Shell(command)
                    });
                    continue;
                }
                b'y' => {
                    let delim = self.delimiter()?;
                    self.part(delim, false)?;
                    self.part(delim, false)?;
                }
                b's' => {
                    if self.substitute(found)? {
                        continue;
                    }
                }
                _ => return Err(()),
            }
            self.end_of_command()?;
        }
    }

    /// After a command: blanks, then the end of the script, a newline, `;`, `}` or a comment.
    fn end_of_command(&mut self) -> Res<()> {
        self.skip_blanks();
        match self.peek() {
            None | Some(b'\n' | b';' | b'}' | b'#') => Ok(()),
            Some(_) => Err(()),
        }
    }

    /// An optional address: a line number, `first~step`, `$`, `/re/`, `\cREc`, `+N`, `~N`.
    fn address(&mut self) -> Res<bool> {
        match self.peek() {
            Some(c) if c.is_ascii_digit() || c == b'+' || c == b'~' => {
                self.i += 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == b'~') {
                    self.i += 1;
                }
            }
            Some(b'$') => self.i += 1,
            Some(b'/') => {
                self.i += 1;
                self.part(b'/', true)?;
                self.regex_flags();
            }
            Some(b'\\') => {
                self.i += 1;
                let delim = self.delimiter()?;
                self.part(delim, true)?;
                self.regex_flags();
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn regex_flags(&mut self) {
        while matches!(self.peek(), Some(b'I' | b'M')) {
            self.i += 1;
        }
    }

    fn delimiter(&mut self) -> Res<u8> {
        match self.next()? {
            b'\n' | b'\\' => Err(()),
            d => Ok(d),
        }
    }

    /// One delimited part (a regexp when `regex`, else a replacement or `y` list); returns its
    /// raw text.
    fn part(&mut self, delim: u8, regex: bool) -> Res<&[u8]> {
        let start = self.i;
        let mut in_bracket = false;
        loop {
            let c = self.next()?;
            match c {
                b'\\' => {
                    if in_bracket {
                        self.uncertain = true;
                    }
                    self.next()?;
                }
                b'\n' if !in_bracket => return Err(()),
                b'[' if regex && !in_bracket => {
                    in_bracket = true;
                    if self.peek() == Some(b'^') {
                        self.i += 1;
                    }
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    }
                }
                b'[' if in_bracket && matches!(self.peek(), Some(b':' | b'.' | b'=')) => {
                    let close = [self.next()?, b']'];
                    let rest = &self.src[self.i..];
                    let end = rest.windows(2).position(|w| w == close).ok_or(())?;
                    self.i += end + 2;
                }
                b']' if in_bracket => in_bracket = false,
                d if d == delim && in_bracket => self.uncertain = true,
                d if d == delim => return Ok(&self.src[start..self.i - 1]),
                _ => {}
            }
        }
    }

    /// `s/re/replacement/flags`; returns true when a `w FILE` flag consumed the line.
    fn substitute(&mut self, found: &mut Vec<Inner>) -> Res<bool> {
        let delim = self.delimiter()?;
        let regex = self.part(delim, true)?.to_vec();
        let replacement = self.part(delim, false)?.to_vec();
        let mut exec = false;
        let mut line_taken = false;
        loop {
            match self.peek() {
                Some(b'g' | b'p' | b'i' | b'I' | b'm' | b'M' | b' ' | b'\t') => self.i += 1,
                Some(c) if c.is_ascii_digit() => self.i += 1,
                Some(b'e') => {
                    exec = true;
                    self.i += 1;
                }
                Some(b'w') => {
                    self.i += 1;
                    self.rest_of_line();
                    line_taken = true;
                    break;
                }
                _ => break,
            }
        }
        if exec {
            found.push(substituted_command(&regex, &replacement));
        }
        Ok(line_taken)
    }

    /// The text of `a`, `i`, `c`: GNU's one-line form (`a text`) or the classic `a\` form, up to
    /// a newline that no backslash escapes.
    fn text(&mut self) -> Res<()> {
        self.skip_blanks();
        if self.peek() == Some(b'\\') {
            self.i += 1;
            if self.peek() == Some(b'\n') {
                self.i += 1;
            }
        }
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                b'\\' => self.i += 1,
                b'\n' => break,
                _ => {}
            }
        }
        self.i = self.i.min(self.src.len());
        Ok(())
    }
}

/// What `s/re/replacement/e` runs: the replacement itself when the regexp matches the whole
/// pattern space and the replacement has no `&` or escape, else a run-time command.
fn substituted_command(regex: &[u8], replacement: &[u8]) -> Inner {
    let whole = matches!(regex, b".*" | b"^.*" | b".*$" | b"^.*$");
    let plain = !replacement.contains(&b'&') && !replacement.contains(&b'\\');
    let text = String::from_utf8_lossy(replacement).into_owned();
    if whole && plain && !text.trim().is_empty() {
        return Inner::Shell(text);
    }
    Inner::Dynamic {
        detail: "sed s///e runs the substituted pattern space as a command".into(),
        seen: Seen::Pieces(vec![text]),
    }
}

#[cfg(test)]
mod tests {
    use super::super::args::test_args as args;
    use super::*;

    fn found(script: &str) -> Vec<Inner> {
        let mut out = Vec::new();
        scan(script, &mut out);
        out
    }

    fn shell(s: &str) -> Vec<Inner> {
        vec![Inner::Shell(s.into())]
    }

    #[test]
    fn finds_the_e_command() {
        assert_eq!(found("1e git --version"), shell("git --version"));
        assert_eq!(found("e git"), shell("git"));
        assert_eq!(found("$ e git status\np"), shell("git status"));
        assert_eq!(found("/x/,/y/!{e git\n}"), shell("git"));
        assert_eq!(found("1{p;e git\n}"), shell("git"));
        assert_eq!(found("s/a/b/;e git"), shell("git"));
        assert_eq!(found("s/.*/git --version/e"), shell("git --version"));
        assert_eq!(found("s,^.*$,git log,e"), shell("git log"));
        assert_eq!(found("1 s/.*/git/ge"), shell("git"));
        assert_eq!(
            found("sxaxgitxe"),
            vec![Inner::Dynamic {
                detail: "sed s///e runs the substituted pattern space as a command".into(),
                seen: Seen::Pieces(vec!["git".into()]),
            }]
        );
        for script in ["e", "1e", "s/x/y/e", "s/.*/& x/e", "\\,x,e"] {
            let got = found(script);
            assert!(
                got.iter().any(|h| matches!(h, Inner::Dynamic { .. })),
                "{script}: {got:?}"
            );
        }
    }

    #[test]
    fn text_file_names_and_patterns_are_not_commands() {
        for script in [
            "s/e/x/",
            "s/a/b/g",
            "/e/d",
            "/^#/d;s/e//g",
            "a\\\ne git",
            "1a see here",
            "i\\\nline one\\\ne git",
            "w /dev/stderr; e git",
            "s/x/y/w out; e git",
            "r /etc/e",
            ":e;N;$!be;s/\\n/ /g",
            "y/abe/xyz/",
            "s/x/y/ g",
            "/[[:space:]]e/p",
            "\\%e%d",
            "$!N;P;D",
            "# e git\np",
            "/start/,/end/{/e/d}",
            "0,/re/s//X/",
        ] {
            let got = found(script);
            assert!(
                !got.iter().any(|h| matches!(h, Inner::Shell(_))),
                "{script}: {got:?}"
            );
            assert!(
                !got.iter().any(|h| matches!(h, Inner::Dynamic { .. })),
                "{script}: {got:?}"
            );
        }
    }

    #[test]
    fn unreadable_scripts_with_an_e_are_dynamic() {
        for script in ["s/e", "k e", "s/[/]/x/e"] {
            let got = found(script);
            assert!(
                got.iter().any(|h| matches!(h, Inner::Dynamic { .. })),
                "{script}: {got:?}"
            );
        }
    }

    fn run(words: &[&str]) -> Vec<Inner> {
        let mut out = Vec::new();
        find("sed", &args(words), &mut out);
        out
    }

    #[test]
    fn finds_the_script_where_sed_does() {
        assert_eq!(run(&["-n", "1e git", "f"]), shell("git"));
        assert_eq!(run(&["-e", "p", "-e", "1e git"]), shell("git"));
        assert_eq!(run(&["--expression=1e git"]), shell("git"));
        assert_eq!(run(&["-ne", "1e git"]), shell("git"));
        assert_eq!(run(&["f", "-e", "1e git"]), shell("git"));
        // `-i` takes an attached suffix: `-ie` is a suffix, and the script is the operand.
        assert_eq!(run(&["-ie", "s/a/b/", "1e git"]), vec![]);
        assert_eq!(run(&["-e", "s/a/b/", "1e git"]), vec![]);
        assert_eq!(run(&["s/e/x/", "e-file"]), vec![]);
        assert_eq!(
            run(&["-f", "s.sed", "x"]),
            vec![Inner::Opaque("sed -f s.sed".into())]
        );
        assert!(matches!(
            run(&["$", "f"]).as_slice(),
            [Inner::Dynamic { .. }]
        ));
        assert!(matches!(
            run(&["-e", "$"]).as_slice(),
            [Inner::Dynamic { .. }]
        ));
    }
}
