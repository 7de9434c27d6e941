//! `--log-format json|text` (issue 37, first step): every role's log lines on stderr as one JSON
//! object a line for a log pipeline, chosen by the flag or `KUBE_HARNESS_LOG_FORMAT` (the chart's
//! `logFormat`); text stays the default; any other value is refused before anything starts.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The session log's start-up lines (up to its `listening` line) with `format` set by `how`,
/// then the server is killed.
fn start_lines(how: &dyn Fn(&mut Command)) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t").unwrap();
    let mut cmd = Command::new(super::support::bin());
    cmd.args([
        "session-log",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
    ])
    .arg(&token)
    .arg("--store")
    .arg(format!("file://{}", dir.path().join("store").display()))
    .env_remove("KUBE_HARNESS_LOG_FORMAT")
    .env("KUBE_HARNESS_LOG", "info")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    how(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        let done = line.contains("listening");
        lines.push(line);
        if done || Instant::now() > deadline {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
fn json_log_lines_are_one_object_a_line_by_flag_or_environment() {
    let by_flag = start_lines(&|c| {
        c.args(["--log-format", "json"]);
    });
    let by_env = start_lines(&|c| {
        c.env("KUBE_HARNESS_LOG_FORMAT", "json");
    });
    for lines in [by_flag, by_env] {
        assert!(lines.iter().any(|l| l.contains("listening")), "{lines:?}");
        for line in &lines {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not one JSON object a line ({e}): {line}"));
            assert!(v["level"].is_string() && v["timestamp"].is_string(), "{v}");
            assert!(v["fields"]["message"].is_string(), "{v}");
        }
    }
}

#[test]
fn text_stays_the_default_and_another_format_is_refused() {
    let lines = start_lines(&|_| {});
    assert!(lines.iter().any(|l| l.contains("listening")), "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_err()),
        "text lines: {lines:?}"
    );
    let out = Command::new(super::support::bin())
        .args(["--log-format", "xml", "classify", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value 'xml'") && err.contains("json"),
        "{err}"
    );
}
