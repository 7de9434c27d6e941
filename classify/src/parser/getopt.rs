//! The one option reader: GNU `getopt_long` over a command's literal arguments, for the wrappers
//! (`sudo -u root git`, `timeout -s KILL 5 git`) and for the tools whose options can run a command
//! (`awk -f`, `sed -e`). It reports each option with its value the way the program itself would
//! read them, so a value is never mistaken for an option, an operand for the program text, or an
//! option's value for the wrapped command.

use super::hidden::split_run_time;
use std::collections::VecDeque;

/// An argument as the classifier knows it: literal text, or only known at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg<'a> {
    Lit(&'a str),
    Dyn,
}

impl<'a> Arg<'a> {
    pub fn of(arg: &'a Option<String>) -> Arg<'a> {
        match arg.as_deref().map(split_run_time) {
            Some((text, false)) => Arg::Lit(text),
            _ => Arg::Dyn,
        }
    }

    /// The value after an option's name or letter in the same word.
    pub fn rest(text: &'a str, run_time: bool) -> Arg<'a> {
        if run_time {
            Arg::Dyn
        } else {
            Arg::Lit(text)
        }
    }

    /// The literal text, or a placeholder for a run-time value (for reason strings).
    pub fn show(self) -> &'a str {
        match self {
            Arg::Lit(text) => text,
            Arg::Dyn => "<run-time value>",
        }
    }

    /// As the walk's arguments write it: `None` for a run-time value.
    pub fn owned(self) -> Option<String> {
        match self {
            Arg::Lit(text) => Some(text.to_string()),
            Arg::Dyn => None,
        }
    }
}

/// Whether a long option takes a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Has {
    No,
    /// `--opt=value` or `--opt value`.
    Req,
    /// Only `--opt=value`.
    Opt,
}

/// A program's option grammar.
pub struct Spec {
    /// Short options with a value, attached (`-fFILE`) or in the next word (`-f FILE`).
    pub short_req: &'static str,
    /// Short options whose value is optional and only ever attached (`sed -i.bak`).
    pub short_opt: &'static str,
    pub long: &'static [(&'static str, Has)],
    /// Long options are only known by their full names (no abbreviations): an unlisted or
    /// abbreviated one is a flag that is not reported.
    pub exact_long: bool,
    /// Options end at the first operand (awk, whose first operand is the program); otherwise GNU
    /// permutation: options are read wherever they are, up to `--`.
    pub stop_at_operand: bool,
    /// `-W name=value` is `--name=value` (gawk, mawk).
    pub w_is_long: bool,
}

/// One option or operand, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev<'a> {
    Short(char, Option<Arg<'a>>),
    /// A long option by its full name; an abbreviation that fits several names is reported once
    /// for each (the tool refuses it, but reading it the worst way costs nothing).
    Long(&'static str, Option<Arg<'a>>),
    Operand(Arg<'a>),
}

/// The long options `name` can mean: itself when exact, else every option it abbreviates.
pub fn resolve(long: &'static [(&'static str, Has)], name: &str) -> Vec<(&'static str, Has)> {
    if let Some(exact) = long.iter().find(|(n, _)| *n == name) {
        return vec![*exact];
    }
    if name.is_empty() {
        return Vec::new();
    }
    long.iter()
        .filter(|(n, _)| n.starts_with(name))
        .copied()
        .collect()
}

/// Reads `args` with `spec`, calling `f` for every option and operand.
pub fn getopt<'a>(spec: &Spec, args: &'a [Option<String>], mut f: impl FnMut(Ev<'a>)) {
    for (_, ev) in Reader::new(spec, args) {
        f(ev);
    }
}

/// Reads `args` with a [`Spec`]: an iterator of every option and operand with the index of the
/// word it starts in, which a reader that stops early (a wrapper at its command) can stop at.
pub struct Reader<'s, 'a> {
    spec: &'s Spec,
    args: &'a [Option<String>],
    /// The next word to read.
    i: usize,
    options_done: bool,
    /// `--` was read: every word from here on is an operand.
    dash_dash: bool,
    /// The events of the word read last (a cluster of letters, an ambiguous long option).
    pending: VecDeque<(usize, Ev<'a>)>,
}

impl<'s, 'a> Reader<'s, 'a> {
    pub fn new(spec: &'s Spec, args: &'a [Option<String>]) -> Self {
        Reader {
            spec,
            args,
            i: 0,
            options_done: false,
            dash_dash: false,
            pending: VecDeque::new(),
        }
    }

