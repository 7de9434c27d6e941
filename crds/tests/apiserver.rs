//! The CRDs' validation against a real API server (issue 30, item 7): every field that becomes a
//! name, a path, a flag or a label refuses what broke the operator, and ordinary objects pass.
//! Starts etcd and kube-apiserver from `KUBEBUILDER_ASSETS` (default: the test cluster's build,
//! `/var/cache/kube-harness/k8s-v1.34.4/bin`, docs/testing.md), applies the committed CRDs
//! (`KH_CRD_DIR` to try others) and dry-runs objects with kubectl. Skipped, saying so, when the
//! binaries are not there. Failed on the old code (its CRDs applied with `KH_CRD_DIR`): every
//! `refused` case below was created.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    children: Vec<Child>,
    dir: PathBuf,
    kubectl: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

impl Server {
    fn start(bin: &Path) -> Server {
        let dir = std::env::temp_dir().join(format!("kh-crd-apiserver-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("sa.key");
        let public = dir.join("sa.pub");
        assert!(
            run(Command::new("openssl")
                .args(["genrsa", "-out"])
                .arg(&key)
                .arg("2048"))
            .0
        );
        assert!(
            run(Command::new("openssl")
                .args(["rsa", "-pubout", "-in"])
                .arg(&key)
                .arg("-out")
                .arg(&public))
            .0
        );
        std::fs::write(
            dir.join("tokens.csv"),
            "kh-test,admin,admin,system:masters\n",
        )
        .unwrap();
        let (client, peer, secure) = (free_port(), free_port(), free_port());
        let log = |name: &str| Stdio::from(std::fs::File::create(dir.join(name)).unwrap());
        let etcd = Command::new(bin.join("etcd"))
            .arg("--data-dir")
            .arg(dir.join("etcd"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .stdout(log("etcd.log"))
            .stderr(log("etcd.err"))
            .spawn()
            .unwrap();
        let mut server = Server {
            children: vec![etcd],
            dir: dir.clone(),
            kubectl: bin.join("kubectl"),
        };
        let api = Command::new(bin.join("kube-apiserver"))
            .arg(format!("--etcd-servers=http://127.0.0.1:{client}"))
            .arg(format!("--secure-port={secure}"))
            .args([
                "--bind-address=127.0.0.1",
                "--authorization-mode=AlwaysAllow",
            ])
            .arg("--cert-dir")
            .arg(dir.join("certs"))
            .arg("--token-auth-file")
            .arg(dir.join("tokens.csv"))
            .args([
                "--service-account-issuer=https://kh.test",
                "--service-cluster-ip-range=10.0.0.0/24",
            ])
            .arg("--service-account-key-file")
            .arg(&public)
            .arg("--service-account-signing-key-file")
            .arg(&key)
            .arg("--disable-admission-plugins=ServiceAccount")
            .stdout(log("apiserver.log"))
            .stderr(log("apiserver.err"))
            .spawn()
            .unwrap();
        server.children.push(api);
        std::fs::write(
            dir.join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{secure}\", insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: kh-test}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
            ),
        )
        .unwrap();
        let started = Instant::now();
        while !server.kubectl(&["get", "--raw", "/readyz"], None).0 {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "the API server did not become ready (logs in {})",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        server
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(self.dir.join("kubeconfig"))
            .args(args);
        let Some(input) = stdin else {
            return run(&mut cmd);
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// Whether the API server takes `object` (a server-side dry run), and what it said.
    fn takes(&self, object: &serde_json::Value) -> (bool, String) {
        self.kubectl(
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&object.to_string()),
        )
    }
}

fn session(name: &str, spec: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec
    })
}

fn assets() -> Option<PathBuf> {
    let dir = std::env::var_os("KUBEBUILDER_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/kube-harness/k8s-v1.34.4/bin"));
    let have = ["etcd", "kube-apiserver", "kubectl"]
        .iter()
        .all(|b| dir.join(b).is_file());
    let openssl = Command::new("openssl").arg("version").output().is_ok();
    (have && openssl).then_some(dir)
}

#[test]
fn a_real_api_server_refuses_what_becomes_a_bad_name_path_flag_or_label() {
    let Some(bin) = assets() else {
        eprintln!("skipped: no etcd, kube-apiserver and kubectl in KUBEBUILDER_ASSETS (docs/testing.md), or no openssl");
        return;
    };
    let server = Server::start(&bin);
    let crds = std::env::var_os("KH_CRD_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf());
    for name in [
        "harnesssessions.kubeharness.dev",
        "sandboxtiers.kubeharness.dev",
        "harnessturns.kubeharness.dev",
    ] {
        let file = crds.join(format!("{name}.yaml"));
        let (ok, out) = server.kubectl(&["apply", "-f", file.to_str().unwrap()], None);
        assert!(ok, "the CRD {name} is refused: {out}");
        let (ok, out) = server.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{name}"),
            ],
            None,
        );
        assert!(ok, "{out}");
    }
    let selector = |labels: usize| {
        let m: serde_json::Map<String, serde_json::Value> = (0..labels)
            .map(|i| (format!("k{i}"), serde_json::json!("v")))
            .collect();
        serde_json::json!({"podSelector": {"matchLabels": m}})
    };
    let taken = [
        session(
            "ordinary",
            serde_json::json!({
                "workerTier": "tier0", "escalation": {"tier": "rust-1.x"},
                "policy": {"denyCommands": ["git", "g++", "python3.11", "apt-get"]},
                "workspace": {"storageClassName": "fast", "skills": [
                    {"configMap": "review"}, {"configMap": "docs", "path": "team/docs"}
                ]},
                "access": {"clients": (0..16).map(|_| selector(8)).collect::<Vec<_>>()},
            }),
        ),
        session(&"a".repeat(63), serde_json::json!({})),
        serde_json::json!({
            "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
            "metadata": {"name": "rust"},
            "spec": {"level": 1, "template": {"image": "rust", "maxProcesses": 512},
                     "capabilities": ["build-toolchain"],
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}}
        }),
    ];
    let refused = [
        (
            "a tier name that climbs",
            session(
                "t",
                serde_json::json!({"escalation": {"tier": "../sandboxtiers/x"}}),
            ),
            "escalation.tier",
        ),
        (
            "a worker tier that climbs",
            session("w", serde_json::json!({"workerTier": "../x"})),
            "workerTier",
        ),
        (
            "a skill path out of /.agents",
            session(
                "s1",
                serde_json::json!({"workspace": {"skills": [{"configMap": "c", "path": "../session"}]}}),
            ),
            "path",
        ),
        (
            "a skill path with an element starting with '..' (no ConfigMap volume item path)",
            session(
                "s1b",
                serde_json::json!({"workspace": {"skills": [{"configMap": "c", "path": "..data"}]}}),
            ),
            "path",
        ),
        (
            "a skill path with a later element starting with '..'",
            session(
                "s1c",
                serde_json::json!({"workspace": {"skills": [{"configMap": "c", "path": "a/..b"}]}}),
            ),
            "path",
        ),
        (
            "an absolute skill path",
            session(
                "s2",
                serde_json::json!({"workspace": {"skills": [{"configMap": "c", "path": "/etc"}]}}),
            ),
            "path",
        ),
        (
            "two skills at one path",
            session(
                "s3",
                serde_json::json!({"workspace": {"skills": [{"configMap": "a"}, {"configMap": "b", "path": "a"}]}}),
            ),
            "skills",
        ),
        (
            "a skill's ConfigMap that is no name",
            session(
                "s4",
                serde_json::json!({"workspace": {"skills": [{"configMap": "../x"}]}}),
            ),
            "configMap",
        ),
        (
            "a deny entry that is a flag",
            session(
                "d",
                serde_json::json!({"policy": {"denyCommands": ["--network=true"]}}),
            ),
            "denyCommands",
        ),
        (
            "a deny entry that is a list",
            session(
                "d2",
                serde_json::json!({"policy": {"denyCommands": ["git,curl"]}}),
            ),
            "denyCommands",
        ),
        (
            "a 70-character name",
            session(&"a".repeat(70), serde_json::json!({})),
            "63 characters",
        ),
        (
            "17 access clients",
            session(
                "a1",
                serde_json::json!({"access": {"clients": (0..17).map(|_| selector(1)).collect::<Vec<_>>()}}),
            ),
            "clients",
        ),
        (
            "a selector of 9 labels",
            session(
                "a2",
                serde_json::json!({"access": {"clients": [selector(9)]}}),
            ),
            "matchLabels",
        ),
        (
            "a storage class that is no name",
            session(
                "c",
                serde_json::json!({"workspace": {"storageClassName": "../x"}}),
            ),
            "storageClassName",
        ),
        (
            "a claim that is no name",
            session(
                "p",
                serde_json::json!({"workspace": {"persistentDirs": [{"name": "n", "source": {"claim": {"claimName": "a/b"}}}]}}),
            ),
            "claimName",
        ),
    ];
    let mut taken_wrongly = Vec::new();
    for (what, object, field) in &refused {
        let (ok, out) = server.takes(object);
        if ok {
            taken_wrongly.push(*what);
        } else {
            assert!(
                out.contains(field),
                "{what}: the message names {field}: {out}"
            );
        }
    }
    let mut refused_wrongly = Vec::new();
    for object in &taken {
        let (ok, out) = server.takes(object);
        if !ok {
            refused_wrongly.push(format!("{}: {out}", object["metadata"]["name"]));
        }
    }
    assert!(
        taken_wrongly.is_empty() && refused_wrongly.is_empty(),
        "taken: {taken_wrongly:?}; refused: {refused_wrongly:?}"
    );
    turn_records_keep_their_turn_pod_and_end(&server);
}

