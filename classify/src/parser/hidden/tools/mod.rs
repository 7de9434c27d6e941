//! tar, sort, split, rg, and the bash builtins that run or evaluate code given as arguments.

use super::args::split_run_time;
use crate::parser::getopt::{resolve, Arg, Has};
use crate::parser::inner::Inner;

/// How a tool runs the value of one of its options.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runs {
    /// Through `/bin/sh -c`.
    Shell,
    /// By name (`execvp`), without a shell.
    Program,
    /// tar's `--checkpoint-action=exec=CMD` (other actions run nothing).
    CheckpointExec,
}

fn run_value(out: &mut Vec<Inner>, what: &str, runs: Runs, value: Option<Arg>) {
    match (runs, value) {
        (_, None) => {}
        (_, Some(Arg::Dyn)) => out.push(Inner::dynamic(format!(
            "{what} runs a command only known at run time"
        ))),
        (Runs::Shell, Some(Arg::Lit(cmd))) => out.push(Inner::Shell(cmd.to_string())),
        (Runs::Program, Some(Arg::Lit(cmd))) if !cmd.is_empty() => {
            out.push(Inner::Program(cmd.to_string()))
        }
        (Runs::Program, _) => {}
        (Runs::CheckpointExec, Some(Arg::Lit(action))) => {
            if let Some(cmd) = action.strip_prefix("exec=") {
                out.push(Inner::Shell(cmd.to_string()));
            }
        }
    }
}

/// GNU tar's short options that take a value.
const TAR_SHORT_VALUE: &str = "bCfFgHIKLNTVX";
/// GNU tar's long options that run a command, with how (long options may be abbreviated).
const TAR_EXEC: &[(&str, Has)] = &[
    ("checkpoint-action", Has::Req),
    ("info-script", Has::Req),
    ("new-volume-script", Has::Req),
    ("rmt-command", Has::Req),
    ("rsh-command", Has::Req),
    ("to-command", Has::Req),
    ("use-compress-program", Has::Req),
];

fn tar_runs(option: &str) -> Runs {
    match option {
        "checkpoint-action" => Runs::CheckpointExec,
        "rsh-command" | "rmt-command" => Runs::Program,
        _ => Runs::Shell,
    }
}

