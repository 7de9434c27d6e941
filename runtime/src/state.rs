//! Carrying cwd and exported variables from one command to the next. Each command runs in a fresh
//! shell on every tier, so the runtime wraps the script with an EXIT trap that reports `$PWD` and
//! the exported variables on file descriptor 3, and replays them into the next command.
//!
//! The report is `$PWD`, a NUL, then the output of bash's own `export -p`. A builtin, unlike
//! `env -0`, costs no fork and exec: that was about 1.5 ms of every command.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Variables each tier sets for itself; they never cross commands or tiers (the seed's rule).
pub const TIER_OWNED: &[&str] = &[
    "PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "SHELL", "USER", "LOGNAME", "TERM",
];

/// Variables that make a shell or the dynamic loader run code of their own choosing at start-up
/// or at a prompt. A command may set them for itself, but they are never carried to the next
/// command (nor to another tier): the classifier judges each script by its text, and code run by
/// `BASH_ENV=/session/e.sh` before every later command would be invisible to it
/// (docs/security-model.md, "What crosses from one command to the next").
pub const START_UP_CODE: &[&str] = &[
    // bash and sh: sourced at start-up (non-interactive: BASH_ENV; sh and interactive: ENV)
    "BASH_ENV",
    "ENV",
    // options and prompts: xtrace from SHELLOPTS expands PS4, interactive shells PS0-PS2 and
    // PROMPT_COMMAND, `select` PS3 (each may hold $(…))
    "SHELLOPTS",
    "BASHOPTS",
    "PS0",
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    "PROMPT_COMMAND",
    "BASH_XTRACEFD",
    // `enable -f` loads builtins (shared objects) from here; readline's start-up file
    "BASH_LOADABLES_PATH",
    "INPUTRC",
    // word splitting of every later command
    "IFS",
    // the loader's and libc's code paths (LD_* as a prefix, below)
    "GCONV_PATH",
    // interpreters' start-up code and module paths (a `sitecustomize.py`, `-Mevil` or a module
    // found first runs in every later python, perl, ruby or node)
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONSTARTUP",
    "PYTHONINSPECT",
    "PYTHONPATH",
    "PYTHONHOME",
    // Python's user site (`$HOME/.local/lib/python3.X/site-packages`: usercustomize.py and .pth
    // files run in every python, yq's too): Tier-0 turns it off (PYTHONNOUSERSITE=1, its own
    // setting); neither that switch nor where the user site is may be carried
    "PYTHONNOUSERSITE",
    "PYTHONUSERBASE",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "PERL5DB",
    "RUBYOPT",
    "RUBYLIB",
    // libc's tunables (parsed by the loader of every program), make's options from the
    // environment (`--eval`), git's program and hook templates, and the config home git and
    // other tools read their configuration (aliases, pagers) from
    "GLIBC_TUNABLES",
    "MAKEFLAGS",
    "MFLAGS",
    "GNUMAKEFLAGS",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "XDG_CONFIG_HOME",
    // programs or options that other tools run or apply on their own: tar's default options
    // (`--to-command`), ripgrep's config file (`--pre`), editors and pagers (sqlite3's edit(),
    // git on Tier-1), git's ssh, askpass, proxy and diff helpers
    "TAR_OPTIONS",
    "RIPGREP_CONFIG_PATH",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "SSH_ASKPASS",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_CONFIG_PARAMETERS",
];

/// Prefixes with the same effect: exported shell functions (`BASH_FUNC_name%%`, run whenever the
/// name is called), every dynamic-loader variable (`LD_PRELOAD`, `LD_AUDIT`, `LD_LIBRARY_PATH`…),
/// and git's configuration from the environment:
/// `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` set any git option (`core.pager`,
/// `alias.x=!cmd`).
pub const START_UP_CODE_PREFIXES: &[&str] = &["BASH_FUNC_", "LD_", "GIT_CONFIG_"];

/// Whether an exported variable crosses to the next command: not tier-owned, not start-up code.
pub fn carried(name: &str) -> bool {
    !TIER_OWNED.contains(&name)
        && !START_UP_CODE.contains(&name)
        && !START_UP_CODE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The most one carried variable may take in the next command's environment: the string
/// `NAME=value` and its NUL ([`env_bytes`]). The kernel refuses an `execve` with any environment string
/// longer than `MAX_ARG_STRLEN` (128 KiB, NUL included) with E2BIG, so one variable over it
/// carried to the next command made every later command of the session fail before bash
/// started (issue 12); this leaves a margin below it.
pub const MAX_CARRIED_VARIABLE: usize = 120 * 1024;

/// The most all carried variables together may take (`NAME=value` strings and their NULs). Far
/// under `ARG_MAX` (the whole of argv and the environment: 2 MiB with the usual 8 MiB stack), and
/// under the cap every tier puts on a command's state report (256 KiB), so that a carried state
/// of plain values is reported again by the next command rather than cut there.
pub const MAX_CARRIED_TOTAL: usize = 192 * 1024;

/// The bytes `NAME=value` takes in an environment, with its NUL.
pub fn env_bytes(name: &str, value: &str) -> usize {
    name.len().saturating_add(value.len()).saturating_add(2)
}

/// A variable [`bound`] left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCarried {
    pub name: String,
    /// `NAME=value` and its NUL ([`env_bytes`]).
    pub bytes: usize,
    /// Over [`MAX_CARRIED_VARIABLE`] on its own (else: past [`MAX_CARRIED_TOTAL`] with the rest).
    pub alone: bool,
}

