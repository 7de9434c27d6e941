//! A GNU `getopt_long` reader over a command's literal arguments, for the tools whose options can
//! run a command: it reports each option with its value the way the tool itself would read them,
//! so a value is never mistaken for an option or an operand for the program text.

use super::args::split_run_time;

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

/// A tool's option grammar.
pub struct Spec {
    /// Short options with a value, attached (`-fFILE`) or in the next word (`-f FILE`).
    pub short_req: &'static str,
    /// Short options whose value is optional and only ever attached (`sed -i.bak`).
    pub short_opt: &'static str,
    pub long: &'static [(&'static str, Has)],
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
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let arg = Arg::of(&args[i]);
        let raw = args[i].as_deref().map(split_run_time);
        i += 1;
        let (text, run_time) = match raw {
            Some((text, run_time)) if !options_done && text.starts_with('-') => (text, run_time),
            _ => {
                if spec.stop_at_operand {
                    options_done = true;
                }
                f(Ev::Operand(arg));
                continue;
            }
        };
        if text == "--" && !run_time {
            options_done = true;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            // A run-time value is only read as an option when its name is literal (`--x=$V`).
            if !run_time || long.contains('=') {
                i = long_option(spec, long, run_time, args, i, &mut f);
            } else {
                f(Ev::Operand(Arg::Dyn));
            }
            continue;
        }
        if text.len() < 2 && !run_time {
            if spec.stop_at_operand {
                options_done = true;
            }
            f(Ev::Operand(arg));
            continue;
        }
        let letters = &text[1..];
        let mut value_taken = false;
        for (pos, letter) in letters.char_indices() {
            let rest = &letters[pos + letter.len_utf8()..];
            if spec.short_req.contains(letter) {
                let value = if !rest.is_empty() || run_time {
                    Some(Arg::rest(rest, run_time))
                } else if i < args.len() {
                    i += 1;
                    Some(Arg::of(&args[i - 1]))
                } else {
                    None
                };
                if letter == 'W' && spec.w_is_long {
                    match value {
                        Some(Arg::Lit(long)) => i = long_option(spec, long, false, args, i, &mut f),
                        other => f(Ev::Short('W', other)),
                    }
                } else {
                    f(Ev::Short(letter, value));
                }
                value_taken = true;
                break;
            }
            if spec.short_opt.contains(letter) {
                let value = (!rest.is_empty() || run_time).then(|| Arg::rest(rest, run_time));
                f(Ev::Short(letter, value));
                value_taken = true;
                break;
            }
            f(Ev::Short(letter, None));
        }
        if run_time && !value_taken {
            // `-n$X`: more option letters only known at run time.
            f(Ev::Operand(Arg::Dyn));
        }
    }
}

/// Reads `--name[=value]` (without its dashes); returns the index of the next argument.
fn long_option<'a>(
    spec: &Spec,
    long: &'a str,
    run_time: bool,
    args: &'a [Option<String>],
    mut i: usize,
    f: &mut impl FnMut(Ev<'a>),
) -> usize {
    let (name, attached) = match long.split_once('=') {
        Some((name, value)) => (name, Some(Arg::rest(value, run_time))),
        None => (long, None),
    };
    let meanings = resolve(spec.long, name);
    let value = match attached {
        Some(value) => Some(value),
        None if meanings.iter().any(|(_, has)| *has == Has::Req) && i < args.len() => {
            i += 1;
            Some(Arg::of(&args[i - 1]))
        }
        None => None,
    };
    for (full, _) in meanings {
        f(Ev::Long(full, value));
    }
    i
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
}
