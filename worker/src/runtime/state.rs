//! Carrying cwd and exported variables from one command to the next. Each command runs in a fresh
//! shell on every tier, so the runtime wraps the script with an EXIT trap that reports `$PWD` and
//! the exported environment on file descriptor 3, and replays them into the next command.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Variables each tier sets for itself; they never cross commands or tiers (the seed's rule).
pub const TIER_OWNED: &[&str] = &[
    "PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "SHELL", "USER", "LOGNAME", "TERM",
];

/// Wraps an agent's script so that it reports its final state on fd 3, whatever way it exits
/// (end of script, `exit N`, a failing `set -e` command). `exec` replaces the shell and skips the
/// report: the previous state is kept.
pub fn wrap(script: &str) -> String {
    format!("trap '{{ printf \"%s\\0\" \"$PWD\"; env -0; }} >&3 2>/dev/null' EXIT\n{script}\n")
}

/// The state a wrapped command reported: cwd and exported variables (tier-owned ones dropped).
/// `None` when nothing (or garbage) was reported.
pub fn parse(report: &[u8]) -> Option<(PathBuf, BTreeMap<String, String>)> {
    let mut fields = report.split(|b| *b == 0);
    let cwd = std::str::from_utf8(fields.next()?).ok()?;
    if !cwd.starts_with('/') {
        return None;
    }
    let mut env = BTreeMap::new();
    for field in fields.filter(|f| !f.is_empty()) {
        let text = String::from_utf8_lossy(field);
        let Some((key, value)) = text.split_once('=') else {
            continue;
        };
        if !TIER_OWNED.contains(&key) && !key.starts_with("BASH_FUNC_") {
            env.insert(key.to_string(), value.to_string());
        }
    }
    Some((PathBuf::from(cwd), env))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_report_and_drops_tier_owned_variables() {
        let report = b"/session/sub\0PATH=/bin\0FOO=bar baz\0HOME=/x\0MULTI=a\nb\0\0";
        let (cwd, env) = parse(report).unwrap();
        assert_eq!(cwd, PathBuf::from("/session/sub"));
        assert_eq!(env.len(), 2);
        assert_eq!(env["FOO"], "bar baz");
        assert_eq!(env["MULTI"], "a\nb");
        assert!(parse(b"").is_none());
        assert!(parse(b"relative\0A=b").is_none());
    }
}