    /// The index of the first word not read yet (after an option's value).
    pub fn next_index(&self) -> usize {
        self.i
    }

    /// Whether `--` ended the options before the event returned last.
    pub fn after_dash_dash(&self) -> bool {
        self.dash_dash
    }

    /// Reads one word (and an option's value), queueing its events.
    fn read_word(&mut self) {
        let (spec, args) = (self.spec, self.args);
        let word = self.i;
        let arg = Arg::of(&args[word]);
        let raw = args[word].as_deref().map(split_run_time);
        self.i += 1;
        let (text, run_time) = match raw {
            Some((text, run_time)) if !self.options_done && text.starts_with('-') => {
                (text, run_time)
            }
            _ => {
                if spec.stop_at_operand {
                    self.options_done = true;
                }
                return self.pending.push_back((word, Ev::Operand(arg)));
            }
        };
        if text == "--" && !run_time {
            self.options_done = true;
            self.dash_dash = true;
            return;
        }
        if let Some(long) = text.strip_prefix("--") {
            // A run-time value is only read as an option when its name is literal (`--x=$V`).
            if !run_time || long.contains('=') {
                self.long_option(word, long, run_time);
            } else {
                self.pending.push_back((word, Ev::Operand(Arg::Dyn)));
            }
            return;
        }
        if text.len() < 2 && !run_time {
            if spec.stop_at_operand {
                self.options_done = true;
            }
            return self.pending.push_back((word, Ev::Operand(arg)));
        }
        let letters = &text[1..];
        let mut value_taken = false;
        for (pos, letter) in letters.char_indices() {
            let rest = &letters[pos + letter.len_utf8()..];
            if spec.short_req.contains(letter) {
                let value = if !rest.is_empty() || run_time {
                    Some(Arg::rest(rest, run_time))
                } else if self.i < args.len() {
                    self.i += 1;
                    Some(Arg::of(&args[self.i - 1]))
                } else {
                    None
                };
                if letter == 'W' && spec.w_is_long {
                    match value {
                        Some(Arg::Lit(long)) => self.long_option(word, long, false),
                        other => self.pending.push_back((word, Ev::Short('W', other))),
                    }
                } else {
                    self.pending.push_back((word, Ev::Short(letter, value)));
                }
                value_taken = true;
                break;
            }
            if spec.short_opt.contains(letter) {
                let value = (!rest.is_empty() || run_time).then(|| Arg::rest(rest, run_time));
                self.pending.push_back((word, Ev::Short(letter, value)));
                value_taken = true;
                break;
            }
            self.pending.push_back((word, Ev::Short(letter, None)));
        }
        if run_time && !value_taken {
            // `-n$X`: more option letters only known at run time.
            self.pending.push_back((word, Ev::Operand(Arg::Dyn)));
        }
    }

