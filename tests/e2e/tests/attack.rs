//! The attacker's suite on the cluster (issue 12): what one session's commands can do to other
//! sessions on the same node. Run with `--ignored` against a cluster (docs/testing.md).

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube_harness_e2e::harness::{self, cli_exec};
use kube_harness_e2e::namespace::with_namespace;
use std::time::{Duration, Instant};

const READY: Duration = Duration::from_secs(180);

/// Two sessions made from `examples/demo.yaml` in a restricted namespace, once both are Ready.
async fn two_sessions(client: &kube::Client, ns: &str, names: [&str; 2]) {
    harness::restrict(client, ns).await.unwrap();
    for name in names {
        harness::apply_example(client, ns, "demo.yaml", name)
            .await
            .unwrap();
    }
    for name in names {
        harness::wait_ready(client, ns, name, READY).await.unwrap();
    }
}

/// Runs `script` in session `attacker` with a time limit of `timeout` seconds and, 3 s into it,
/// three commands in session `other`, each of which must answer within 15 s. The attack's exit
/// code, stderr and how long it took.
async fn attack_beside(
    ns: &str,
    attacker: &str,
    other: &str,
    script: String,
    timeout: &str,
) -> (i32, String, Duration) {
    let (ns_a, name, limit) = (ns.to_string(), attacker.to_string(), timeout.to_string());
    let attack = std::thread::spawn(move || {
        let started = Instant::now();
        let (code, _, err) = cli_exec(&ns_a, &name, &script, &["--timeout", &limit]);
        (code, err, started.elapsed())
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 0..3 {
        let started = Instant::now();
        let (code, out, err) = cli_exec(ns, other, &format!("echo ok{i}"), &[]);
        assert_eq!(
            (code, out.as_str()),
            (0, format!("ok{i}\n").as_str()),
            "{err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "session {other}'s command {i} took {:?}",
            started.elapsed()
        );
    }
    attack.join().unwrap()
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn one_sessions_fork_bomb_stops_no_other_session_and_dies_whole() {
    with_namespace("bomb", |client, ns| async move {
        two_sessions(&client, &ns, ["bomb-a", "bomb-b"]).await;
        // RLIMIT_NPROC counts per uid across the node: each session has its own.
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let mut uids = Vec::new();
        for name in ["bomb-a", "bomb-b"] {
            let pod = pods.get(&format!("{name}-worker")).await.unwrap();
            let uid = pod
                .spec
                .unwrap()
                .security_context
                .unwrap()
                .run_as_user
                .unwrap();
            let (code, out, err) = cli_exec(&ns, name, "id -u", &[]);
            assert_eq!((code, out.trim()), (0, uid.to_string().as_str()), "{err}");
            uids.push(uid);
        }
        assert_ne!(uids[0], uids[1], "two sessions share a uid");

        // Session B's commands run while A's bomb is at its limit.
        let (code, err, took) = attack_beside(
            &ns,
            "bomb-a",
            "bomb-b",
            "b(){ b|b& }; b; sleep 100".into(),
            "10",
        )
        .await;
        assert_eq!(
            code,
            124,
            "the bomb: {}",
            err.lines().last().unwrap_or_default()
        );
        assert!(
            took < Duration::from_secs(40),
            "the bomb returned after {took:?}"
        );
        // Nothing of it is left in A's pod: this command's shell is the only bash there.
        let (code, out, err) = cli_exec(&ns, "bomb-a", "ps -e -o comm= | grep -c '^bash$'", &[]);
        assert_eq!((code, out.as_str()), (0, "1\n"), "{err}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn the_worker_pod_runs_no_program_but_the_tools_and_its_commands_cannot_touch_the_worker() {
    with_namespace("exec", |client, ns| async move {
        harness::demo(&client, &ns, "exec", READY).await;
        // Named in the script, the loader is refused by classification before anything runs
        // (an opaque program under the session's deny policy). Started from python, which the
        // classifier does not read, it reaches Tier-0: the sandbox must refuse it there.
        let through_python = |program: &str| {
            format!(
                "python3 -c 'import subprocess as s\n\
                 try: r = s.run([\"/lib64/ld-linux-x86-64.so.2\", {program}], stdout=s.DEVNULL, stderr=s.DEVNULL).returncode\n\
                 except OSError: r = -1\n\
                 print(\"ran\" if r == 0 else \"refused\")'"
            )
        };
        let cases: &[(&str, &str)] = &[
            (
                "/lib64/ld-linux-x86-64.so.2 /usr/lib/apt/methods/http; echo rc=$?",
                "",
            ),
            // The control: through the loader, a tool runs.
            (&through_python("\"/usr/bin/true\""), "ran"),
            // A program of the image outside the tool directories: root-only (Containerfile).
            (&through_python("\"/usr/lib/apt/methods/http\""), "refused"),
            // One in a tool directory that is not a tool: landlock lets only tools be read.
            (
                &through_python("\"/usr/bin/perl\", \"-e\", \"print 1\""),
                "refused",
            ),
            ("stat -c %A /usr/lib/apt/methods/http", "-rwx------"),
            (
                "python3 -c 'import os; os.memfd_create(\"x\")' 2>&1 | tail -1",
                "PermissionError: [Errno 1] Operation not permitted",
            ),
            // The worker is PID 1 of the container: its limits are out of reach.
            (
                "python3 -c 'import resource; resource.prlimit(1, resource.RLIMIT_NOFILE, (16, 16))' 2>&1 | tail -1",
                "PermissionError: [Errno 1] Operation not permitted",
            ),
            ("grep 'Max open files' /proc/1/limits | awk '{print ($4 > 16)}'", "1"),
        ];
        for (script, want) in cases {
            let (code, out, err) = cli_exec(&ns, "exec", script, &[]);
            if want.is_empty() {
                assert_eq!(code, 126, "{script}: {err}");
                assert!(err.contains("refused by policy"), "{script}: {err}");
                continue;
            }
            assert_eq!(code, 0, "{script}: {err}");
            assert_eq!(out.trim(), *want, "{script}: {err}");
        }
    })
    .await;
}

/// Issue 29, item 1, in a real worker pod (unprivileged, no namespaces): the hydra
/// (`tests/attacks/hydra.py`), a chain of processes each in a process group of its own whose tail
/// refills every slot the killer frees, outlived its command in this mode before (about 250
/// processes kept writing `/session/heartbeat`). Now its command ends at its time limit with the
/// whole tree gone before the session's next command, and another session on the node runs its
/// commands meanwhile.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_hydra_dies_whole_before_its_sessions_next_command() {
    with_namespace("hydra", |client, ns| async move {
        two_sessions(&client, &ns, ["hydra-a", "hydra-b"]).await;
        let script = format!(
            "python3 - 0 <<'KH_PY'\n{}\nKH_PY\n",
            include_str!("../../attacks/hydra.py")
        );
        let (code, err, took) = attack_beside(&ns, "hydra-a", "hydra-b", script, "8").await;
        assert_eq!(code, 124, "the hydra: {err}");
        assert!(
            !err.contains("did not finish in time"),
            "the supervisor lost the race: {err}"
        );
        assert!(took < Duration::from_secs(40), "returned after {took:?}");
        let (code, out, err) =
            cli_exec(&ns, "hydra-a", "ps -e -o comm= | grep -c '^python3$'", &[]);
        assert_eq!((code, out.as_str()), (1, "0\n"), "{err}");
        let (code, out, err) =
            cli_exec(&ns, "hydra-a", include_str!("../../attacks/still.sh"), &[]);
        assert_eq!((code, out.as_str()), (0, "still\n"), "{err}");
    })
    .await;
}
