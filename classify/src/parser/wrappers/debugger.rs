//! gdb and lldb: the program they start, and the debugger commands that run a shell.

use super::options::{command_at, BASE};
use crate::parser::inner::Inner;

/// gdb and lldb start the program they are given (`gdb --args PROG …`, `gdb -ex run PROG`,
/// `lldb -- PROG …`); their `shell`/`!`/`pipe` and `platform shell` commands run a shell, and
/// command files are opaque.
pub fn debugger(wrapper: &str, args: &[Option<String>], out: &mut Vec<Inner>) {
    let with_value: &[&str] = match wrapper {
        "gdb" => &[
            "ex",
            "iex",
            "eval-command",
            "init-eval-command",
            "x",
            "command",
            "ix",
            "init-command",
            "p",
            "pid",
            "c",
            "core",
            "d",
            "directory",
            "cd",
            "s",
            "symbols",
            "e",
            "exec",
            "se",
            "b",
            "tty",
            "t",
            "D",
            "data-directory",
            "i",
            "interpreter",
            "l",
        ],
        _ => &[
            "o",
            "one-line",
            "O",
            "one-line-before-file",
            "k",
            "one-line-on-crash",
            "s",
            "source",
            "S",
            "source-before-file",
            "K",
            "source-on-crash",
            "a",
            "arch",
            "f",
            "file",
            "c",
            "core",
            "p",
            "attach-pid",
            "n",
            "attach-name",
            "l",
            "script-language",
        ],
    };
    let commands: &[&str] = match wrapper {
        "gdb" => &["ex", "iex", "eval-command", "init-eval-command"],
        _ => &[
            "o",
            "one-line",
            "O",
            "one-line-before-file",
            "k",
            "one-line-on-crash",
        ],
    };
    let files: &[&str] = match wrapper {
        "gdb" => &["x", "command", "ix", "init-command"],
        _ => &[
            "s",
            "source",
            "S",
            "source-before-file",
            "K",
            "source-on-crash",
        ],
    };
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].as_deref() else {
            out.push(Inner::wrapped_at_run_time());
            return;
        };
        if arg == "--" || arg == "--args" {
            command_at(&BASE, args, i + 1, out);
            return;
        }
        let Some(option) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            // The program to debug (gdb also takes a core file or pid after it).
            command_at(&BASE, args, i, out);
            return;
        };
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n, Some(Some(v.to_string()))),
            None => (option, None),
        };
        let value = match value {
            Some(v) => Some(v),
            None if with_value.contains(&name) => {
                i += 1;
                args.get(i).cloned()
            }
            None => None,
        };
        if commands.contains(&name) {
            match value {
                Some(Some(line)) => debugger_line(&line, out),
                Some(None) => out.push(Inner::wrapped_at_run_time()),
                None => {}
            }
        } else if files.contains(&name) {
            let file = value.flatten().unwrap_or_default();
            out.push(Inner::Opaque(format!("{wrapper} -{name} {file}")));
        }
        i += 1;
    }
}

/// A debugger command line: `shell CMD`, `!CMD`, `pipe …|CMD`, `| …|CMD`, `platform shell CMD`
/// run a shell; a program's own output never does.
fn debugger_line(line: &str, out: &mut Vec<Inner>) {
    let line = line.trim_start();
    let shell = line
        .strip_prefix("shell")
        .or_else(|| line.strip_prefix("platform shell"))
        .or_else(|| line.strip_prefix('!'));
    if let Some(cmd) = shell {
        out.push(Inner::Shell(cmd.to_string()));
    } else if let Some(rest) = line.strip_prefix("pipe").or_else(|| line.strip_prefix('|')) {
        match rest.split_once('|') {
            Some((_, cmd)) => out.push(Inner::Shell(cmd.to_string())),
            None => out.push(Inner::wrapped_at_run_time()),
        }
    }
}