impl NotCarried {
    /// The line the command's stderr gets, e.g. `kube-harness: not carried to the next command:
    /// X (140,003 bytes; one variable may take at most 122,880 bytes)`. `to` names where it was
    /// not carried: "the next command", or "this command" for a variable a saved state held.
    pub fn note(&self, to: &str) -> String {
        let why = if self.alone {
            format!(
                "one variable may take at most {} bytes",
                thousands(MAX_CARRIED_VARIABLE)
            )
        } else {
            format!(
                "all carried variables together may take at most {} bytes; the largest are left out first",
                thousands(MAX_CARRIED_TOTAL)
            )
        };
        format!(
            "kube-harness: not carried to {to}: {} ({} bytes; {why})\n",
            self.name,
            thousands(self.bytes)
        )
    }
}

/// Bounds the variables carried to the next command: drops every one over
/// [`MAX_CARRIED_VARIABLE`], then, while the rest together exceed [`MAX_CARRIED_TOTAL`], the
/// largest (by name on a tie). Whatever the variables were (a command's report, a state saved by
/// an older version), the next command's environment can then always be built. Returns what was
/// dropped, in name order.
pub fn bound(env: &mut BTreeMap<String, String>) -> Vec<NotCarried> {
    let mut dropped: Vec<NotCarried> = Vec::new();
    env.retain(|name, value| {
        let bytes = env_bytes(name, value);
        let keep = bytes <= MAX_CARRIED_VARIABLE;
        if !keep {
            dropped.push(NotCarried {
                name: name.clone(),
                bytes,
                alone: true,
            });
        }
        keep
    });
    let mut total = env
        .iter()
        .fold(0usize, |t, (k, v)| t.saturating_add(env_bytes(k, v)));
    if total > MAX_CARRIED_TOTAL {
        let mut by_size: Vec<(usize, String)> = env
            .iter()
            .map(|(k, v)| (env_bytes(k, v), k.clone()))
            .collect();
        by_size.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        for (bytes, name) in by_size {
            if total <= MAX_CARRIED_TOTAL {
                break;
            }
            env.remove(&name);
            total = total.saturating_sub(bytes);
            dropped.push(NotCarried {
                name,
                bytes,
                alone: false,
            });
        }
    }
    dropped.sort_by(|a, b| a.name.cmp(&b.name));
    dropped
}

/// The line the command's stderr gets when its state report could not be read: cut at the tier's
/// cap on it (256 KiB: exports of more than that together), or garbage the script wrote on fd 3.
pub const REPORT_LOST_NOTE: &str = "kube-harness: not carried to the next command: this command's working directory and exported variables (its state report was over the size cap or unreadable); the next command starts with the state this one started with\n";

/// `1234567` as `1,234,567`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len().saturating_add(digits.len() / 3));
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len().saturating_sub(i)) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Wraps an agent's script so that it reports its final state on fd 3, whatever way it exits
/// (end of script, `exit N`, a failing `set -e` command). `exec` replaces the shell and skips the
/// report: the previous state is kept. `builtin` keeps a function named `export` or `printf`
/// from standing in.
pub fn wrap(script: &str) -> String {
    format!(
        "trap '{{ builtin printf \"%s\\0\" \"$PWD\"; builtin export -p; }} >&3 2>/dev/null' EXIT\n{script}\n"
    )
}

/// The state a wrapped command reported: cwd and exported variables (tier-owned and start-up code
/// ones dropped: [`carried`]; the caller bounds the rest with [`bound`]). The report is written by
/// the script's own shell, so it is as untrusted as the script.
/// `None` when nothing (or garbage) was reported.
pub fn parse(report: &[u8]) -> Option<(PathBuf, BTreeMap<String, String>)> {
    let nul = report.iter().position(|b| *b == 0)?;
    let cwd = std::str::from_utf8(&report[..nul]).ok()?;
    if !cwd.starts_with('/') {
        return None;
    }
    let mut env = BTreeMap::new();
    let mut rest = report.get(nul.saturating_add(1)..)?;
    loop {
        rest = trim_start(rest);
        if rest.is_empty() {
            break;
        }
        let (entry, tail) = entry(rest)?;
        rest = tail;
        let Some((flags, key, value)) = entry else {
            continue;
        };
        // Arrays and namerefs are never in a child's environment (bash cannot export them).
        let exported = !flags.iter().any(|f| matches!(f, b'a' | b'A' | b'n'));
        if exported && carried(key) {
            env.insert(
                key.to_string(),
                String::from_utf8_lossy(&value).into_owned(),
            );
        }
    }
    Some((PathBuf::from(cwd), env))
}

