//! Attacks on what the worker and the Tier-1 agent receive (issue 12, items 7 and 8), over real
//! HTTP on loopback:
//!
//! - a Tier-1 change archive far over the limit (issue 12 read a 1.5 GiB one whole and peaked at
//!   3.6 GB): streamed into a spool, cut off at the limit, the merge fails cleanly, the memory
//!   stays flat; the same for an agent's oversized exec answer;
//! - oversized request bodies to the worker API and to the agent: 413 at once or the moment the
//!   limit passes, and the next request on the same client still works;
//! - a panic inside a request (issue 12: a year-2300 mtime panicked the snapshot, and the worker
//!   answered 500 to every later exec while `/healthz` said ok): exec and `/readyz` answer 503
//!   `worker-broken` with the reason, never 500; ending the turn recovers; a panic that cannot be
//!   recovered fails `/healthz` too.
//!
//! The peers are real: the worker's own server, a real Tier-1 agent (a process, or in-process
//! behind a fake `/v1/changes`), and an axum stand-in for the operator's tier API. Bodies are
//! generated as they are sent; nothing large is ever built in memory.

use super::tier1_support::{spawn_agent, turn_with, workspace_root, AGENT_TOKEN};
use async_trait::async_trait;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use kube_harness_runtime::{
    event::kind, CommandExecutor, DisposeReport, ExecRequest as RuntimeExec, ExecResult, NextTier,
    TierError,
};
use kube_harness_service_kit::AuthConfig;
use kube_harness_tier1::{agent_http, Agent, AgentConfig, PodTier1, PodTier1Config};
use kube_harness_worker::api::{self, Worker, WorkerConfig};
use kube_harness_workspace::WorkspaceSpec;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// What the peers are allowed to send in these tests.
const LIMIT: u64 = MIB;
/// What the attacking peer offers: far over the limit, generated as it is sent.
const OFFERED: u64 = 128 * MIB;
const POD: &str = "t1-attack";
const WORKER_TOKEN: &str = "worker-token-attack";

/// The tests that measure the process's peak memory run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `VmHWM` of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap()
        .to_string();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Resets `VmHWM` to the current RSS (Linux ≥ 4.0).
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// `total` bytes, produced 64 KiB at a time as the peer reads them (`produced` counts what was
/// handed to the connection). Starts with `prefix`.
fn generated(prefix: Vec<u8>, total: u64, produced: Arc<AtomicU64>) -> Body {
    let chunk = Bytes::from(vec![b'A'; 64 << 10]);
    let first = Bytes::from(prefix);
    let rest = total - first.len() as u64;
    let chunks = rest / chunk.len() as u64;
    let tail = chunk.slice(..(rest % chunk.len() as u64) as usize);
    let stream = futures::stream::once(async move { first })
        .chain(futures::stream::iter(0..chunks).map(move |_| chunk.clone()))
        .chain(futures::stream::once(async move { tail }))
        .map(move |b| {
            produced.fetch_add(b.len() as u64, Ordering::SeqCst);
            Ok::<_, std::io::Error>(b)
        });
    Body::from_stream(stream)
}

/// A tar header of one regular file `session/evil.bin` of `size` bytes: what a change archive
/// that writes a huge file into the session starts with.
fn tar_header(size: u64) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_path("session/evil.bin").unwrap();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    h.as_bytes().to_vec()
}

// ---------------------------------------------------------------------------------------------
// The worker as the client of a Tier-1 pod: a peer that is the operator's tier API and the
// agent at once (one listener). The agent is a real in-process `Agent`, except for the routes
// the attack replaces.

#[derive(Clone, Copy, PartialEq)]
enum Attack {
    /// `GET /v1/changes` streams OFFERED bytes, chunked (no length announced).
    ChangesChunked,
    /// `GET /v1/changes` announces OFFERED bytes in its Content-Length, and sends them.
    ChangesDeclared,
    /// `POST /v1/exec` answers with OFFERED bytes of JSON.
    ExecAnswer,
}

struct Peer {
    attack: Attack,
    url: Mutex<String>,
    produced: Arc<AtomicU64>,
    deleted: Mutex<Vec<String>>,
}

