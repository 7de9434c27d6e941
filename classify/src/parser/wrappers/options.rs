//! A wrapper's command line ([`Wrapper`]) and how it is read: options through the one option reader
//! ([`crate::parser::getopt`]), then the leading operands, then the command, the way the wrapper
//! itself finds it.

use crate::parser::getopt::{Arg, Ev, Has, Reader, Spec};
use crate::parser::inner::Inner;

/// What a wrapper does without a command.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum NoCommand {
    /// Nothing runs.
    Nothing,
    /// An interactive shell starts and reads stdin.
    Shell,
}

/// A wrapper's command line.
pub struct Wrapper {
    /// The commands read with this row.
    pub names: &'static [&'static str],
    /// Its options, read by the one option reader (exact long names, options up to the command):
    /// a long option listed with [`Has::No`] is one that means "do not run a command" (`--list`,
    /// `--pid`); other flags need no row.
    pub options: Spec,
    /// Short options that mean "do not run a command" (`command -v`, `ionice -p PID`).
    pub short_no_exec: &'static str,
    /// `NAME=value` words before the command are environment assignments.
    pub skips_assignments: bool,
    /// Positional operands before the command (`timeout DURATION`, `chroot DIR`).
    pub leading_operands: usize,
    /// The leading operand is only skipped when it is a number (`chrt [PRIO] CMD`), and a
    /// numeric option (`-5`) is the command.
    pub numeric_leading: bool,
    /// A lone `-` is an option (`env -` is `env -i`).
    pub dash_is_option: bool,
    /// The command's words are joined with spaces and run by a shell (`watch`).
    pub joined: bool,
    /// What runs when there is no command.
    pub no_command: NoCommand,
}

/// No options with values: the reader's defaults for every wrapper.
pub const OPTIONS: Spec = Spec {
    short_req: "",
    short_opt: "",
    long: &[],
    exact_long: true,
    stop_at_operand: false,
    w_is_long: false,
};

pub const BASE: Wrapper = Wrapper {
    names: &[],
    options: OPTIONS,
    short_no_exec: "",
    skips_assignments: false,
    leading_operands: 0,
    numeric_leading: false,
    dash_is_option: false,
    joined: false,
    no_command: NoCommand::Nothing,
};

/// Reads options and leading operands; returns where the command (or the operands after `--`)
/// starts, or `None` when nothing more runs. Inner commands found on the way (env -S) go to `out`.
pub fn read_options(
    wrapper: &str,
    spec: &Wrapper,
    args: &[Option<String>],
    out: &mut Vec<Inner>,
) -> Option<usize> {
    let mut operands_left = spec.leading_operands;
    // After `--`: assignments (env), operands, then the command.
    let mut assignments_after_dash_dash = spec.skips_assignments;
    let mut reader = Reader::new(&spec.options, args);
    while let Some((word, ev)) = reader.next() {
        match ev {
            Ev::Operand(_) if reader.after_dash_dash() => {
                if assignments_after_dash_dash && matches!(&args[word], Some(a) if is_assignment(a))
                {
                    continue;
                }
                assignments_after_dash_dash = false;
                if operands_left > 0 {
                    operands_left -= 1;
                    continue;
                }
                return Some(word);
            }
            Ev::Operand(Arg::Dyn) => {
                out.push(Inner::wrapped_at_run_time());
                return None;
            }
            Ev::Operand(Arg::Lit(arg)) => {
                if (arg == "-" && spec.dash_is_option)
                    || (spec.skips_assignments && is_assignment(arg))
                {
                    continue;
                }
                if operands_left > 0 {
                    operands_left -= 1;
                    if spec.numeric_leading && !arg.bytes().all(|b| b.is_ascii_digit()) {
                        return Some(word);
                    }
                    continue;
                }
                return Some(word);
            }
            Ev::Short(..) if spec.numeric_leading && is_numeric_option(&args[word]) => {
                // `chrt -5 …`: a number, not an option.
                return Some(word);
            }
            Ev::Short(letter, _) if spec.short_no_exec.contains(letter) => return None,
            Ev::Long(name, _) if spec.options.long.contains(&(name, Has::No)) => return None,
            Ev::Short('S', value) | Ev::Long("split-string", value) if wrapper == "env" => {
                let rest = reader.next_index().min(args.len());
                env_split(value.map(Arg::owned), &args[rest..], out);
                return None;
            }
            Ev::Short(..) | Ev::Long(..) => {}
        }
    }
    Some(reader.next_index() + operands_left)
}