/// One `declare -FLAGS NAME="VALUE"` (or POSIX-mode `export NAME=…`) line. `Some(None)` for a
/// variable without a value (exported but unset: not in the environment); `None` for garbage.
type Entry<'a> = (&'a [u8], &'a str, Vec<u8>);
fn entry(s: &[u8]) -> Option<(Option<Entry<'_>>, &[u8])> {
    let s = s
        .strip_prefix(b"declare ")
        .or_else(|| s.strip_prefix(b"export "))?;
    let (flags, s) = match s.strip_prefix(b"-") {
        Some(f) => {
            let end = f.iter().position(|b| *b == b' ')?;
            (f.get(..end)?, f.get(end.saturating_add(1)..)?)
        }
        None => (&b""[..], s),
    };
    let end = s
        .iter()
        .position(|b| *b == b'=' || *b == b'\n')
        .unwrap_or(s.len());
    let key = std::str::from_utf8(&s[..end]).ok()?;
    if key.is_empty() {
        return None;
    }
    let s = &s[end..];
    let Some(s) = s.strip_prefix(b"=") else {
        return Some((None, s));
    };
    let (value, rest) = if let Some(q) = s.strip_prefix(b"$'") {
        ansi_c(q)?
    } else if let Some(q) = s.strip_prefix(b"\"") {
        double_quoted(q)?
    } else {
        let end = s.iter().position(|b| *b == b'\n').unwrap_or(s.len());
        (s[..end].to_vec(), &s[end..])
    };
    Some((Some((flags, key, value)), rest))
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &s[n..]
}

/// The inside of `"…"` as bash prints it: `\` escapes `"`, `\`, `$` and a backquote; any other
/// backslash is literal. Older bash versions leave newlines literal here.
fn double_quoted(s: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        match *s.get(i)? {
            b'"' => return Some((out, s.get(i.saturating_add(1)..)?)),
            b'\\' if matches!(s.get(i.saturating_add(1)), Some(b'"' | b'\\' | b'$' | b'`')) => {
                out.push(*s.get(i.saturating_add(1))?);
                i = i.saturating_add(2);
            }
            b => {
                out.push(b);
                i = i.saturating_add(1);
            }
        }
    }
}

