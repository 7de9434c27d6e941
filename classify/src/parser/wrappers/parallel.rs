//! GNU `parallel`: its command and argument lists, put together as parallel does.

use crate::parser::inner::Inner;

/// Replacement strings of GNU parallel: `{}`, `{.}`, `{/}`, `{//}`, `{/.}`, `{#}`, `{%}`, `{1}`, …
fn has_replacement(word: &str) -> bool {
    word.match_indices('{').any(|(i, _)| {
        word[i + 1..].find('}').is_some_and(|end| {
            word[i + 1..i + 1 + end]
                .chars()
                .all(|c| "./#%0123456789".contains(c))
        })
    })
}

/// GNU parallel: `parallel [OPTS] COMMAND … ::: ARG …`. The command and each argument are put
/// together and run by a shell; with no command, each argument (or each line of stdin or of a
/// `::::` file) is a command.
pub fn parallel(args: &[Option<String>], out: &mut Vec<Inner>) {
    const WITH_VALUE: &[&str] = &[
        "-j",
        "--jobs",
        "-P",
        "--max-procs",
        "-S",
        "--sshlogin",
        "--slf",
        "--sshloginfile",
        "-a",
        "--arg-file",
        "-d",
        "--delimiter",
        "-E",
        "--eof",
        "-I",
        "--tmpdir",
        "--results",
        "--res",
        "--joblog",
        "--delay",
        "--timeout",
        "--env",
        "--workdir",
        "--wd",
        "-n",
        "--max-args",
        "-N",
        "-L",
        "--max-lines",
        "-s",
        "--max-chars",
        "-C",
        "--colsep",
        "--tagstring",
        "--halt",
        "--retries",
        "--memfree",
        "--load",
        "--block",
        "--block-size",
        "--recstart",
        "--recend",
        "--basefile",
        "--bf",
        "--transferfile",
        "--tf",
        "--return",
        "--sshdelay",
        "--termseq",
        "--rpl",
        "--limit",
        "-J",
        "--profile",
        "--semaphorename",
        "--id",
        "--nice",
        "--shebang",
        "--tag-string",
        "--ctag",
        "--ctagstring",
        "--header",
        "--cleanup-file",
    ];
    let mut i = 0;
    let mut from_file = false;
    while let Some(Some(arg)) = args.get(i) {
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" || arg.starts_with(":::") {
            break;
        }
        if arg == "-a" || arg.starts_with("--arg-file") || arg.starts_with("-a") {
            from_file = true;
        }
        if WITH_VALUE.contains(&arg.as_str()) {
            i += 1;
        }
        i += 1;
    }
    // An option that takes a value may be the last word (`parallel -j`): nothing follows it.
    let mut i = i.min(args.len());
    if matches!(args.get(i), Some(None)) {
        out.push(Inner::wrapped_at_run_time());
        return;
    }
    let start = i;
    while matches!(args.get(i), Some(Some(a)) if !a.starts_with(":::")) {
        i += 1;
    }
    if matches!(args.get(i), Some(None)) {
        out.push(Inner::wrapped_at_run_time());
        return;
    }
    let command: Vec<&str> = args[start..i].iter().filter_map(|a| a.as_deref()).collect();
    // The argument lists: `:::` values, or files (`::::`, `-a`) whose lines are known at run time.
    let mut values: Vec<Option<&str>> = Vec::new();
    let mut literal_list = true;
    for arg in &args[i..] {
        match arg.as_deref() {
            Some(sep) if sep.starts_with("::::") => literal_list = false,
            Some(sep) if sep.starts_with(":::") => literal_list = true,
            Some(v) if literal_list => values.push(Some(v)),
            _ => values.push(None),
        }
    }
    let no_lists = values.is_empty() && !args[i..].iter().any(|a| a.is_some());
    if (no_lists || from_file) && (command.is_empty() || command.iter().any(|w| has_replacement(w)))
    {
        // Commands (or the words put into them) come from stdin or a file.
        out.push(Inner::wrapped_at_run_time());
    }
    for value in values.iter().take(64) {
        let Some(value) = value else {
            if command.is_empty() || command.iter().any(|w| has_replacement(w)) {
                out.push(Inner::wrapped_at_run_time());
            }
            continue;
        };
        let line = if command.is_empty() {
            value.to_string()
        } else if command.iter().any(|w| has_replacement(w)) {
            command
                .iter()
                .map(|w| replace_all(w, value))
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            format!("{} {value}", command.join(" "))
        };
        out.push(Inner::Shell(line));
    }
    if values.is_empty() && !command.is_empty() {
        out.push(Inner::Joined(start, i));
    }
}

/// Every replacement string in `word` replaced by `value`.
fn replace_all(word: &str, value: &str) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(end) if after[..end].chars().all(|c| "./#%0123456789".contains(c)) => {
                out.push_str(&rest[..open]);
                out.push_str(value);
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
