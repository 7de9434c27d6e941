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
/// ones dropped: [`carried`]). The report is written by the script's own shell, so it is as
/// untrusted as the script.
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

/// The inside of `$'…'` (bash 5.2 prints values with control characters this way).
fn ansi_c(s: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let b = *s.get(i)?;
        i = i.saturating_add(1);
        if b == b'\'' {
            return Some((out, s.get(i..)?));
        }
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let e = *s.get(i)?;
        i = i.saturating_add(1);
        let simple = match e {
            b'a' => Some(7),
            b'b' => Some(8),
            b'e' | b'E' => Some(27),
            b'f' => Some(12),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(11),
            b'\\' | b'\'' | b'"' | b'?' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (radix, max) = match e {
            b'0'..=b'7' => {
                i = i.saturating_sub(1);
                (8, 3)
            }
            b'x' => (16, 2),
            b'u' => (16, 4),
            b'U' => (16, 8),
            b'c' => {
                out.push(*s.get(i)? & 0x1f);
                i = i.saturating_add(1);
                continue;
            }
            _ => {
                out.extend_from_slice(&[b'\\', e]);
                continue;
            }
        };
        let digits = s
            .get(i..)?
            .iter()
            .take(max)
            .take_while(|d| (**d as char).is_digit(radix))
            .count();
        let text = std::str::from_utf8(s.get(i..i.saturating_add(digits))?).ok()?;
        let n = u32::from_str_radix(text, radix).ok()?;
        i = i.saturating_add(digits);
        if matches!(e, b'u' | b'U') {
            let mut buf = [0u8; 4];
            out.extend_from_slice(char::from_u32(n)?.encode_utf8(&mut buf).as_bytes());
        } else {
            out.push(n as u8);
        }
    }
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
