//! The wrappers whose command lines fit no [`Wrapper`] row: bash's `coproc`, `flock`, `su`,
//! `runuser`, `script`, `sg`, `newgrp`, GNU `parallel` (`parallel.rs`), `gdb` and `lldb`
//! (`debugger.rs`), `entr` and moreutils `pee`.

use super::debugger::debugger;
use super::options::{command_at, read_options, Wrapper, BASE, OPTIONS};
use super::parallel::parallel;
use crate::parser::getopt::{Arg, Ev, Has, Reader, Spec};
use crate::parser::inner::Inner;

/// Wrappers with their own command lines.
pub fn custom(wrapper: &str, args: &[Option<String>]) -> Vec<Inner> {
    let mut out = Vec::new();
    match wrapper {
        // `coproc CMD …` or `coproc NAME { …; }` / `coproc NAME ( … )`: a NAME only comes before a
        // compound command (tree-sitter-bash reads `{` and what follows as arguments).
        "coproc" => {
            let compound = |a: &Option<String>| matches!(a.as_deref(), Some(w) if w == "{" || w.starts_with('('));
            let at = usize::from(args.len() > 1 && compound(&args[1]) && !compound(&args[0]));
            command_at(&BASE, args, at, &mut out);
        }
        // `flock [OPTS] FILE CMD …`, `flock [OPTS] FILE -c TEXT`, `flock [OPTS] FD`.
        "flock" => {
            let spec = Wrapper {
                names: &["flock"],
                options: Spec {
                    short_req: "wE",
                    long: &[
                        ("timeout", Has::Req),
                        ("wait", Has::Req),
                        ("conflict-exit-code", Has::Req),
                    ],
                    ..OPTIONS
                },
                ..BASE
            };
            // Options end at the lock file; `-c` is only recognised right after it.
            let Some(file) = read_options(wrapper, &spec, args, &mut out) else {
                return out;
            };
            let at = file + 1;
            match args.get(at).map(|a| a.as_deref()) {
                Some(Some("-c" | "--command")) => shell_text(args.get(at + 1), &mut out),
                _ if file < args.len() => command_at(&spec, args, at, &mut out),
                _ => {}
            }
        }
        "su" | "runuser" | "script" => su_like(wrapper, args, &mut out),
        // `sg GROUP [-c] COMMAND`: the command goes to `/bin/sh -c`; without one, a shell.
        "sg" => {
            let mut operands = args
                .iter()
                .enumerate()
                .filter(|(_, a)| !matches!(a.as_deref(), Some("-" | "-c")));
            let _group = operands.next();
            match operands.next() {
                Some((i, _)) => out.push(Inner::Joined(i, args.len())),
                None => out.push(Inner::StdinShell),
            }
        }
        "newgrp" => out.push(Inner::StdinShell),
        "parallel" => parallel(args, &mut out),
        "gdb" | "lldb" => debugger(wrapper, args, &mut out),
        // `entr [-acdnprsz] UTILITY [ARG…]`; with `-s` the utility is a shell command.
        "entr" => {
            let mut i = 0;
            let mut shell = false;
            while let Some(Some(arg)) = args.get(i) {
                if arg == "--" {
                    i += 1;
                    break;
                }
                if arg.len() < 2 || !arg.starts_with('-') {
                    break;
                }
                shell |= arg.contains('s');
                i += 1;
            }
            match args.get(i) {
                Some(Some(_)) if shell => out.push(Inner::Joined(i, args.len())),
                _ => command_at(&BASE, args, i, &mut out),
            }
        }
        // moreutils `pee CMD…`: every argument is a shell command.
        "pee" => {
            for arg in args {
                match arg.as_deref() {
                    Some(a) if a.starts_with('-') => {}
                    Some(a) => out.push(Inner::Shell(a.to_string())),
                    None => out.push(Inner::wrapped_at_run_time()),
                }
            }
        }
        _ => {}
    }
    out
}

fn shell_text(value: Option<&Option<String>>, out: &mut Vec<Inner>) {
    match value {
        Some(Some(text)) => out.push(Inner::Shell(text.clone())),
        Some(None) => out.push(Inner::wrapped_at_run_time()),
        None => {}
    }
}