/// tar: `--to-command`, `--checkpoint-action=exec=`, `-I`/`--use-compress-program`,
/// `-F`/`--info-script`/`--new-volume-script` (all through `/bin/sh -c`), `--rsh-command` and
/// `--rmt-command`, and a remote archive (`-f host:file`), which starts the remote shell. Every
/// literal word is read as an option where it could be one: a value mistaken for an option only
/// costs an escalation.
pub fn tar(args: &[Option<String>], out: &mut Vec<Inner>) {
    let mut archives: Vec<&str> = Vec::new();
    let mut force_local = false;
    let mut rsh_given = false;
    let mut i = 0;
    let short = |letter: char, value: Option<Arg<'_>>, out: &mut Vec<Inner>| match letter {
        'I' => run_value(out, "tar -I", Runs::Shell, value),
        'F' => run_value(out, "tar -F", Runs::Shell, value),
        _ => {}
    };
    // Old-style first argument (`tar cIf PROG out.tar …`): each letter that takes a value takes
    // the next argument.
    if let Some(Some(first)) = args.first() {
        if !first.starts_with('-') {
            i = 1;
            for letter in first.chars() {
                if TAR_SHORT_VALUE.contains(letter) {
                    let value = args.get(i).map(Arg::of);
                    i += 1;
                    if letter == 'f' {
                        if let Some(Arg::Lit(a)) = value {
                            archives.push(a);
                        }
                    }
                    short(letter, value, out);
                }
            }
        }
    }
    while let Some(arg) = args.get(i) {
        i += 1;
        let Some((text, run_time)) = arg.as_deref().map(split_run_time) else {
            continue;
        };
        if text == "--" && !run_time {
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((name, value)) => (name, Some(Arg::rest(value, run_time))),
                // `--$X`: an option only known at run time (a documented limit).
                None if run_time => continue,
                None => (long, None),
            };
            if name == "checkpoint" || name.is_empty() {
                continue;
            }
            if "force-local".starts_with(name) && name.len() >= 2 {
                force_local = true;
                continue;
            }
            if name == "file" {
                let value = attached.or_else(|| {
                    i += 1;
                    args.get(i - 1).map(Arg::of)
                });
                if let Some(Arg::Lit(a)) = value {
                    archives.push(a);
                }
                continue;
            }
            let meanings = resolve(TAR_EXEC, name);
            if meanings.is_empty() {
                continue;
            }
            let value = attached.or_else(|| {
                i += 1;
                args.get(i - 1).map(Arg::of)
            });
            for (option, _) in meanings {
                rsh_given |= option == "rsh-command";
                run_value(out, &format!("tar --{option}"), tar_runs(option), value);
            }
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            let letters = &text[1..];
            for (pos, letter) in letters.char_indices() {
                if TAR_SHORT_VALUE.contains(letter) {
                    let rest = &letters[pos + letter.len_utf8()..];
                    let value = if rest.is_empty() && !run_time {
                        i += 1;
                        args.get(i - 1).map(Arg::of)
                    } else {
                        Some(Arg::rest(rest, run_time))
                    };
                    if letter == 'f' {
                        if let Some(Arg::Lit(a)) = value {
                            archives.push(a);
                        }
                    }
                    short(letter, value, out);
                    break;
                }
            }
        }
    }
    if !force_local && !rsh_given && archives.iter().any(|a| is_remote(a)) {
        // GNU tar's default remote shell (`tar --show-defaults`).
        out.push(Inner::Program("rsh".into()));
    }
}

/// GNU tar's rule: `host:file` is remote when the colon is not first and no `/` precedes it.
fn is_remote(archive: &str) -> bool {
    match archive.find(':') {
        Some(colon) => colon > 0 && !archive[..colon].contains('/'),
        None => false,
    }
}

/// Every `--NAME[=VALUE]` before `--` whose NAME is `option` or an abbreviation of it, with its
/// value (attached, or the next argument).
fn long_values<'a>(
    args: &'a [Option<String>],
    option: &str,
    exact_only: bool,
    mut f: impl FnMut(Option<Arg<'a>>),
) {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let Some((text, run_time)) = arg.as_deref().map(split_run_time) else {
            continue;
        };
        let Some(long) = text.strip_prefix("--") else {
            continue;
        };
        if long.is_empty() && !run_time {
            return;
        }
        let (name, attached) = match long.split_once('=') {
            Some((name, value)) => (name, Some(Arg::rest(value, run_time))),
            None if run_time => continue,
            None => (long, None),
        };
        let matches = if exact_only {
            name == option
        } else {
            !name.is_empty() && option.starts_with(name)
        };
        if !matches {
            continue;
        }
        let value = attached.or_else(|| {
            i += 1;
            args.get(i - 1).map(Arg::of)
        });
        f(value);
    }
}

/// sort: `--compress-program=PROG` runs PROG (without a shell) for temporary files.
pub fn sort(args: &[Option<String>], out: &mut Vec<Inner>) {
    long_values(args, "compress-program", false, |v| {
        run_value(out, "sort --compress-program", Runs::Program, v)
    });
}

/// split: `--filter=COMMAND` runs COMMAND through the shell for each piece.
pub fn split(args: &[Option<String>], out: &mut Vec<Inner>) {
    long_values(args, "filter", false, |v| {
        run_value(out, "split --filter", Runs::Shell, v)
    });
}

/// ripgrep: `--pre COMMAND` runs COMMAND (without a shell) on every file searched.
pub fn rg(args: &[Option<String>], out: &mut Vec<Inner>) {
    long_values(args, "pre", true, |v| {
        run_value(out, "rg --pre", Runs::Program, v)
    });
}

