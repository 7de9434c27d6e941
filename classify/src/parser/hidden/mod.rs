//! Commands that Tier-0 tools run from their own arguments: `awk 'BEGIN{system("git")}'`,
//! `sed '1e git'`, `tar --to-command=git`, `sqlite3 db '.shell git'`, `sort --compress-program`,
//! `split --filter`, `rg --pre`, and the bash builtins that evaluate code they are given (`trap`,
//! `alias`, array subscripts in `unset`/`let`/`read`/`printf -v`, …). Each tool's feature is
//! recognised from the tool's own grammar; the command it would run is reported as a [`Hidden`]
//! item, which the walk classifies like any other command.
// Script text reaches every line here, so no unwrap or expect. Index arithmetic is not linted:
// it is bounded by the script, which is at most MAX_SCRIPT_BYTES (512 KiB) long.
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod awk;
mod getopt;
mod sed;
mod sqlite;
mod tools;

/// Ends the literal beginning of a run-time argument in the arguments the tools get:
/// `--to-command="$C"` arrives as `--to-command=` followed by this, so the option is known and
/// its value is not. Arguments cannot hold NUL (bash drops it from scripts), so at worst a
/// script with a NUL byte in a literal argument has that argument read as run-time, which escalates.
pub const RUN_TIME: char = '\0';

/// A tool argument's literal text and whether a run-time value follows it.
pub fn split_run_time(text: &str) -> (&str, bool) {
    match text.split_once(RUN_TIME) {
        Some((literal, _)) => (literal, true),
        None => (text, false),
    }
}

/// The arguments with every run-time value as `None`, for tools that only need whole words.
fn whole_words(args: &[Option<String>]) -> Vec<Option<String>> {
    args.iter()
        .map(|a| a.clone().filter(|t| !t.contains(RUN_TIME)))
        .collect()
}

/// A command a tool would run, as far as the classifier can see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hidden {
    /// Text the tool runs with `/bin/sh -c` (a new shell: the script's functions are not visible).
    Shell(String),
    /// Code the current shell evaluates (a `trap` action, an alias, an array subscript): the
    /// script's functions are visible to it.
    SameShell(String),
    /// A program the tool starts directly by name or path, without a shell.
    Program(String),
    /// A command only known at run time. `fragments` are the literal pieces of it that are visible
    /// (`"git add " $1`): a denied command named in them refuses, since escalating would run it.
    Dynamic {
        detail: String,
        fragments: Vec<String>,
    },
    /// Program text read from a file, or native code loaded (`awk -f x.awk`, `.read x.sql`,
    /// `gawk --load`, `enable -f`): described for the `opaque-script` reason.
    Opaque(String),
}

impl Hidden {
    fn dynamic(detail: impl Into<String>) -> Hidden {
        Hidden::Dynamic {
            detail: detail.into(),
            fragments: Vec::new(),
        }
    }
}

/// Commands followed in one tool's program; past this, the rest of it is one run-time command.
/// Bounds the work on programs made of thousands of `system(` calls.
const MAX_FOUND: usize = 64;

fn too_many(out: &mut Vec<Hidden>) -> bool {
    if out.len() < MAX_FOUND {
        return false;
    }
    out.push(Hidden::dynamic(format!(
        "more than {MAX_FOUND} commands in one program"
    )));
    true
}

/// What a command reads on stdin, when the walk can tell: `Some(Some(text))` for a literal
/// heredoc or here-string, `Some(None)` for one that expands at run time, `None` otherwise.
pub type Stdin<'s> = &'s dyn Fn() -> Option<Option<String>>;

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
pub fn variable(name: &str, value: Option<&str>) -> Vec<Hidden> {
    let Some(value) = value else {
        return vec![Hidden::dynamic(format!("{name} only known at run time"))];
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
        "RIPGREP_CONFIG_PATH" if !value.is_empty() => vec![Hidden::Opaque(format!(
            "RIPGREP_CONFIG_PATH={value} (rg reads options from it)"
        ))],
        "BASH_ENV" if !value.is_empty() => vec![Hidden::Opaque(format!(
            "BASH_ENV={value} (bash runs it at start-up)"
        ))],
        // PS4 is expanded, substitutions included, before each line `set -x` traces.
        "PS4" if value.contains(['$', '`']) => vec![Hidden::SameShell(format!(": {value}"))],
        _ => Vec::new(),
    }
}

/// The commands `tool` would run given these arguments: literal text, `None` for a run-time
/// value, or a run-time value's literal beginning followed by [`RUN_TIME`].
pub fn find(tool: &str, args: &[Option<String>], stdin: Stdin) -> Vec<Hidden> {
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

/// Words that name a command wherever they appear in `text`, for [`Hidden::Dynamic`] fragments.
pub fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || "|&;()<>{}`$\"'=\\".contains(c))
        .filter(|w| !w.is_empty())
}

/// Bytes a tool decoded from escapes, as text: C strings end at the first NUL.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Test arguments: each word literal, except `$`, which stands for one that is not.
#[cfg(test)]
pub(super) fn test_args(words: &[&str]) -> Vec<Option<String>> {
    words
        .iter()
        .map(|w| (*w != "$").then(|| w.to_string()))
        .collect()
}
