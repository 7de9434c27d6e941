//! The streamed exec (`Accept: application/x-ndjson`) against a real worker over loopback: output
//! as it is written, the result last, and a client that goes away cancels its command (the
//! process tree is killed and the session log's events say so).

use super::api_support::{config, start, start_with, TestLog, TOKEN};
use super::tier1_support::sleeping;
use kube_harness_worker::api::model::{ExecRequest, ExecStreamLine, NDJSON};
use std::time::{Duration, Instant};

/// Opens a streamed exec with a raw client (so the test decides when to go away).
async fn open(base_url: &str, script: &str) -> reqwest::Response {
    let response = reqwest::Client::new()
        .post(format!("{base_url}/v1/exec"))
        .bearer_auth(TOKEN)
        .header("accept", NDJSON)
        .json(&ExecRequest::new(script))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], NDJSON);
    response
}

/// The next complete line of the stream, parsed.
async fn next_line(response: &mut reqwest::Response, pending: &mut Vec<u8>) -> ExecStreamLine {
    loop {
        if let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            return serde_json::from_slice(&line).unwrap();
        }
        let chunk = response
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended early");
        pending.extend_from_slice(&chunk);
    }
}

#[tokio::test]
async fn output_arrives_as_it_is_written_and_the_result_comes_last() {
    let w = start().await;
    let started = Instant::now();
    let mut response = open(
        &w.base_url,
        "for i in 1 2 3; do echo $i; sleep 1; done; echo done >&2",
    )
    .await;
    let mut pending = Vec::new();
    let mut out = String::new();
    let mut first_at = None;
    let result = loop {
        match next_line(&mut response, &mut pending).await {
            ExecStreamLine::Stdout { data } => {
                first_at.get_or_insert(started.elapsed());
                out.push_str(&data);
            }
            ExecStreamLine::Stderr { data } => assert_eq!(data, "done\n"),
            ExecStreamLine::Keepalive => {}
            ExecStreamLine::Result(result) => break *result,
            other => panic!("unexpected line {other:?}"),
        }
    };
    let first_at = first_at.expect("no output line");
    assert!(
        first_at < Duration::from_millis(1500),
        "the first line took {first_at:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert_eq!(out, "1\n2\n3\n");
    assert_eq!(
        (result.outcome.stdout.as_str(), result.outcome.exit_code),
        ("1\n2\n3\n", 0)
    );
    assert!(result
        .events
        .iter()
        .any(|e| e.kind == "harness.runtime.command.completed"));
    // Nothing after the result.
    assert!(pending.is_empty());
    assert!(response.chunk().await.unwrap().is_none());
}

#[tokio::test]
async fn the_typed_client_streams_and_returns_the_result() {
    let w = start().await;
    let mut seen = Vec::new();
    let r = w
        .client
        .exec_stream(&ExecRequest::new("echo a; echo b >&2; exit 3"), |line| {
            seen.push(line.clone())
        })
        .await
        .unwrap();
    assert_eq!(r.outcome.exit_code, 3);
    assert!(
        seen.contains(&ExecStreamLine::Stdout { data: "a\n".into() }),
        "{seen:?}"
    );
    assert!(
        seen.contains(&ExecStreamLine::Stderr { data: "b\n".into() }),
        "{seen:?}"
    );
    // A refusal before anything ran is an error line, as the plain exec's status and code.
    let (tmp, mut cfg) = config();
    cfg.deny_commands = vec!["docker".into()];
    let w = start_with(tmp, cfg).await;
    let r = w
        .client
        .exec_stream(&ExecRequest::new("docker ps"), |_| {})
        .await
        .unwrap();
    assert_eq!(
        r.outcome.exit_code, 126,
        "a policy refusal is a result, as in a plain exec"
    );
}

/// A client that goes away mid-command cancels it: whether the command was writing (the write to
/// the gone client fails) or silent (the keepalive's does).
#[tokio::test]
async fn a_client_that_goes_away_cancels_its_command() {
    let log = TestLog::start().await;
    let (tmp, mut cfg) = config();
    cfg.session_log = Some(log.config());
    let w = start_with(tmp, cfg).await;
    for (script, marker) in [("echo started; sleep 3701", "3701"), ("sleep 3702", "3702")] {
        let mut response = open(&w.base_url, script).await;
        let mut pending = Vec::new();
        if script.starts_with("echo") {
            assert_eq!(
                next_line(&mut response, &mut pending).await,
                ExecStreamLine::Stdout {
                    data: "started\n".into()
                }
            );
        }
        // The shell may print before its `sleep` is exec'd: wait until it is there.
        let deadline = Instant::now() + Duration::from_secs(10);
        while sleeping(&[marker]).len() != 1 {
            assert!(Instant::now() < deadline, "{script}: the command never ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(response);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sleeping(&[marker]).is_empty() {
            assert!(
                Instant::now() < deadline,
                "{script}: still running after the client left"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The log says so: both commands completed as cancelled.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = log.client().read_all("s1").await.unwrap();
        let cancelled = events
            .iter()
            .filter(|e| {
                e.event_type == "harness.runtime.command.completed"
                    && e.payload["stderr"]
                        .as_str()
                        .is_some_and(|s| s.contains("the command was cancelled"))
            })
            .count();
        if cancelled == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "{events:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And the session takes the next command.
    let r = w.client.exec(&ExecRequest::new("echo next")).await.unwrap();
    assert_eq!(r.outcome.stdout, "next\n");
}
