//! The command gets real bash, an empty environment plus the sandbox's own PATH/HOME/TMPDIR,
//! and only the Tier-0 tools of the matrix.

use super::util::*;

#[test]
fn parent_secrets_are_invisible_and_only_the_given_env_is_passed() {
    std::env::set_var("KH_TEST_SECRET_API_KEY", "sk-live-should-never-leak");
    let data = Data::new();
    let rt = rt();
    for (sb, cwd) in [
        (ns_sandbox(&data, false, vec![]), "/session".into()),
        (direct_sandbox(&data, false, vec![]), data.path("session")),
    ] {
        let mut i = inv("env; echo \"bash=$BASH_VERSION\"", cwd);
        i.env.insert("GIVEN".into(), "yes".into());
        let o = rt.block_on(sb.run(&i));
        let out = text(&o.stdout);
        assert_eq!(o.exit_code, 0, "{}", show(&o));
        assert!(!out.contains("should-never-leak"), "{out}");
        assert!(!out.contains("KH_TEST_SECRET"), "{out}");
        assert!(out.contains("GIVEN=yes"), "{out}");
        assert!(out.contains("bash=5."), "real bash runs: {out}");
        let names: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .filter(|k| !k.starts_with("bash"))
            .collect();
        for n in &names {
            assert!(
                [
                    "PATH",
                    "HOME",
                    "TMPDIR",
                    "PYTHONNOUSERSITE",
                    "GIVEN",
                    "PWD",
                    "SHLVL",
                    "_"
                ]
                .contains(n),
                "unexpected variable {n} in {out}"
            );
        }
        // /proc/self/environ of the command says the same (no hidden inherited variables).
        let o = rt.block_on(sb.run(&inv(
            "tr '\\0' '\\n' < /proc/self/environ",
            data_cwd(&sb, &data),
        )));
        assert!(!text(&o.stdout).contains("never-leak"), "{}", show(&o));
        // Nor through the worker's (or the supervisor's) /proc entry: landlock treats reading
        // another domain's environ like ptrace and refuses it, same uid or not.
        let o = rt.block_on(sb.run(&inv(
            &format!(
                "cat /proc/{}/environ; echo rc=$?; cat /proc/$PPID/environ; echo rc=$?",
                std::process::id()
            ),
            data_cwd(&sb, &data),
        )));
        assert!(!text(&o.stdout).contains("never-leak"), "{}", show(&o));
        assert_eq!(text(&o.stdout).matches("rc=1").count(), 2, "{}", show(&o));
    }
}

fn data_cwd(sb: &kube_harness_sandbox::Tier0Sandbox, data: &Data) -> std::path::PathBuf {
    if sb.base_env()["PATH"].starts_with("/.kube-harness") {
        "/session".into()
    } else {
        data.path("session")
    }
}

#[test]
fn only_tier0_tools_are_reachable_and_toggles_gate_them() {
    let data = Data::new();
    let rt = rt();
    let on = ns_sandbox(&data, false, vec![]);
    assert!(on.tools().iter().any(|t| t == "jq"), "{:?}", on.tools());
    assert!(!on.tools().iter().any(|t| t == "git" || t == "curl"));
    let o = rt.block_on(on.run(&inv(
        "jq -n '1+1'; git --version; echo rc=$?; /usr/bin/git --version; echo abs=$?",
        "/session",
    )));
    let out = text(&o.stdout);
    assert!(out.contains("2\n"), "{}", show(&o));
    assert!(out.contains("rc=127"), "git is not on PATH: {}", show(&o));
    if std::path::Path::new("/usr/bin/git").exists() {
        assert!(
            out.contains("abs=126"),
            "git by absolute path is not executable: {}",
            show(&o)
        );
        assert!(
            text(&o.stderr).contains("Permission denied"),
            "{}",
            show(&o)
        );
    }

    // Python off: not on PATH, and the interpreter by absolute path does not execute either.
    let spec = kube_harness_workspace::WorkspaceSpec::canonical(
        data.root(),
        kube_harness_classify::RuntimeToggles {
            python: false,
            javascript: false,
            network: false,
        },
        vec![],
    );
    let off = kube_harness_sandbox::Tier0Sandbox::new(kube_harness_sandbox::SandboxConfig::new(
        spec,
        kube_harness_sandbox::Presentation::Namespace,
    ))
    .unwrap();
    assert!(!off.tools().iter().any(|t| t == "python3" || t == "node"));
    let o = rt.block_on(off.run(&inv(
        "python3 -c 'print(1)'; echo rc=$?; /usr/bin/python3 -c 'print(1)'; echo abs=$?; node -e 1; echo node=$?",
        "/session",
    )));
    let out = text(&o.stdout);
    assert!(
        out.contains("rc=127") && out.contains("node=127"),
        "{}",
        show(&o)
    );
    if std::path::Path::new("/usr/bin/python3").exists() {
        assert!(out.contains("abs=126"), "{}", show(&o));
    }
}

#[test]
fn common_tier0_work_runs() {
    let data = Data::new();
    let rt = rt();
    let sb = ns_sandbox(&data, false, vec![]);
    let script = r#"
set -e
mkdir -p /session/d && cd /session/d
printf 'b\na\nc\n' > f.txt
sort f.txt | head -1
echo '{"x":[1,2,3]}' | jq '.x | length'
seq 1 100 | awk '{s+=$1} END {print s}'
tar czf /artifacts/t.tgz -C /session d && tar tzf /artifacts/t.tgz | wc -l
t=$(mktemp) && echo tmp > "$t" && cat "$t"
ps -o pid= -p $$ >/dev/null && echo ps-ok
echo err >&2
cat <(echo procsub)
python3 -c 'import json,sys; print(json.dumps({"py": 1}))'
echo state-line >&3
"#;
    let o = rt.block_on(sb.run(&inv(script, "/session")));
    assert_eq!(o.exit_code, 0, "{}", show(&o));
    let out = text(&o.stdout);
    for want in [
        "a\n",
        "3\n",
        "5050\n",
        "tmp\n",
        "ps-ok\n",
        "procsub\n",
        "{\"py\": 1}\n",
    ] {
        assert!(out.contains(want), "missing {want:?}: {}", show(&o));
    }
    assert_eq!(text(&o.stderr), "err\n");
    assert_eq!(text(&o.state), "state-line\n");
    assert!(data.path("session/d/f.txt").exists());
    assert!(data.path("artifacts/t.tgz").exists());
    // The same run twice: the sandbox is reusable and concurrent runs work.
    let (ia, ib) = (
        inv("sleep 0.2; echo a", "/session"),
        inv("sleep 0.2; echo b", "/session"),
    );
    let (a, b) = (sb.run(&ia), sb.run(&ib));
    let (a, b) = rt.block_on(async { tokio::join!(a, b) });
    assert_eq!(
        (text(&a.stdout), text(&b.stdout)),
        ("a\n".into(), "b\n".into())
    );
}
