//! The back-stop for what classification cannot see: after a Tier-0 run, recognise the shell's own
//! "command not found" and the Tier-0 tools' option-parser rejections in stderr.
//!
//! stderr is script-writable, so a script can forge these lines: the caller must bound escalation to
//! one per command (the tiered runtime does).
// Script text reaches every line here, so no unwrap or expect. Index arithmetic is not linted:
// it is bounded by the script, which is at most MAX_SCRIPT_BYTES (512 KiB) long.
#![deny(clippy::unwrap_used, clippy::expect_used)]

use serde::{Deserialize, Serialize};

/// What kind of emulation gap stderr shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GapSignal {
    CommandNotFound,
    UnsupportedOption,
}

/// An emulation gap found in a finished Tier-0 run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gap {
    /// Always `"emulation-gap"`, as in the seed.
    pub kind: String,
    pub signal: GapSignal,
    pub command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub option: Option<String>,
}

/// The minimal view of a finished run that gap detection reads.
pub trait RunOutput {
    fn stderr(&self) -> &str;
}

impl RunOutput for str {
    fn stderr(&self) -> &str {
        self
    }
}

/// Returns the first emulation gap stderr shows, if any. Matches stderr, not the exit code.
pub fn detect_emulation_gap<R: RunOutput + ?Sized>(result: &R) -> Option<Gap> {
    result.stderr().lines().find_map(gap_in_line)
}

fn gap(signal: GapSignal, command: &str, option: Option<&str>) -> Option<Gap> {
    let command = command.trim().rsplit('/').next().unwrap_or_default();
    if command.is_empty() || command.contains(char::is_whitespace) {
        return None;
    }
    Some(Gap {
        kind: "emulation-gap".into(),
        signal,
        command: command.to_string(),
        option: option.map(str::to_string),
    })
}

fn is_shell_prefix(prefix: &str) -> bool {
    let name = prefix.rsplit('/').next().unwrap_or(prefix);
    matches!(name, "bash" | "sh" | "dash" | "zsh" | "ksh")
}

fn gap_in_line(line: &str) -> Option<Gap> {
    let line = line.trim_end();
    // bash: `bash: X: command not found`, `bash: line 3: X: command not found`
    if let Some(rest) = line.strip_suffix(": command not found") {
        let mut parts = rest.splitn(2, ": ");
        let shell = parts.next()?;
        let mut tail = parts.next()?;
        if !is_shell_prefix(shell) {
            return None;
        }
        if let Some(after_line) = tail.strip_prefix("line ") {
            tail = after_line.split_once(": ")?.1;
        }
        return gap(GapSignal::CommandNotFound, tail, None);
    }
    // dash: `sh: 1: X: not found`
    if let Some(rest) = line.strip_suffix(": not found") {
        let mut parts = rest.splitn(3, ": ");
        let (shell, lineno, command) = (parts.next()?, parts.next()?, parts.next()?);
        if is_shell_prefix(shell) && lineno.chars().all(|c| c.is_ascii_digit()) {
            return gap(GapSignal::CommandNotFound, command, None);
        }
        return None;
    }
    // zsh: `zsh: command not found: X`
    if let Some((shell, command)) = line.split_once(": command not found: ") {
        if is_shell_prefix(shell) {
            return gap(GapSignal::CommandNotFound, command, None);
        }
    }
    option_rejection(line)
}

/// GNU getopt, BSD/busybox getopt, and the option parsers of jq, rg and sqlite3.
fn option_rejection(line: &str) -> Option<Gap> {
    const FORMS: &[(&str, bool)] = &[
        (": unrecognized option '", true),
        (": unrecognized option: ", false),
        (": unrecognized option ", false),
        (": invalid option -- '", true),
        (": invalid option -- ", false),
        (": illegal option -- ", false),
        (": option requires an argument -- '", true),
        (": option requires an argument -- ", false),
        (": option '", true),
        (": Unknown option: ", false),
        (": unknown option: ", false),
        (": unrecognized flag ", false),
        (": Error: unknown option: ", false),
    ];
    for (marker, quoted) in FORMS {
        if let Some((command, rest)) = line.split_once(marker) {
            if *marker == ": option '"
                && !rest.contains("' requires an argument")
                && !rest.contains("' is ambiguous")
                && !rest.contains("' doesn't allow an argument")
            {
                continue;
            }
            let option = if *quoted {
                rest.split('\'').next().unwrap_or(rest)
            } else {
                rest.split_whitespace().next().unwrap_or(rest)
            };
            return gap(GapSignal::UnsupportedOption, command, Some(option));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(stderr: &str) -> Option<(GapSignal, String, Option<String>)> {
        detect_emulation_gap(stderr).map(|g| (g.signal, g.command, g.option))
    }

    #[test]
    fn recognises_shell_command_not_found_forms() {
        use GapSignal::CommandNotFound as C;
        assert_eq!(
            sig("bash: cargo: command not found"),
            Some((C, "cargo".into(), None))
        );
        assert_eq!(
            sig("bash: line 3: make: command not found\n"),
            Some((C, "make".into(), None))
        );
        assert_eq!(
            sig("/bin/bash: line 1: go: command not found"),
            Some((C, "go".into(), None))
        );
        assert_eq!(sig("sh: 1: gcc: not found"), Some((C, "gcc".into(), None)));
        assert_eq!(
            sig("/bin/sh: 12: mvn: not found"),
            Some((C, "mvn".into(), None))
        );
        assert_eq!(
            sig("zsh: command not found: npm"),
            Some((C, "npm".into(), None))
        );
        assert_eq!(
            sig("noise\nbash: ./build/x: command not found"),
            Some((C, "x".into(), None))
        );
    }

    #[test]
    fn recognises_option_parser_rejections() {
        use GapSignal::UnsupportedOption as U;
        assert_eq!(
            sig("ls: unrecognized option '--frobnicate'"),
            Some((U, "ls".into(), Some("--frobnicate".into())))
        );
        assert_eq!(
            sig("sed: invalid option -- 'y'"),
            Some((U, "sed".into(), Some("y".into())))
        );
        assert_eq!(
            sig("grep: option requires an argument -- 'e'"),
            Some((U, "grep".into(), Some("e".into())))
        );
        assert_eq!(
            sig("tar: option '--file' requires an argument"),
            Some((U, "tar".into(), Some("--file".into())))
        );
        assert_eq!(
            sig("/usr/bin/sort: illegal option -- Z"),
            Some((U, "sort".into(), Some("Z".into())))
        );
        assert_eq!(
            sig("jq: Unknown option: --frob"),
            Some((U, "jq".into(), Some("--frob".into())))
        );
        assert_eq!(
            sig("rg: unrecognized flag --frob"),
            Some((U, "rg".into(), Some("--frob".into())))
        );
    }

    #[test]
    fn ignores_ordinary_errors() {
        for stderr in [
            "",
            "cat: x: No such file or directory",
            "grep: command not found",
            "error: command not found in my app",
            "my tool: option 'x' is great",
            "python3: can't open file 'x.py'",
        ] {
            assert_eq!(sig(stderr), None, "{stderr:?}");
        }
    }
}