/// The value of a builtin's option `-X` (`-X value` or `-Xvalue`) wherever it appears.
fn short_values<'a>(args: &'a [Option<String>], letter: char, mut f: impl FnMut(Option<Arg<'a>>)) {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let Some(text) = arg.as_deref() else {
            continue;
        };
        if text == "--" {
            return;
        }
        let Some(letters) = text.strip_prefix('-') else {
            continue;
        };
        if let Some(pos) = letters.find(letter) {
            let rest = &letters[pos + letter.len_utf8()..];
            if rest.is_empty() {
                i += 1;
                f(args.get(i - 1).map(Arg::of));
            } else {
                f(Some(Arg::Lit(rest)));
            }
        }
    }
}

/// bash evaluates an array subscript in a variable name as arithmetic, and arithmetic expands
/// `$(…)` and backquotes: `unset 'a[$(git)]'` runs git. The text is classified as the argument of
/// `:`, so its substitutions are found.
fn subscript(out: &mut Vec<Inner>, value: Option<Arg>) {
    if let Some(Arg::Lit(text)) = value {
        if text.contains("$(") || text.contains('`') {
            out.push(Inner::SameShell(format!(": {text}")));
        }
    }
}

pub fn builtin(name: &str, args: &[Option<String>], out: &mut Vec<Inner>) {
    match name {
        "trap" => {
            let operands: Vec<&Option<String>> = args
                .iter()
                .skip_while(|a| matches!(a.as_deref(), Some(o) if o.starts_with('-') && o != "-"))
                .collect();
            if args
                .iter()
                .any(|a| matches!(a.as_deref(), Some("-l" | "-p" | "-lp" | "-pl")))
            {
                return;
            }
            // `trap SIGNAL` and `trap - SIGNAL…` reset; `trap N SIGNAL` resets too (POSIX).
            if operands.len() < 2 {
                return;
            }
            match operands[0] {
                Some(action) if action.is_empty() || action == "-" => {}
                Some(action) if action.bytes().all(|b| b.is_ascii_digit()) => {}
                Some(action) => out.push(Inner::SameShell(action.clone())),
                None => out.push(Inner::dynamic("a trap action only known at run time")),
            }
        }
        "alias" => {
            for arg in args {
                match arg {
                    Some(def) => {
                        if let Some((_, value)) = def.split_once('=') {
                            if !value.trim().is_empty() {
                                out.push(Inner::SameShell(value.to_string()));
                            }
                        }
                    }
                    None => out.push(Inner::dynamic("an alias only known at run time")),
                }
            }
        }
        // `hash -p PATH NAME` makes NAME run PATH.
        "hash" => short_values(args, 'p', |v| run_value(out, "hash -p", Runs::Program, v)),
        // `enable -f FILE NAME` loads a builtin from a shared object.
        "enable" => short_values(args, 'f', |v| {
            let file = v.map_or("", Arg::show);
            out.push(Inner::Opaque(format!("enable -f {file}")));
        }),
        "mapfile" | "readarray" => {
            short_values(args, 'C', |v| match v {
                Some(Arg::Lit(callback)) => out.push(Inner::SameShell(callback.to_string())),
                Some(Arg::Dyn) => {
                    out.push(Inner::dynamic("a mapfile callback only known at run time"))
                }
                None => {}
            });
            for arg in args {
                subscript(out, arg.as_ref().map(|a| Arg::Lit(a)));
            }
        }
        "printf" => short_values(args, 'v', |v| subscript(out, v)),
        // Names of variables (`unset`, `read`, `getopts`, `wait -p`) and arithmetic (`let`).
        _ => {
            for arg in args {
                subscript(out, arg.as_ref().map(|a| Arg::Lit(a)));
            }
        }
    }
}

#[cfg(test)]
mod tests;