/// `su` and `runuser`'s options with a value (util-linux, with `script`'s long ones, which they
/// share): `-c`/`--command` is a shell command, `-s`/`--shell` the program that runs it,
/// `-u`/`--user` (runuser) the user to run a command as.
const SU: Spec = Spec {
    short_req: "csgGuw",
    long: &[
        ("command", Has::Req),
        ("session-command", Has::Req),
        ("shell", Has::Req),
        ("group", Has::Req),
        ("supp-group", Has::Req),
        ("user", Has::Req),
        ("whitelist-environment", Has::Req),
        ("echo", Has::Req),
        ("log-in", Has::Req),
        ("log-out", Has::Req),
        ("log-io", Has::Req),
        ("log-timing", Has::Req),
        ("logging-format", Has::Req),
        ("output-limit", Has::Req),
    ],
    ..OPTIONS
};

/// `script`'s options with a value (util-linux, with su's long ones): `-c`/`--command` is a shell
/// command.
const SCRIPT: Spec = Spec {
    short_req: "cEIOBTmo",
    long: &[
        ("command", Has::Req),
        ("session-command", Has::Req),
        ("group", Has::Req),
        ("supp-group", Has::Req),
        ("user", Has::Req),
        ("whitelist-environment", Has::Req),
        ("echo", Has::Req),
        ("log-in", Has::Req),
        ("log-out", Has::Req),
        ("log-io", Has::Req),
        ("log-timing", Has::Req),
        ("logging-format", Has::Req),
        ("output-limit", Has::Req),
    ],
    ..OPTIONS
};

/// `su`, `runuser` and `script` (util-linux): options may follow operands. `-c TEXT` is a shell
/// command, `-s PROGRAM` the shell that runs it. `runuser -u USER CMD …` runs CMD directly.
/// Otherwise (no `-c`) the shell is interactive and reads stdin, or, for su's `USER FILE …`, runs
/// a script file.
fn su_like(wrapper: &str, args: &[Option<String>], out: &mut Vec<Inner>) {
    let script = wrapper == "script";
    let mut operands = Vec::new();
    let mut has_shell_text = false;
    let mut user_mode = false;
    for (word, ev) in Reader::new(if script { &SCRIPT } else { &SU }, args) {
        match ev {
            Ev::Operand(Arg::Dyn) => {
                // A run-time word may be an option: what runs is only known then.
                out.push(Inner::wrapped_at_run_time());
                return;
            }
            Ev::Operand(Arg::Lit("-")) => {}
            Ev::Operand(Arg::Lit(_)) => {
                operands.push(word);
                if user_mode {
                    // `runuser -u USER CMD ARGS…`: the rest is the command.
                    break;
                }
            }
            Ev::Short('c', value) | Ev::Long("command" | "session-command", value) => {
                has_shell_text = true;
                shell_text(value.map(Arg::owned).as_ref(), out);
            }
            Ev::Short('s', value) | Ev::Long("shell", value) if !script => {
                program(value.map(Arg::owned).as_ref(), out)
            }
            Ev::Short('u', _) | Ev::Long("user", _) => user_mode |= wrapper == "runuser",
            Ev::Short(..) | Ev::Long(..) => {}
        }
    }
    if user_mode {
        if let Some(&at) = operands.first() {
            out.push(Inner::At(at));
            return;
        }
    }
    if has_shell_text {
        return;
    }
    // su/runuser: the first operand is the user; a further one is a script for the shell.
    let skip = usize::from(!script);
    match operands.get(skip) {
        Some(&file) if !script => {
            let name = args[file].as_deref().unwrap_or_default();
            out.push(Inner::Opaque(format!("{wrapper} … {name}")));
        }
        _ => out.push(Inner::StdinShell),
    }
}

fn program(value: Option<&Option<String>>, out: &mut Vec<Inner>) {
    match value {
        Some(Some(p)) => out.push(Inner::Program(p.clone())),
        Some(None) => out.push(Inner::wrapped_at_run_time()),
        None => {}
    }
}
