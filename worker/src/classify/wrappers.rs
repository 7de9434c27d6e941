//! Commands whose arguments are themselves a command (`env`, `sudo`, `timeout`, `xargs`, `find
//! -exec`, …). Each wrapper's option grammar is described as data so the inner command is found the
//! way the wrapper itself would find it.

/// Where a wrapper's inner command starts.
#[derive(Debug, PartialEq, Eq)]
pub enum Inner {
    /// The wrapper runs no command (`env` alone, `command -v git`, `xargs` with its default echo).
    None,
    /// The inner command's name is the argument at this index.
    At(usize),
    /// An argument that decides where the command starts is only known at run time.
    Dynamic,
    /// `env -S 'STRING'`: the string is split into a command line.
    Split(String),
}

/// A wrapper's option grammar.
struct Spec {
    /// Short options that take a value (attached `-uroot` or separate `-u root`).
    short_with_value: &'static str,
    /// Short options whose value is optional and only ever attached (`xargs -i{}`, `-l5`).
    short_optional_value: &'static str,
    /// Long options that take a value when not written as `--opt=value`.
    long_with_value: &'static [&'static str],
    /// `NAME=value` words before the command are environment assignments.
    skips_assignments: bool,
    /// Positional operands before the command (`timeout DURATION`).
    leading_operands: usize,
    /// Short options that mean "do not run the command" (`command -v`).
    short_no_exec: &'static str,
    /// A numeric option such as `nice -10`.
    numeric_option: bool,
}

const BASE: Spec = Spec {
    short_with_value: "",
    short_optional_value: "",
    long_with_value: &[],
    skips_assignments: false,
    leading_operands: 0,
    short_no_exec: "",
    numeric_option: false,
};

fn spec(wrapper: &str) -> Option<Spec> {
    Some(match wrapper {
        "env" => Spec {
            short_with_value: "uCSP",
            long_with_value: &["--unset", "--chdir", "--split-string"],
            skips_assignments: true,
            ..BASE
        },
        "sudo" => Spec {
            short_with_value: "ugCDprtUTh",
            long_with_value: &[
                "--user",
                "--group",
                "--close-from",
                "--chdir",
                "--prompt",
                "--role",
                "--type",
                "--other-user",
                "--command-timeout",
                "--host",
            ],
            skips_assignments: true,
            ..BASE
        },
        "doas" => Spec {
            short_with_value: "uC",
            ..BASE
        },
        "timeout" => Spec {
            short_with_value: "sk",
            long_with_value: &["--signal", "--kill-after"],
            leading_operands: 1,
            ..BASE
        },
        "nice" => Spec {
            short_with_value: "n",
            long_with_value: &["--adjustment"],
            numeric_option: true,
            ..BASE
        },
        "nohup" => BASE,
        "time" => Spec {
            short_with_value: "fo",
            long_with_value: &["--format", "--output"],
            ..BASE
        },
        "stdbuf" => Spec {
            short_with_value: "ioe",
            long_with_value: &["--input", "--output", "--error"],
            ..BASE
        },
        "command" => Spec {
            short_no_exec: "vV",
            ..BASE
        },
        "builtin" => BASE,
        "exec" => Spec {
            short_with_value: "a",
            ..BASE
        },
        "xargs" => Spec {
            short_with_value: "adEILnPs",
            short_optional_value: "iel",
            long_with_value: &[
                "--arg-file",
                "--delimiter",
                "--eof",
                "--replace",
                "--max-lines",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
            ..BASE
        },
        _ => return None,
    })
}

/// True for the commands this module knows how to look through.
pub fn is_wrapper(name: &str) -> bool {
    spec(name).is_some()
}

/// Finds the inner command of `wrapper` given its literal arguments (`None` = run-time value).
pub fn inner_command(wrapper: &str, args: &[Option<String>]) -> Inner {
    let Some(spec) = spec(wrapper) else {
        return Inner::None;
    };
    let mut operands_left = spec.leading_operands;
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].as_deref() else {
            return Inner::Dynamic;
        };
        if arg == "--" {
            i += 1;
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, has_value) = match long.split_once('=') {
                Some((name, value)) => {
                    if wrapper == "env" && name == "split-string" {
                        return Inner::Split(value.to_string());
                    }
                    (name, true)
                }
                None => (long, false),
            };
            let full = format!("--{name}");
            if !has_value && spec.long_with_value.contains(&full.as_str()) {
                if wrapper == "env" && full == "--split-string" {
                    return split_value(args.get(i + 1));
                }
                i += 1;
            }
            i += 1;
            continue;
        }
        if arg.len() > 1 && arg.starts_with('-') {
            let letters = &arg[1..];
            if spec.numeric_option && letters.chars().all(|c| c.is_ascii_digit()) {
                i += 1;
                continue;
            }
            for (pos, letter) in letters.char_indices() {
                if spec.short_no_exec.contains(letter) {
                    return Inner::None;
                }
                if spec.short_optional_value.contains(letter) {
                    break;
                }
                if spec.short_with_value.contains(letter) {
                    let attached = &letters[pos + letter.len_utf8()..];
                    if wrapper == "env" && letter == 'S' {
                        return if attached.is_empty() {
                            split_value(args.get(i + 1))
                        } else {
                            Inner::Split(attached.to_string())
                        };
                    }
                    if attached.is_empty() {
                        i += 1;
                    }
                    break;
                }
            }
            i += 1;
            continue;
        }
        if spec.skips_assignments && is_assignment(arg) {
            i += 1;
            continue;
        }
        if operands_left > 0 {
            operands_left -= 1;
            i += 1;
            continue;
        }
        return Inner::At(i);
    }
    // Only reached after `--` or when the arguments ran out: operands, then the command.
    let at = i + operands_left;
    match args.get(at) {
        Some(Some(_)) => Inner::At(at),
        Some(None) => Inner::Dynamic,
        None => Inner::None,
    }
}

