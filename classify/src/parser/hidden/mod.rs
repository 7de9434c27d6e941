//! Commands that Tier-0 tools run from their own arguments: `awk 'BEGIN{system("git")}'`,
//! `sed '1e git'`, `tar --to-command=git`, `sqlite3 db '.shell git'`, `sort --compress-program`,
//! `split --filter`, `rg --pre`, and the bash builtins that evaluate code they are given (`trap`,
//! `alias`, array subscripts in `unset`/`let`/`read`/`printf -v`, …). Each tool's feature is
//! recognised from the tool's own grammar; the command it would run is reported as an [`Inner`]
//! item, the walk's one model of an inner command, which the walk classifies like any other command.
// Script text reaches every line here, so no unwrap or expect. Index arithmetic is not linted:
// it is bounded by the script, which is at most MAX_SCRIPT_BYTES (512 KiB) long.
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod args;
mod awk;
mod found;
mod sed;
mod sqlite;
mod tools;

use crate::parser::inner::Inner;
pub(super) use args::split_run_time;
use args::whole_words;
pub use args::{Stdin, RUN_TIME};

/// True for the commands (by basename) that can run a command named in their arguments; the walk
/// collects their arguments and calls [`find`].
pub fn runs_commands(name: &str) -> bool {
    awk::is_awk(name)
        || matches!(
            name,
            "sed"
                | "gsed"
                | "sqlite3"
                | "tar"
                | "gtar"
                | "sort"
                | "split"
                | "rg"
                | "trap"
                | "alias"
                | "hash"
                | "enable"
                | "mapfile"
                | "readarray"
                | "unset"
                | "let"
                | "read"
                | "printf"
                | "getopts"
                | "wait"
        )
}

/// Whether `tool`'s arguments, written as `text` in the script, can run anything: a cheap test on
/// characters no quoting can hide, so the walk skips collecting arguments for `sort -rn` or
/// `printf '%s\n' x`. A long option needs two `-`, a `$(…)` or backquote in a name needs `$` or
/// `` ` `` (an ANSI-C string such as `$'\x24'` still has its own `$`).
pub fn may_run(tool: &str, text: &str) -> bool {
    let dashes = || text.bytes().filter(|&b| b == b'-').nth(1).is_some();
    let substitution = || text.contains(['$', '`']);
    match tool {
        "sort" | "split" | "rg" => dashes(),
        "hash" | "enable" => text.contains('-'),
        "unset" | "let" | "read" | "printf" | "getopts" | "wait" => substitution(),
        "mapfile" | "readarray" => text.contains('-') || substitution(),
        _ => true,
    }
}

/// Variables that change what a tool runs without showing on its command line.
pub const VARIABLES: &[&str] = &["TAR_OPTIONS", "RIPGREP_CONFIG_PATH", "BASH_ENV", "PS4"];

/// What an assignment to one of [`VARIABLES`] makes later commands run (`None`: a run-time value).
pub fn variable(name: &str, value: Option<&str>) -> Vec<Inner> {
    let Some(value) = value else {
        return vec![Inner::dynamic(format!("{name} only known at run time"))];
    };
    match name {
        // GNU tar reads TAR_OPTIONS as options before its command line's.
        "TAR_OPTIONS" => {
            let words: Vec<Option<String>> = value
                .split_whitespace()
                .map(|w| Some(w.to_string()))
                .collect();
            let mut out = Vec::new();
            tools::tar(&words, &mut out);
            out
        }
        "RIPGREP_CONFIG_PATH" if !value.is_empty() => vec![Inner::Opaque(format!(
            "RIPGREP_CONFIG_PATH={value} (rg reads options from it)"
        ))],
        "BASH_ENV" if !value.is_empty() => vec![Inner::Opaque(format!(
            "BASH_ENV={value} (bash runs it at start-up)"
        ))],
        // PS4 is expanded, substitutions included, before each line `set -x` traces.
        "PS4" if value.contains(['$', '`']) => vec![Inner::SameShell(format!(": {value}"))],
        _ => Vec::new(),
    }
}

/// The commands `tool` would run given these arguments: literal text, `None` for a run-time
/// value, or a run-time value's literal beginning followed by [`RUN_TIME`].
pub fn find(tool: &str, args: &[Option<String>], stdin: Stdin) -> Vec<Inner> {
    let mut out = Vec::new();
    match tool {
        t if awk::is_awk(t) => awk::find(t, args, &mut out),
        "sed" | "gsed" => sed::find(tool, args, &mut out),
        "sqlite3" => sqlite::find(&whole_words(args), stdin, &mut out),
        "tar" | "gtar" => tools::tar(args, &mut out),
        "sort" => tools::sort(args, &mut out),
        "split" => tools::split(args, &mut out),
        "rg" => tools::rg(args, &mut out),
        _ => tools::builtin(tool, &whole_words(args), &mut out),
    }
    out
}

/// Words that name a command wherever they appear in `text`, for the visible pieces of an
/// [`Inner::Dynamic`] command.
pub fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || "|&;()<>{}`$\"'=\\".contains(c))
        .filter(|w| !w.is_empty())
}