/// `-5`: a dash and digits.
fn is_numeric_option(arg: &Option<String>) -> bool {
    matches!(arg.as_deref(), Some(a) if a.len() > 1
        && a.starts_with('-')
        && a[1..].bytes().all(|b| b.is_ascii_digit()))
}

/// The command starting at `at`, or what runs without one.
pub fn command_at(spec: &Wrapper, args: &[Option<String>], at: usize, out: &mut Vec<Inner>) {
    match args.get(at) {
        Some(Some(_)) if spec.joined => out.push(Inner::Joined(at, args.len())),
        Some(Some(_)) => out.push(Inner::At(at)),
        Some(None) => out.push(Inner::wrapped_at_run_time()),
        None if spec.no_command == NoCommand::Shell => out.push(Inner::StdinShell),
        None => {}
    }
}

/// `NAME=value` with a valid shell variable name.
pub fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let mut chars = name.chars();
            matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
                && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        }
        None => false,
    }
}

/// `env -S STRING REST…`: the string is split into words that take its place, and env reads its
/// arguments again from there (GNU env).
fn env_split(value: Option<Option<String>>, rest: &[Option<String>], out: &mut Vec<Inner>) {
    match value {
        None => {}
        Some(None) => out.push(Inner::wrapped_at_run_time()),
        Some(Some(text)) => {
            let mut words = split_string(&text);
            words.extend(rest.iter().cloned());
            out.push(Inner::Env(words));
        }
    }
}

/// GNU env's `-S` splitting: whitespace separates words; single quotes keep text (only `\\` and
/// `\'` are escapes in them); double quotes and bare text know `\"`, `\'`, `\\`, `\$`, `\#`,
/// `\_` (a space in double quotes, a separator outside), `\f`, `\n`, `\r`, `\t`, `\v`, and `\c`,
/// which ends the string; `#` at the start of a word starts a comment; `${NAME}` is the
/// environment's value, known only at run time (`None`).
pub fn split_string(text: &str) -> Vec<Option<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut run_time = false;
    let mut chars = text.chars().peekable();
    #[derive(PartialEq)]
    enum Q {
        None,
        Single,
        Double,
    }
    let mut quote = Q::None;
    let finish =
        |word: &mut Option<String>, run_time: &mut bool, words: &mut Vec<Option<String>>| {
            if let Some(w) = word.take() {
                words.push((!*run_time).then_some(w));
            }
            *run_time = false;
        };
    while let Some(c) = chars.next() {
        match (c, &quote) {
            ('\'', Q::Single) | ('"', Q::Double) => quote = Q::None,
            ('\'', Q::None) => {
                quote = Q::Single;
                word.get_or_insert_with(String::new);
            }
            ('"', Q::None) => {
                quote = Q::Double;
                word.get_or_insert_with(String::new);
            }
            (c, Q::None) if c.is_whitespace() => finish(&mut word, &mut run_time, &mut words),
            ('#', Q::None) if word.is_none() => break,
            ('\\', Q::Single) => match chars.peek() {
                Some('\\' | '\'') => word
                    .get_or_insert_with(String::new)
                    .push(chars.next().unwrap_or('\\')),
                _ => word.get_or_insert_with(String::new).push('\\'),
            },
            ('\\', _) => {
                let Some(next) = chars.next() else { break };
                let decoded = match next {
                    'c' => break,
                    '_' if quote == Q::None => {
                        finish(&mut word, &mut run_time, &mut words);
                        continue;
                    }
                    '_' => ' ',
                    'f' => '\x0c',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'v' => '\x0b',
                    other => other,
                };
                word.get_or_insert_with(String::new).push(decoded);
            }
            ('$', Q::None | Q::Double) if chars.peek() == Some(&'{') => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                run_time = true;
                word.get_or_insert_with(String::new);
            }
            (c, _) => word.get_or_insert_with(String::new).push(c),
        }
    }
    finish(&mut word, &mut run_time, &mut words);
    words
}