fn turn(spec: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
        "metadata": {"name": "demo-turn-1", "namespace": "default"}, "spec": spec
    })
}

/// A HarnessTurn (issue 36) is one turn of one session: its session and turn never change, its
/// pod is set once, and an ended turn stays ended (the record's guarantees across replicas rest
/// on these); a turn id with a control character is refused.
fn turn_records_keep_their_turn_pod_and_end(server: &Server) {
    use serde_json::json;
    let (ok, out) = server.takes(&turn(json!({"session": "demo", "turn": "t\u{0007}x"})));
    assert!(!ok && out.contains("control"), "a control character: {out}");
    let (ok, out) = server.takes(&turn(
        json!({"session": "demo", "turn": "t", "pod": "?watch=true"}),
    ));
    assert!(
        !ok && out.contains("pod must be a pod name"),
        "a pod that is no name: {out}"
    );
    let base = json!({"session": "demo", "turn": "turn 1: a/b", "tier": "rust"});
    let (ok, out) = server.kubectl(&["create", "-f", "-"], Some(&turn(base).to_string()));
    assert!(ok, "{out}");
    let update = |spec: serde_json::Value| {
        server.kubectl(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&turn(spec).to_string()),
        )
    };
    let set_pod = json!({"session": "demo", "turn": "turn 1: a/b", "tier": "rust", "pod": "t1-a"});
    let (ok, out) = update(set_pod);
    assert!(ok, "setting the pod once: {out}");
    for (what, spec, says) in [
        (
            "another turn",
            json!({"session": "demo", "turn": "turn 2", "pod": "t1-a"}),
            "never change",
        ),
        (
            "another session",
            json!({"session": "other", "turn": "turn 1: a/b", "pod": "t1-a"}),
            "never change",
        ),
        (
            "another pod",
            json!({"session": "demo", "turn": "turn 1: a/b", "pod": "t1-b"}),
            "pod never changes",
        ),
    ] {
        let (ok, out) = update(spec);
        assert!(!ok && out.contains(says), "{what} was taken: {out}");
    }
    let ended = json!({"session": "demo", "turn": "turn 1: a/b", "pod": "t1-a", "ended": true});
    let (ok, out) = update(ended);
    assert!(ok, "ending: {out}");
    let revived = json!({"session": "demo", "turn": "turn 1: a/b", "pod": "t1-a", "ended": false});
    let (ok, out) = update(revived);
    assert!(
        !ok && out.contains("stays ended"),
        "an ended turn revived: {out}"
    );
}
