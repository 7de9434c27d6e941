//! Commands whose arguments are themselves a command (`env`, `sudo`, `timeout`, `xargs`, `find
//! -exec`, `setsid`, `flock`, `su -c`, `watch`, …). Each wrapper's option grammar is a row of
//! data (`table.rs`, read by `options.rs` with the one option reader) or, for the few with an
//! unusual command line, a small function (`custom.rs`), so the inner command is found the way
//! the wrapper itself would find it. What a wrapper runs is an [`Inner`], the walk's one model of
//! an inner command.

mod custom;
mod debugger;
mod options;
mod parallel;
mod table;
#[cfg(test)]
mod tests;

use crate::parser::inner::Inner;
use custom::custom;
use options::{command_at, read_options};
use table::{spec, CUSTOM};

/// True for the commands this module knows how to look through.
pub fn is_wrapper(name: &str) -> bool {
    CUSTOM.contains(&name) || spec(name).is_some()
}

/// What `wrapper` runs given its literal arguments (`None` = run-time value); empty when it runs
/// nothing.
pub fn inner_command(wrapper: &str, args: &[Option<String>]) -> Vec<Inner> {
    if CUSTOM.contains(&wrapper) {
        return custom(wrapper, args);
    }
    let Some(spec) = spec(wrapper) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let parsed = read_options(wrapper, spec, args, &mut out);
    if let Some(at) = parsed {
        command_at(spec, args, at, &mut out);
    }
    out
}

/// Inner commands of `find … -exec CMD … ;` (also `-execdir`, `-ok`, `-okdir`, and `+`):
/// (start, end) index ranges of each command's words.
pub fn find_exec_commands(args: &[Option<String>]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let is_exec = matches!(
            args[i].as_deref(),
            Some("-exec" | "-execdir" | "-ok" | "-okdir")
        );
        if !is_exec {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < args.len() && !matches!(args[end].as_deref(), Some(";" | "+")) {
            end += 1;
        }
        if start < end {
            found.push((start, end));
        }
        i = end + 1;
    }
    found
}
