//! A small stand-in of the operator's tier API for `PodTier1` (the client is what is under test;
//! the real operator is tested on the cluster): it starts an agent process per sandbox, answers
//! Pending then Ready (or Failed, 503, never Ready), and kills the agent on DELETE, as deleting
//! the pod would.

use super::{spawn_agent, AgentProcess, AGENT_TOKEN};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use kube_harness_tier1::{PodTier1, PodTier1Config};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const WORKER_TOKEN: &str = "worker-token-abcdef";

#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    Ready,
    Failed,
    Uncertain,
    NeverReady,
    /// One agent for every turn, kept at the end of each (the tier's idleTimeoutSeconds): from
    /// the second turn on it is answered `reused`.
    Keep,
}

#[derive(Default)]
pub struct Book {
    pub posts: u32,
    pub polls: HashMap<String, u32>,
    pub agents: HashMap<String, (AgentProcess, tempfile::TempDir)>,
    pub deleted: Vec<String>,
    pub workspace_bytes: Vec<u64>,
    /// Mode::Keep: the turns opened, in order.
    pub kept_turns: Vec<String>,
}

pub struct Operator {
    pub mode: Mode,
    /// Answer the first open with a 500, as a replica restarting would.
    pub flaky: bool,
    pub book: Mutex<Book>,
}

impl Operator {
    pub fn deleted(&self) -> Vec<String> {
        self.book.lock().unwrap().deleted.clone()
    }

    /// SIGKILLs every agent, as when the pod dies.
    pub fn kill_agents(&self) {
        for (agent, _) in self.book.lock().unwrap().agents.values_mut() {
            agent.kill();
        }
    }

    pub fn agent_pids(&self) -> Vec<u32> {
        let book = self.book.lock().unwrap();
        book.agents.values().map(|(a, _)| a.pid()).collect()
    }
}

fn authorized(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {WORKER_TOKEN}"))
}

async fn open(
    State(op): State<Arc<Operator>>,
    Path((ns, session)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !authorized(&headers) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": {"code": "unauthorized", "message": "bad token"}})),
        )
            .into_response();
    }
    assert_eq!((ns.as_str(), session.as_str()), ("ns1", "s1"));
    let turn = body["turn"].as_str().unwrap().to_string();
    let bytes = body["workspaceBytes"].as_u64().unwrap();
    {
        let mut book = op.book.lock().unwrap();
        book.posts += 1;
        book.workspace_bytes.push(bytes);
        if op.flaky && book.posts == 1 {
            return (StatusCode::INTERNAL_SERVER_ERROR, "restarting").into_response();
        }
    }
    if op.mode == Mode::Uncertain {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "the claim patch failed without an answer"})),
        )
            .into_response();
    }
    if op.mode == Mode::Keep {
        let fresh = {
            let mut book = op.book.lock().unwrap();
            if !book.kept_turns.contains(&turn) {
                book.kept_turns.push(turn.clone());
            }
            !book.agents.contains_key("kept")
        };
        if fresh {
            let agent = tokio::task::spawn_blocking(|| {
                let root = tempfile::tempdir().unwrap();
                (spawn_agent(root.path(), &[]), root)
            })
            .await
            .unwrap();
            op.book.lock().unwrap().agents.insert("kept".into(), agent);
        }
    }
    if op.mode == Mode::Ready && !op.book.lock().unwrap().agents.contains_key(&turn) {
        let agent = tokio::task::spawn_blocking(|| {
            let root = tempfile::tempdir().unwrap();
            (spawn_agent(root.path(), &[]), root)
        })
        .await
        .unwrap();
        op.book.lock().unwrap().agents.insert(turn.clone(), agent);
    }
    Json(sandbox(&op, &turn)).into_response()
}

fn sandbox(op: &Operator, turn: &str) -> Value {
    let mut book = op.book.lock().unwrap();
    let polls = {
        let p = book.polls.entry(turn.to_string()).or_default();
        *p += 1;
        *p
    };
    let pod = format!("t1-{}", &turn[..8]);
    match op.mode {
        Mode::Keep => {
            let url = book.agents["kept"].0.url.clone();
            let reused = book.kept_turns.first().map(String::as_str) != Some(turn);
            json!({"turn": turn, "pod": "t1-kept", "phase": "Ready", "endpoint": url, "token": AGENT_TOKEN,
                   "source": "ordinary", "reused": reused})
        }
        Mode::Ready if polls >= 3 => {
            let url = book.agents[turn].0.url.clone();
            json!({"turn": turn, "pod": pod, "phase": "Ready", "endpoint": url, "token": AGENT_TOKEN,
                   "source": "ordinary", "missReason": "stock_empty"})
        }
        Mode::Failed if polls >= 2 => json!({"turn": turn, "pod": pod, "phase": "Failed",
            "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}),
        _ => json!({"turn": turn, "pod": pod, "phase": "Pending", "source": "ordinary"}),
    }
}

async fn look(
    State(op): State<Arc<Operator>>,
    Path((_, _, turn)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    Json(sandbox(&op, &turn)).into_response()
}

async fn end(
    State(op): State<Arc<Operator>>,
    Path((_, _, turn)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> StatusCode {
    if !authorized(&headers) {
        return StatusCode::UNAUTHORIZED;
    }
    let removed = {
        let mut book = op.book.lock().unwrap();
        book.deleted.push(turn.clone());
        // Mode::Keep keeps its agent: the pod is kept for the next turn.
        book.agents.remove(&turn)
    };
    // Deleting the pod: the agent process goes away.
    drop(removed);
    StatusCode::NO_CONTENT
}

pub async fn operator(mode: Mode, flaky: bool) -> (Arc<Operator>, String) {
    let op = Arc::new(Operator {
        mode,
        flaky,
        book: Mutex::new(Book::default()),
    });
    let app = Router::new()
        .route(
            "/v1/namespaces/{ns}/sessions/{session}/sandboxes",
            post(open),
        )
        .route(
            "/v1/namespaces/{ns}/sessions/{session}/sandboxes/{turn}",
            get(look).delete(end),
        )
        .with_state(op.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (op, url)
}

pub fn pod_tier(url: &str, provision: Duration) -> Arc<PodTier1> {
    let mut config = PodTier1Config::new(url, "ns1", "s1", WORKER_TOKEN);
    config.provision_timeout = provision;
    config.poll_interval = Duration::from_millis(50);
    config.command_timeout = Duration::from_secs(30);
    config.request_margin = Duration::from_secs(5);
    Arc::new(PodTier1::new(config).unwrap())
}