/// The inside of `$'…'` (bash 5.2 prints values with control characters this way) up to its
/// closing quote, decoded, and the rest.
fn ansi_c(s: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut i = 0usize;
    loop {
        match *s.get(i)? {
            b'\\' => i = i.saturating_add(2),
            b'\'' => break,
            _ => i = i.saturating_add(1),
        }
    }
    let body = s.get(..i)?;
    Some((
        kube_harness_classify::ansi_c::decode(body),
        s.get(i.saturating_add(1)..)?,
    ))
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn parses_a_report_and_drops_tier_owned_variables() {
        let report = b"/session/sub\0declare -x PATH=\"/bin\"\ndeclare -x FOO=\"bar baz\"\n\
            declare -x HOME=\"/x\"\ndeclare -x MULTI=$'a\\nb'\ndeclare -x OLDPWD\n\
            declare -ax ARR=([0]=\"1\")\nexport P=\"posix\"\n";
        let (cwd, env) = parse(report).unwrap();
        assert_eq!(cwd, PathBuf::from("/session/sub"));
        assert_eq!(env.len(), 3, "{env:?}");
        assert_eq!(env["FOO"], "bar baz");
        assert_eq!(env["MULTI"], "a\nb");
        assert_eq!(env["P"], "posix");
        assert!(parse(b"").is_none());
        assert!(parse(b"relative\0declare -x A=\"b\"").is_none());
        assert!(parse(b"/ok\0declare -x A=\"unterminated").is_none());
        assert!(parse(b"/ok\0rubbish\n").is_none());
    }

    /// Issue 12: one exported variable over MAX_ARG_STRLEN, or many under it together over
    /// ARG_MAX, made every later command fail with E2BIG. What `bound` keeps always fits.
    #[test]
    fn carried_variables_are_bounded_one_by_one_and_together() {
        let mut env = BTreeMap::new();
        env.insert("SMALL".to_string(), "s".to_string());
        env.insert("X".to_string(), "a".repeat(140_000));
        // Exactly at the bound, and one byte over it.
        env.insert("EDGE".to_string(), "e".repeat(MAX_CARRIED_VARIABLE - 6));
        env.insert("OVER".to_string(), "o".repeat(MAX_CARRIED_VARIABLE - 5));
        let dropped = bound(&mut env);
        assert_eq!(
            dropped,
            [
                NotCarried {
                    name: "OVER".into(),
                    bytes: MAX_CARRIED_VARIABLE + 1,
                    alone: true
                },
                NotCarried {
                    name: "X".into(),
                    bytes: 140_003,
                    alone: true
                },
            ]
        );
        assert_eq!(env.keys().collect::<Vec<_>>(), ["EDGE", "SMALL"]);
        assert_eq!(
            dropped[1].note("the next command"),
            "kube-harness: not carried to the next command: X (140,003 bytes; one variable may take at most 122,880 bytes)\n"
        );

        // Twelve variables of 20,000 bytes: 240 KB together. The largest go first (by name on a
        // tie) until the rest fit; small ones stay.
        let mut env: BTreeMap<String, String> = (0..12)
            .map(|i| (format!("V{i:02}"), "v".repeat(20_000 - 5 - (i % 2))))
            .collect();
        env.insert("KEEP".to_string(), "k".repeat(1000));
        let dropped = bound(&mut env);
        let names: Vec<&str> = dropped.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["V00", "V02", "V04"]);
        assert!(dropped.iter().all(|d| !d.alone && d.bytes == 20_000));
        let total: usize = env.iter().map(|(k, v)| env_bytes(k, v)).sum();
        assert!(total <= MAX_CARRIED_TOTAL, "{total}");
        assert!(env.contains_key("KEEP") && env.len() == 10);
        assert!(dropped[0]
            .note("this command")
            .starts_with("kube-harness: not carried to this command: V00 (20,000 bytes; all carried variables together may take at most 196,608 bytes"));
        // Within both bounds: nothing dropped.
        assert!(bound(&mut env).is_empty());
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
    }

    /// Values with every awkward byte, set in a real bash and read back through the wrapper:
    /// what `parse` returns must be exactly what bash would hand a child (`env -0`).
    #[test]
    fn round_trips_through_real_bash() {
        let values: Vec<String> = vec![
            "plain".into(),
            String::new(),
            "with space and 'single' \"double\" \\back $dollar `tick`".into(),
            "line1\nline2\n".into(),
            "tab\there\rcr\x07bell\x1besc\x7fdel".into(),
            "é ü 漢字 \u{1F600}".into(),
            (1u8..=127).map(char::from).collect(),
            "declare -x FAKE=\"no\"\nexport X=1".into(),
        ];
        for (locale, mode) in [("C", ""), ("C.UTF-8", ""), ("C", "set -o posix")] {
            let mut script = String::new();
            for (i, v) in values.iter().enumerate() {
                script.push_str(&format!("export V{i}=$'{}'\n", ansi_quote(v)));
            }
            script.push_str("declare -a ARR=(1); export ARR; export UNSET_BUT_EXPORTED\n");
            script.push_str(&format!("cd /tmp\n{mode}\n"));
            let out = Command::new("bash")
                .arg("-c")
                .arg(wrap(&script))
                .env_clear()
                .env("LC_ALL", locale)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                // fd 3 = stdout, so the report is what we capture.
                .stdout(Stdio::piped())
                .output_with_fd3();
            let (cwd, env) = parse(&out).expect("a report");
            assert_eq!(cwd, PathBuf::from("/tmp"));
            for (i, v) in values.iter().enumerate() {
                assert_eq!(
                    env.get(&format!("V{i}")),
                    Some(v),
                    "{locale} {mode} value {i}"
                );
            }
            assert_eq!(env.get("LC_ALL").map(String::as_str), Some(locale));
            assert!(!env.contains_key("ARR") && !env.contains_key("UNSET_BUT_EXPORTED"));
            assert_eq!(env.len(), values.len() + 1, "{env:?}");
        }
    }

    fn ansi_quote(v: &str) -> String {
        v.bytes().map(|b| format!("\\x{b:02x}")).collect()
    }

    trait Fd3 {
        fn output_with_fd3(&mut self) -> Vec<u8>;
    }

    impl Fd3 for Command {
        /// Runs with fd 3 pointing at the captured stdout pipe.
        fn output_with_fd3(&mut self) -> Vec<u8> {
            use std::os::unix::process::CommandExt;
            // SAFETY: dup2 is async-signal-safe.
            unsafe {
                self.pre_exec(|| {
                    if libc::dup2(1, 3) != 3 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let out = self.output().expect("bash runs");
            assert!(out.status.success(), "{out:?}");
            out.stdout
        }
    }
}
