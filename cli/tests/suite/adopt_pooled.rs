//! A pooled worker (`--adopt-token-file`, a warm pool's pod) as a real process: it serves only
//! its probes and `POST /v1/adopt` until a session adopts it, then serves that session exactly
//! as a worker started for it, and never a second one. Hostile or broken adoptions are refused
//! and leave it spent (unready), never half-bound.

use base64::Engine as _;
use kube_harness_worker::api::model::{adoption_settings, AdoptRequest, ExecRequest, SkillFile};
use kube_harness_worker::api::WorkerClient;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(super) const POOL_TOKEN: &str = "pool-token-1";

pub(super) struct Pooled {
    child: Child,
    pub(super) url: String,
    _tmp: tempfile::TempDir,
    /// The pool pod's token directory: the pooled worker's own `--token-file` is `token` in it.
    pub(super) tokens: PathBuf,
    pub(super) root: PathBuf,
    runtime: PathBuf,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pooled worker on loopback, with a pool pod's layout: an empty token dir and `.agents`.
pub(super) fn pooled() -> Pooled {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    for dir in ["session", "artifacts", "persistent", ".agents"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let tokens = tmp.path().join("tokens");
    std::fs::create_dir(&tokens).unwrap();
    // The sandboxes' runtime directories, this worker's alone.
    let runtime = tmp.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let pool_token = tmp.path().join("pool-token");
    std::fs::write(&pool_token, POOL_TOKEN).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_kube-harness"))
        .args(["worker", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--token-file")
        .arg(tokens.join("token"))
        .arg("--adopt-token-file")
        .arg(&pool_token)
        .arg("--workspace-root")
        .arg(&root)
        .env("TMPDIR", &runtime)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Pooled {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _tmp: tmp,
        tokens,
        root,
        runtime,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(&p, "/readyz", None).0 != 200 {
        assert!(
            Instant::now() < deadline,
            "the pooled worker never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

/// One request on its own small runtime (the tests are otherwise synchronous).
fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match req.timeout(Duration::from_secs(30)).send().await {
            Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
            Err(_) => (0, Value::Null),
        }
    })
}

pub(super) fn get(p: &Pooled, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().get(format!("{}{path}", p.url));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    send(req)
}

pub(super) fn adopt(p: &Pooled, token: &str, body: &str) -> (u16, Value) {
    send(
        reqwest::Client::new()
            .post(format!("{}/v1/adopt", p.url))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
}

pub(super) fn request(tokens: &Path, session: &str, token: &str) -> AdoptRequest {
    let mut args =
        kube_harness_worker::protocol::worker_args::WorkerArgs::new(tokens.join("token"));
    args.session = session.into();
    args.deny_command = vec!["docker".into()];
    AdoptRequest {
        args: args.to_args(),
        token: token.into(),
        session_log_token: None,
        skills: vec![SkillFile {
            path: "review/SKILL.md".into(),
            content_base64: base64::engine::general_purpose::STANDARD.encode("# Review\nbe kind\n"),
        }],
    }
}

pub(super) fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[test]
fn waits_in_the_pool_then_serves_the_session_that_adopted_it_and_no_other() {
    let p = pooled();
    // Waiting: ready for the kubelet, nothing else, and no session token works.
    let (status, body) = get(&p, "/v1/status", Some("s1-token"));
    assert_eq!((status, code(&body)), (503, "not-adopted"), "{body}");
    let req = request(&p.tokens, "s1", "s1-token");
    let body = serde_json::to_string(&req).unwrap();
    let (status, answer) = adopt(&p, "s1-token", &body);
    assert_eq!(
        (status, code(&answer)),
        (401, "unauthorized"),
        "a session token is not the pool's"
    );

    let (status, answer) = adopt(&p, POOL_TOKEN, &body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["session"], "s1");
    assert_eq!(answer["settings"], adoption_settings(&req));

    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = WorkerClient::new(&p.url, "s1-token").unwrap();
    rt.block_on(async {
        let status = client.status().await.unwrap();
        assert_eq!(status.session, "s1");
        assert_eq!(
            status.settings.as_deref(),
            Some(adoption_settings(&req).as_str())
        );
        assert!(status.ready);
        let r = client
            .exec(&ExecRequest::new("cat /.agents/review/SKILL.md"))
            .await
            .unwrap();
        assert_eq!(
            (r.outcome.stdout.as_str(), r.outcome.exit_code),
            ("# Review\nbe kind\n", 0)
        );
        // The skills are read-only to commands, as a cold worker's projected volume is.
        let r = client
            .exec(&ExecRequest::new("echo x > /.agents/review/SKILL.md"))
            .await
            .unwrap();
        assert_ne!(r.outcome.exit_code, 0, "{r:?}");
        // The policy came with the adoption.
        let r = client.exec(&ExecRequest::new("docker ps")).await.unwrap();
        assert_eq!(r.outcome.exit_code, 126, "{r:?}");
    });
    assert_eq!(
        std::fs::read_to_string(p.root.join(".agents/review/SKILL.md")).unwrap(),
        "# Review\nbe kind\n"
    );
    // The token file is the worker's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(p.tokens.join("token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o400);

    // One use: neither the pool's token nor a new session gets it again.
    let other = serde_json::to_string(&request(&p.tokens, "s2", "s2-token")).unwrap();
    let (status, answer) = adopt(&p, POOL_TOKEN, &other);
    assert_eq!(
        (status, code(&answer)),
        (409, "already-adopted"),
        "{answer}"
    );
    let (status, _) = get(&p, "/v1/status", Some("s2-token"));
    assert_eq!(status, 401);
    let (status, body) = get(&p, "/v1/status", Some("s1-token"));
    assert_eq!((status, body["session"].as_str()), (200, Some("s1")));
}

#[test]
fn a_hostile_or_broken_adoption_is_refused_and_spends_the_worker() {
    // A skill path that climbs out of /.agents.
    let p = pooled();
    let mut req = request(&p.tokens, "s1", "s1-token");
    req.skills[0].path = "../session/planted".into();
    let (status, answer) = adopt(&p, POOL_TOKEN, &serde_json::to_string(&req).unwrap());
    assert_eq!(
        (status, code(&answer)),
        (400, "adoption-failed"),
        "{answer}"
    );
    assert!(!p.root.join("session/planted").exists());
    // Spent: unready (the pool replaces it) and never adopted after all.
    assert_eq!(get(&p, "/readyz", None).0, 503);
    let good = serde_json::to_string(&request(&p.tokens, "s1", "s1-token")).unwrap();
    let (status, answer) = adopt(&p, POOL_TOKEN, &good);
    assert_eq!(
        (status, code(&answer)),
        (409, "already-adopted"),
        "{answer}"
    );

    // A token file that already exists (a symlink planted where it goes) is not written through.
    let p = pooled();
    let target = p.root.join("session/victim");
    std::fs::write(&target, "untouched").unwrap();
    std::os::unix::fs::symlink(&target, p.tokens.join("token")).unwrap();
    let (status, answer) = adopt(&p, POOL_TOKEN, &good);
    assert_eq!(
        (status, code(&answer)),
        (400, "adoption-failed"),
        "{answer}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");

    // Arguments for another tier, and a body that is not an adoption.
    let p = pooled();
    let mut req = request(&p.tokens, "s1", "s1-token");
    req.args.extend(["--tier".into(), "1".into()]);
    let (status, answer) = adopt(&p, POOL_TOKEN, &serde_json::to_string(&req).unwrap());
    assert_eq!(
        (status, code(&answer)),
        (400, "adoption-failed"),
        "{answer}"
    );
    let p = pooled();
    let (status, answer) = adopt(&p, POOL_TOKEN, "{\"args\": 5}");
    assert_eq!((status, code(&answer)), (400, "bad-request"), "{answer}");
    assert_eq!(get(&p, "/readyz", None).0, 503);
}

/// The sandbox runtime directories under the worker's TMPDIR.
fn sandboxes(p: &Pooled) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&p.runtime)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("kube-harness-sandbox-"))
        .collect();
    names.sort();
    names
}

/// What a command of the adopted session can run: `compgen -c` lists the commands on its PATH.
fn commands(client: &WorkerClient, rt: &tokio::runtime::Runtime) -> Vec<String> {
    let r = rt
        .block_on(client.exec(&ExecRequest::new("compgen -c")))
        .unwrap();
    assert_eq!(r.outcome.exit_code, 0, "{r:?}");
    r.outcome.stdout.lines().map(String::from).collect()
}

#[test]
fn the_sandbox_built_in_the_pool_serves_only_an_adoption_that_asks_for_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let plain = |tokens: &Path, session: &str, token: &str| {
        let mut args =
            kube_harness_worker::protocol::worker_args::WorkerArgs::new(tokens.join("token"));
        args.session = session.into();
        AdoptRequest {
            args: args.to_args(),
            token: token.into(),
            session_log_token: None,
            skills: Vec::new(),
        }
    };

    // A session with the worker's defaults gets the sandbox built while the pod waited, and so
    // does one whose deny list names no Tier-0 tool (examples/demo.yaml's): the same sandbox.
    let p = pooled();
    let waiting = sandboxes(&p);
    assert_eq!(
        waiting.len(),
        1,
        "one sandbox built in the pool: {waiting:?}"
    );
    let mut req = plain(&p.tokens, "s1", "s1-token");
    let mut args =
        kube_harness_worker::protocol::worker_args::WorkerArgs::new(p.tokens.join("token"));
    args.session = "s1".into();
    args.deny_command = vec!["shutdown".into(), "reboot".into()];
    req.args = args.to_args();
    let (status, answer) = adopt(&p, POOL_TOKEN, &serde_json::to_string(&req).unwrap());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(sandboxes(&p), waiting, "the prepared sandbox was taken");
    let client = WorkerClient::new(&p.url, "s1-token").unwrap();
    let defaults = commands(&client, &rt);
    assert!(defaults.iter().any(|c| c == "cat"), "{defaults:?}");
    let python = Path::new("/usr/bin/python3").exists();
    assert_eq!(defaults.iter().any(|c| c == "python3"), python);

    // A session that turns python off and denies cat never gets it: its own is built, and the
    // prepared one (its runtime directory, its forker) is gone.
    let p = pooled();
    let waiting = sandboxes(&p);
    let mut req = plain(&p.tokens, "s2", "s2-token");
    let mut args =
        kube_harness_worker::protocol::worker_args::WorkerArgs::new(p.tokens.join("token"));
    args.session = "s2".into();
    args.python = false;
    args.deny_command = vec!["cat".into()];
    req.args = args.to_args();
    let (status, answer) = adopt(&p, POOL_TOKEN, &serde_json::to_string(&req).unwrap());
    assert_eq!(status, 200, "{answer}");
    let now = sandboxes(&p);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(
        now, waiting,
        "a sandbox built for other settings was reused"
    );
    let client = WorkerClient::new(&p.url, "s2-token").unwrap();
    let own = commands(&client, &rt);
    assert!(!own.iter().any(|c| c == "cat" || c == "python3"), "{own:?}");
    assert!(own.iter().any(|c| c == "ls"), "{own:?}");
}
