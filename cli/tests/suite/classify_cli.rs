//! The `kube-harness classify` command line: single scripts, batch mode, matrix dump, bad input.

use std::io::Write;
use std::process::{Command, Stdio};

fn kube_harness() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kube-harness"))
}

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

#[test]
fn classifies_the_seed_example_exactly() {
    let out = kube_harness()
        .args(["classify", "--", "rm -rf build && cargo build"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        json(&out.stdout),
        serde_json::json!({
            "decision": "escalate",
            "reasons": [
                {"kind": "needs-real-exec", "command": "cargo", "reason": "build-toolchain"},
                {"kind": "tier0-supported", "commands": ["rm"]}
            ],
            "matrixVersion": "v1"
        })
    );
}

#[test]
fn toggles_and_deny_flags_apply_and_every_decision_exits_zero() {
    let run = |args: &[&str]| {
        let out = kube_harness().arg("classify").args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        json(&out.stdout)["decision"].as_str().unwrap().to_string()
    };
    assert_eq!(run(&["--", "curl x"]), "escalate");
    assert_eq!(run(&["--network=true", "--", "curl x"]), "tier0");
    assert_eq!(run(&["--python=false", "--", "python3 -V"]), "escalate");
    assert_eq!(run(&["--deny", "ls", "--", "ls"]), "refuse");
    assert_eq!(run(&["--matrix", "v1", "--", "ls"]), "tier0");
}

#[test]
fn batch_mode_answers_every_line_in_order_and_survives_bad_lines() {
    let mut child = kube_harness()
        .args(["classify", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input = concat!(
        "{\"script\": \"git status\"}\n",
        "not json\n",
        "{\"script\": \"curl x\", \"network\": true}\n",
        "{\"script\": \"ls\", \"deny\": [\"ls\"]}\n",
        "{\"scrip\": \"typo\"}\n",
        "{\"script\": \"python3 x.py\", \"python\": false}\n",
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(json)
        .collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0]["decision"], "escalate");
    assert!(lines[1]["error"].as_str().unwrap().starts_with("line 2:"));
    assert_eq!(lines[2]["decision"], "tier0");
    assert_eq!(lines[3]["decision"], "refuse");
    assert!(lines[4]["error"].as_str().unwrap().contains("line 5"));
    assert_eq!(lines[5]["reasons"][0]["kind"], "capability-disabled");
}

#[test]
fn matrix_dump_prints_the_matrix_and_unknown_versions_fail_clearly() {
    let out = kube_harness()
        .args(["classify", "--matrix-dump"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let m = json(&out.stdout);
    assert_eq!(m["version"], "v1");
    assert!(m["needsRealExec"]["version-control"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v == "git"));

    let out = kube_harness()
        .args(["classify", "--matrix", "v0", "--", "ls"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown capability matrix version \"v0\"")
    );

    let out = kube_harness().args(["classify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no script given"));
}