    /// Reads `--name[=value]` (without its dashes) of the word at `word`.
    fn long_option(&mut self, word: usize, long: &'a str, run_time: bool) {
        let (name, attached) = match long.split_once('=') {
            Some((name, value)) => (name, Some(Arg::rest(value, run_time))),
            None => (long, None),
        };
        let meanings = if self.spec.exact_long {
            let exact = self.spec.long.iter().find(|(n, _)| *n == name);
            exact.copied().into_iter().collect()
        } else {
            resolve(self.spec.long, name)
        };
        let value = match attached {
            Some(value) => Some(value),
            None if meanings.iter().any(|(_, has)| *has == Has::Req)
                && self.i < self.args.len() =>
            {
                self.i += 1;
                Some(Arg::of(&self.args[self.i - 1]))
            }
            None => None,
        };
        for (full, _) in meanings {
            self.pending.push_back((word, Ev::Long(full, value)));
        }
    }
}

impl<'a> Iterator for Reader<'_, 'a> {
    /// The index of the word the event starts in, and the event.
    type Item = (usize, Ev<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.i >= self.args.len() {
                return None;
            }
            self.read_word();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: Spec = Spec {
        short_req: "efW",
        short_opt: "i",
        long: &[
            ("expression", Has::Req),
            ("exec", Has::Req),
            ("in-place", Has::Opt),
            ("quiet", Has::No),
        ],
        exact_long: false,
        stop_at_operand: false,
        w_is_long: true,
    };

    fn events(words: &[&str], spec: &Spec) -> Vec<String> {
        let args: Vec<Option<String>> = words
            .iter()
            .map(|w| (*w != "$").then(|| w.to_string()))
            .collect();
        let mut out = Vec::new();
        getopt(spec, &args, |ev| out.push(format!("{ev:?}")));
        out
    }

    #[test]
    fn reads_options_the_gnu_way() {
        let got = events(
            &[
                "-nes/a/b/",
                "-i.bak",
                "--ex",
                "x",
                "file",
                "-f",
                "$",
                "--",
                "-e",
            ],
            &SPEC,
        );
        assert_eq!(
            got,
            [
                "Short('n', None)",
                "Short('e', Some(Lit(\"s/a/b/\")))",
                "Short('i', Some(Lit(\".bak\")))",
                "Long(\"expression\", Some(Lit(\"x\")))",
                "Long(\"exec\", Some(Lit(\"x\")))",
                "Operand(Lit(\"file\"))",
                "Short('f', Some(Dyn))",
                "Operand(Lit(\"-e\"))",
            ]
        );
        let got = events(&["--expression=1e\0", "-e\0", "-n\0", "--e\0"], &SPEC);
        assert_eq!(
            got,
            [
                "Long(\"expression\", Some(Dyn))",
                "Short('e', Some(Dyn))",
                "Short('n', None)",
                "Operand(Dyn)",
                "Operand(Dyn)",
            ]
        );
        let got = events(&["-Wexp=1", "-W", "quiet", "-ie"], &SPEC);
        assert_eq!(
            got,
            [
                "Long(\"expression\", Some(Lit(\"1\")))",
                "Long(\"quiet\", None)",
                "Short('i', Some(Lit(\"e\")))",
            ]
        );
    }

    #[test]
    fn stops_at_the_first_operand_when_asked() {
        let spec = Spec {
            stop_at_operand: true,
            ..SPEC
        };
        let got = events(&["-f", "x", "prog", "-e", "y"], &spec);
        assert_eq!(
            got,
            [
                "Short('f', Some(Lit(\"x\")))",
                "Operand(Lit(\"prog\"))",
                "Operand(Lit(\"-e\"))",
                "Operand(Lit(\"y\"))",
            ]
        );
    }

    #[test]
    fn the_reader_gives_each_event_its_word_and_knows_where_options_ended() {
        let spec = Spec {
            exact_long: true,
            ..SPEC
        };
        let args: Vec<Option<String>> = ["-nf", "x", "--ex", "--expression", "y", "op", "--", "-e"]
            .iter()
            .map(|w| Some(w.to_string()))
            .collect();
        let mut reader = Reader::new(&spec, &args);
        let mut got = Vec::new();
        while let Some((word, ev)) = reader.next() {
            got.push((
                word,
                format!("{ev:?}"),
                reader.next_index(),
                reader.after_dash_dash(),
            ));
        }
        let expected = [
            (0, "Short('n', None)", 2, false),
            (0, "Short('f', Some(Lit(\"x\")))", 2, false),
            // Exact names only: `--ex` is an unknown flag, reported as nothing.
            (3, "Long(\"expression\", Some(Lit(\"y\")))", 5, false),
            (5, "Operand(Lit(\"op\"))", 6, false),
            (7, "Operand(Lit(\"-e\"))", 8, true),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(w, e, n, d)| (*w, e.to_string(), *n, *d))
            .collect();
        assert_eq!(got, expected);
    }
}