fn split_value(value: Option<&Option<String>>) -> Inner {
    match value {
        Some(Some(v)) => Inner::Split(v.clone()),
        Some(None) => Inner::Dynamic,
        None => Inner::None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(words: &[&str]) -> Vec<Option<String>> {
        words
            .iter()
            .map(|w| (*w != "$").then(|| w.to_string()))
            .collect()
    }

    #[test]
    fn finds_inner_commands() {
        let cases: &[(&str, &[&str], Inner)] = &[
            ("env", &["FOO=1", "git", "status"], Inner::At(1)),
            ("env", &["-i", "-u", "HOME", "A=b", "cargo"], Inner::At(4)),
            ("env", &[], Inner::None),
            (
                "env",
                &["-S", "git status"],
                Inner::Split("git status".into()),
            ),
            (
                "env",
                &["--split-string=make all"],
                Inner::Split("make all".into()),
            ),
            ("sudo", &["-Eu", "root", "apt-get", "install"], Inner::At(2)),
            ("sudo", &["-u", "root", "--", "make"], Inner::At(3)),
            (
                "timeout",
                &["-s", "KILL", "5", "docker", "ps"],
                Inner::At(3),
            ),
            ("timeout", &["--kill-after=1", "5s", "ls"], Inner::At(2)),
            ("timeout", &["5"], Inner::None),
            ("timeout", &["--", "5", "make"], Inner::At(2)),
            ("nice", &["-n", "10", "make"], Inner::At(2)),
            ("nice", &["-10", "make"], Inner::At(1)),
            ("stdbuf", &["-oL", "grep", "x"], Inner::At(1)),
            ("command", &["-v", "git"], Inner::None),
            ("command", &["-p", "git"], Inner::At(1)),
            ("xargs", &["-I{}", "cargo", "build"], Inner::At(1)),
            ("xargs", &["-I", "{}", "-P", "4", "git", "x"], Inner::At(4)),
            ("xargs", &["-0", "-n1"], Inner::None),
            ("xargs", &["-i{}", "rm", "{}"], Inner::At(1)),
            ("exec", &["-a", "name", "make"], Inner::At(2)),
            ("env", &["$", "git"], Inner::Dynamic),
        ];
        for (wrapper, args, expected) in cases {
            assert_eq!(
                &inner_command(wrapper, &lits(args)),
                expected,
                "{wrapper} {args:?}"
            );
        }
    }

    #[test]
    fn finds_every_find_exec_command() {
        let args = lits(&[
            ".", "-name", "x", "-exec", "rm", "{}", ";", "-execdir", "git", "add", "{}", "+",
        ]);
        assert_eq!(find_exec_commands(&args), vec![(4, 6), (8, 11)]);
        assert!(find_exec_commands(&lits(&[".", "-exec"])).is_empty());
    }
}