fn sandbox(peer: &Peer, turn: &str) -> Value {
    json!({"turn": turn, "pod": POD, "phase": "Ready", "endpoint": *peer.url.lock().unwrap(),
           "token": AGENT_TOKEN, "source": "ordinary"})
}

async fn open(State(peer): State<Arc<Peer>>, Json(body): Json<Value>) -> Json<Value> {
    Json(sandbox(&peer, body["turn"].as_str().unwrap()))
}

async fn look(
    State(peer): State<Arc<Peer>>,
    axum::extract::Path((_, _, turn)): axum::extract::Path<(String, String, String)>,
) -> Json<Value> {
    Json(sandbox(&peer, &turn))
}

async fn end(
    State(peer): State<Arc<Peer>>,
    axum::extract::Path((_, _, turn)): axum::extract::Path<(String, String, String)>,
) -> StatusCode {
    peer.deleted.lock().unwrap().push(turn);
    StatusCode::NO_CONTENT
}

async fn changes(State(peer): State<Arc<Peer>>) -> Response {
    let header = tar_header(OFFERED - 512);
    let body = generated(header, OFFERED, peer.produced.clone());
    let mut response = ([(header::CONTENT_TYPE, "application/x-tar")], body).into_response();
    if peer.attack == Attack::ChangesDeclared {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, OFFERED.to_string().parse().unwrap());
    }
    response
}

async fn huge_exec_answer(State(peer): State<Arc<Peer>>) -> Response {
    let body = generated(
        br#"{"stdoutB64":""#.to_vec(),
        OFFERED,
        peer.produced.clone(),
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The peer, with its agent working over `agent_root`; returns it and its URL.
async fn peer(attack: Attack, agent_root: &Path) -> (Arc<Peer>, String) {
    let peer = Arc::new(Peer {
        attack,
        url: Mutex::new(String::new()),
        produced: Arc::new(AtomicU64::new(0)),
        deleted: Mutex::new(Vec::new()),
    });
    let agent = Arc::new(Agent::new(AgentConfig::new(agent_root)).unwrap());
    let agent_routes = agent_http::router(agent, AuthConfig::with_token(AGENT_TOKEN).unwrap());
    let mut app = Router::new()
        .route(
            "/v1/namespaces/{ns}/sessions/{session}/sandboxes",
            post(open),
        )
        .route(
            "/v1/namespaces/{ns}/sessions/{session}/sandboxes/{turn}",
            get(look).delete(end),
        );
    app = match attack {
        Attack::ChangesChunked | Attack::ChangesDeclared => app.route("/v1/changes", get(changes)),
        Attack::ExecAnswer => app.route("/v1/exec", post(huge_exec_answer)),
    };
    let app = app.fallback_service(agent_routes).with_state(peer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    *peer.url.lock().unwrap() = url.clone();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (peer, url)
}

fn pod_tier(url: &str, spool: &Path) -> Arc<PodTier1> {
    let mut config = PodTier1Config::new(url, "ns1", "s1", WORKER_TOKEN);
    config.poll_interval = Duration::from_millis(50);
    config.request_margin = Duration::from_secs(5);
    config.max_archive_bytes = LIMIT;
    config.max_answer_bytes = LIMIT as usize;
    config.spool_dir = spool.to_path_buf();
    Arc::new(PodTier1::new(config).unwrap())
}

/// Entries of a directory whose name starts with `.kube-harness` (a merge's leftovers).
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".kube-harness"))
        .collect()
}

