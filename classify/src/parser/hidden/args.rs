//! The arguments a tool reader gets from the walk, and the text helpers every reader shares.
//! A leaf: the readers (`awk/`, `sed.rs`, …), mod.rs, which dispatches to them, and the option
//! reader (`parser/getopt.rs`, for [`split_run_time`]) all use it.

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
pub(super) fn whole_words(args: &[Option<String>]) -> Vec<Option<String>> {
    args.iter()
        .map(|a| a.clone().filter(|t| !t.contains(RUN_TIME)))
        .collect()
}

/// What a command reads on stdin, when the walk can tell: `Some(Some(text))` for a literal
/// heredoc or here-string, `Some(None)` for one that expands at run time, `None` otherwise.
pub type Stdin<'s> = &'s dyn Fn() -> Option<Option<String>>;

/// Bytes a tool decoded from escapes, as text: C strings end at the first NUL.
pub(super) fn c_string(bytes: &[u8]) -> String {
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