/// A turn escalates to the attacking pod, then ends: the change archive is refused at the
/// limit, nothing of it is applied, the dispose reports it, the sandbox is still ended, no
/// spool is left, and neither the bytes pulled nor the peak memory come near what was offered.
async fn oversized_changes(attack: Attack) {
    let _one = SERIAL.lock().await;
    let agent_root = workspace_root();
    let spool = tempfile::tempdir().unwrap();
    let (peer, url) = peer(attack, agent_root.path()).await;
    let f = turn_with(pod_tier(&url, spool.path()));
    let out = f.turn.exec("echo kept > /session/kept.txt").await;
    assert_eq!((out.tier, out.exit_code), (0, 0), "{}", out.stderr);
    let out = f.turn.exec("git --version").await;
    assert_eq!(out.tier, 1, "escalated: {}", out.stderr);

    reset_peak_rss();
    let before = peak_rss();
    let usage = f.turn.end().await;
    let grown = peak_rss().saturating_sub(before);

    let events = f.events.events();
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == kind::DISPOSE_FAILED)
        .map(|e| &e.data)
        .collect();
    assert_eq!(
        failed,
        vec![&json!({"tier": 1, "error": format!(
            "the change archive of the Tier-1 pod {POD} is over the limit of {LIMIT} bytes (--max-archive-bytes); nothing was merged back"
        )})]
    );
    assert!(
        !events
            .iter()
            .any(|e| e.kind.starts_with("harness.file.") && e.data["source"] == "merge"),
        "nothing was merged"
    );
    assert!(!f.root.join("session/evil.bin").exists());
    assert_eq!(
        std::fs::read_to_string(f.root.join("session/kept.txt")).unwrap(),
        "kept\n"
    );
    assert_eq!(leftovers(&f.root.join("session")), Vec::<String>::new());
    let spooled: Vec<_> = std::fs::read_dir(spool.path()).unwrap().collect();
    assert!(spooled.is_empty(), "spool left behind: {spooled:?}");
    assert_eq!(usage["higherTier"]["bytesReturned"], 0);
    assert_eq!(
        peer.deleted.lock().unwrap().len(),
        1,
        "the sandbox was ended anyway"
    );
    let produced = peer.produced.load(Ordering::SeqCst);
    eprintln!("measured: {produced} bytes pulled, peak RSS +{grown} bytes, of {OFFERED} offered");
    assert!(
        produced < 48 * MIB,
        "the worker kept reading past the limit: {produced} of {OFFERED} bytes were pulled"
    );
    assert!(
        grown < 48 * MIB,
        "peak memory grew by {grown} bytes while {OFFERED} were offered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_change_archive_over_the_limit_is_cut_off_and_nothing_is_merged() {
    oversized_changes(Attack::ChangesChunked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_archive_declared_over_the_limit_is_refused_unread() {
    oversized_changes(Attack::ChangesDeclared).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_exec_answer_from_the_agent_is_refused_not_buffered() {
    let _one = SERIAL.lock().await;
    let agent_root = workspace_root();
    let spool = tempfile::tempdir().unwrap();
    let (peer, url) = peer(Attack::ExecAnswer, agent_root.path()).await;
    let f = turn_with(pod_tier(&url, spool.path()));
    reset_peak_rss();
    let before = peak_rss();
    let out = f.turn.exec("git --version").await;
    let grown = peak_rss().saturating_sub(before);
    assert_eq!((out.tier, out.exit_code), (1, 126), "{}", out.stderr);
    assert_eq!(
        out.stderr,
        format!("kube-harness: the Tier-1 pod {POD} sent an unreadable answer: the body is over the limit of {LIMIT} bytes\n")
    );
    let produced = peer.produced.load(Ordering::SeqCst);
    eprintln!("measured: {produced} bytes pulled, peak RSS +{grown} bytes, of {OFFERED} offered");
    assert!(produced < 48 * MIB, "{produced} of {OFFERED} bytes pulled");
    assert!(grown < 48 * MIB, "peak memory grew by {grown} bytes");
    f.turn.end().await;
}

// ---------------------------------------------------------------------------------------------
// Oversized request bodies to our servers.

/// An 8 MiB body (after `prefix`), generated as it is sent.
fn eight_mib(prefix: &[u8]) -> reqwest::Body {
    let chunk = Bytes::from(vec![b'A'; 64 << 10]);
    let first = Bytes::copy_from_slice(prefix);
    let stream = futures::stream::once(async move { first })
        .chain(futures::stream::iter(0..128).map(move |_| chunk.clone()))
        .map(Ok::<_, std::io::Error>);
    reqwest::Body::wrap_stream(stream)
}

fn length(prefix: &[u8]) -> u64 {
    prefix.len() as u64 + 128 * (64 << 10)
}

/// Sends an 8 MiB body (chunked, or with its length declared) and returns the status and the
/// JSON answer.
async fn send_big(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    prefix: &[u8],
    declared: bool,
) -> (StatusCode, Value) {
    let mut request = client
        .request(method, url)
        .bearer_auth(token)
        .body(eight_mib(prefix));
    if declared {
        request = request.header(header::CONTENT_LENGTH, length(prefix));
    }
    let r = request.send().await.unwrap();
    let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
    (status, r.json().await.unwrap())
}

/// A real worker over a fresh workspace with `next` as its higher tier.
struct TestWorker {
    url: String,
    http: reqwest::Client,
    _worker: Arc<Worker>,
    _tmp: tempfile::TempDir,
}

async fn worker(next: Option<Arc<dyn NextTier>>) -> TestWorker {
    let tmp = tempfile::tempdir().unwrap();
    for dir in ["session", "artifacts", "persistent", ".agents/skills"] {
        std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
    }
    let config = WorkerConfig::new("s1", tmp.path());
    let worker = Arc::new(Worker::new(config, next).unwrap());
    worker.readiness().unwrap();
    let listener = api::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(api::serve(
        listener,
        worker.clone(),
        AuthConfig::with_token(WORKER_TOKEN).unwrap(),
        std::future::pending(),
    ));
    TestWorker {
        url,
        http: reqwest::Client::new(),
        _worker: worker,
        _tmp: tmp,
    }
}

impl TestWorker {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(WORKER_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn exec(&self, script: &str) -> (u16, Value) {
        self.post("/v1/exec", json!({ "script": script })).await
    }

    async fn end_turn(&self) -> (u16, Value) {
        self.post("/v1/turns/end", json!({})).await
    }

    async fn probe(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_api_answers_413_to_oversized_json_and_serves_the_next_request() {
    let w = worker(None).await;
    // Several rounds: closing at once under a client still sending loses the 413 only some of
    // the time (a broken pipe or a reset instead).
    for declared in [false, true, false, true, false, true, false, true] {
        let (status, body) = send_big(
            &w.http,
            reqwest::Method::POST,
            &format!("{}/v1/exec", w.url),
            WORKER_TOKEN,
            br#"{"script": ""#,
            declared,
        )
        .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        assert_eq!(body["error"]["code"], "payload-too-large", "{body}");
        let (status, body) = w.exec("echo still-here").await;
        assert_eq!(
            (status, body["stdout"].as_str()),
            (200, Some("still-here\n"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_answers_413_to_oversized_archives_and_json_and_serves_the_next_request() {
    let root = workspace_root();
    // The agent's own temp dir, where its spools go: nothing may stay there.
    let tmp = tempfile::tempdir().unwrap();
    let agent = tokio::task::spawn_blocking({
        let root = root.path().to_path_buf();
        let tmp = tmp.path().to_str().unwrap().to_string();
        move || {
            spawn_agent(
                &root,
                &[
                    ("KH_TEST_AGENT_MAX_ARCHIVE", &LIMIT.to_string()),
                    ("TMPDIR", &tmp),
                ],
            )
        }
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    for declared in [false, true, false, true, false, true, false, true] {
        let (status, body) = send_big(
            &http,
            reqwest::Method::PUT,
            &format!("{}/v1/workspace", agent.url),
            AGENT_TOKEN,
            &[0u8; 512],
            declared,
        )
        .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        assert_eq!(
            body["error"],
            json!({"code": "payload-too-large", "message": format!("the workspace archive is over the limit of {LIMIT} bytes")})
        );
        let (status, body) = send_big(
            &http,
            reqwest::Method::POST,
            &format!("{}/v1/exec", agent.url),
            AGENT_TOKEN,
            br#"{"script": ""#,
            declared,
        )
        .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        assert_eq!(body["error"]["code"], "payload-too-large", "{body}");
        let r = http
            .get(format!("{}/readyz", agent.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"status": "ready", "bound": false}),
            "refused archives leave the agent unbound and serving"
        );
    }
    let scratch: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(scratch.len(), 1, "the agent's scratch dir: {scratch:?}");
    let spools: Vec<_> = std::fs::read_dir(&scratch[0]).unwrap().collect();
    assert!(spools.is_empty(), "partial spools left behind: {spools:?}");
    let placed: Vec<_> = std::fs::read_dir(root.path().join("session"))
        .unwrap()
        .collect();
    assert!(placed.is_empty(), "{placed:?}");
}

// ---------------------------------------------------------------------------------------------
// A panic inside a request.

/// A higher tier whose commands panic (an executor breaking its "must not panic" contract);
/// with `panic_on_dispose`, ending it panics too.
struct Panicky {
    panic_on_dispose: bool,
}

#[async_trait]
impl CommandExecutor for Panicky {
    fn tier(&self) -> u8 {
        1
    }
    async fn execute(&self, _: RuntimeExec) -> ExecResult {
        panic!("attack: the higher tier panicked");
    }
    async fn dispose(&self) -> Result<DisposeReport, TierError> {
        if self.panic_on_dispose {
            panic!("attack: disposing panicked");
        }
        Ok(DisposeReport::default())
    }
}

struct PanickyTier {
    panic_on_dispose: bool,
}

#[async_trait]
impl NextTier for PanickyTier {
    async fn provision(&self, _: &WorkspaceSpec) -> Result<Arc<dyn CommandExecutor>, TierError> {
        Ok(Arc::new(Panicky {
            panic_on_dispose: self.panic_on_dispose,
        }))
    }
}

const QUARANTINED: &str = "the runtime panicked while running a command (attack: the higher tier panicked); the command's outcome is unknown; the open turn is quarantined and no command runs until it is ended (POST /v1/turns/end)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_exec_is_503_with_the_reason_not_a_run_of_500s_and_ending_the_turn_recovers()
{
    let w = worker(Some(Arc::new(PanickyTier {
        panic_on_dispose: false,
    })))
    .await;
    let broken = json!({"error": {"code": "worker-broken", "message": QUARANTINED}});
    assert_eq!(w.exec("git status").await, (503, broken.clone()));
    assert_eq!(w.exec("echo hi").await, (503, broken.clone()), "not a 500");
    assert_eq!(w.probe("/readyz").await, (503, broken.clone()));
    assert_eq!(
        w.probe("/healthz").await,
        (200, json!({"status": "ok", "reason": QUARANTINED})),
        "ending the turn repairs it: no restart (it would lose the turn's Tier-1 changes)"
    );
    let (status, ended) = w.end_turn().await;
    assert_eq!(status, 200, "{ended}");
    assert!(ended["turn"]["turnId"].is_string(), "{ended}");
    let (status, body) = w.exec("echo hi").await;
    assert_eq!(
        (status, body["stdout"].as_str()),
        (200, Some("hi\n")),
        "{body}"
    );
    assert_eq!(w.probe("/readyz").await, (200, json!({"status": "ready"})));
    assert_eq!(w.probe("/healthz").await, (200, json!({"status": "ok"})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_that_cannot_be_recovered_fails_healthz_so_the_pod_is_restarted() {
    let w = worker(Some(Arc::new(PanickyTier {
        panic_on_dispose: true,
    })))
    .await;
    assert_eq!(w.exec("git status").await.0, 503);
    let (status, body) = w.end_turn().await;
    let reason = "the runtime panicked while ending turn ";
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("worker-broken"))
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with(reason), "{message}");
    assert!(
        message.ends_with(" (attack: disposing panicked); its tiers may not have been disposed; the worker is broken and must be restarted"),
        "{message}"
    );
    let broken = json!({"error": {"code": "worker-broken", "message": message}});
    assert_eq!(w.probe("/healthz").await, (503, broken.clone()));
    assert_eq!(w.probe("/readyz").await, (503, broken.clone()));
    assert_eq!(w.exec("echo hi").await, (503, broken.clone()));
    assert_eq!(w.end_turn().await, (200, json!({"turn": null})));
}

/// Issue 12's own input: a file dated 2300 in the session. Whether or not the snapshot copes
/// with it, the worker never answers 500, and when it reports a broken turn `/readyz` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_year_2300_mtime_never_makes_the_worker_answer_500() {
    let w = worker(None).await;
    for script in ["touch -d 2300-01-01 /session/f", "echo hi", "echo again"] {
        let (status, body) = w.exec(script).await;
        assert!(
            status == 200 || (status == 503 && body["error"]["code"] == "worker-broken"),
            "{script}: {status} {body}"
        );
        let (ready, why) = w.probe("/readyz").await;
        if status == 503 {
            assert_eq!((ready, &why), (503, &body), "{script}");
        }
        let (status, body) = w.end_turn().await;
        assert_eq!(status, 200, "{body}");
    }
}
