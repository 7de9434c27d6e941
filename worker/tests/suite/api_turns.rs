//! One client's turn at a time (`POST /v1/turns`): the owner's commands and end run, everyone
//! else's get 409 `turn-busy` naming the owner, a finished turn's id gets 409 `turn-ended`, an
//! idle turn is ended by the worker, and bad ids or client names are 400 with nothing opened.

use super::api_support::{config, raw, start, start_with, TOKEN};
use kube_harness_protocol::worker_api::{EndTurnRequest, ExecRequest, OpenTurnRequest};
use kube_harness_protocol::WorkerClientError;
use std::time::Duration;

fn code(e: &WorkerClientError) -> (Option<u16>, Option<&str>) {
    (e.status(), e.code())
}

fn in_turn(script: &str, turn: &str) -> ExecRequest {
    let mut req = ExecRequest::new(script);
    req.turn_id = Some(turn.into());
    req
}

fn end(turn: Option<&str>) -> EndTurnRequest {
    EndTurnRequest {
        run_id: None,
        turn_id: turn.map(String::from),
    }
}

fn named(client: &str) -> OpenTurnRequest {
    OpenTurnRequest {
        client: Some(client.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_runs_in_and_ends_its_turn() {
    let w = start().await;
    let c = &w.client;
    let opened = c.open_turn(&named("agent-a")).await.unwrap();
    assert_eq!(opened.idle_timeout_ms, 900_000);
    let turn = opened.turn_id.as_str();
    let r = c
        .exec(&in_turn("echo mine > /session/a; cat /session/a", turn))
        .await;
    assert_eq!(r.unwrap().outcome.stdout, "mine\n");

    // Another client: without the id, with another id, opening its own, ending it.
    let busy = c.exec(&ExecRequest::new("echo theirs")).await.unwrap_err();
    assert_eq!(code(&busy), (Some(409), Some("turn-busy")), "{busy}");
    assert!(
        busy.to_string().contains("\"agent-a\""),
        "names the owner: {busy}"
    );
    assert!(busy.to_string().contains(turn), "names the turn: {busy}");
    let other = c
        .exec(&in_turn("echo theirs", "turn_0_x"))
        .await
        .unwrap_err();
    assert_eq!(code(&other), (Some(409), Some("turn-busy")), "{other}");
    let twice = c.open_turn(&named("agent-b")).await.unwrap_err();
    assert_eq!(code(&twice), (Some(409), Some("turn-busy")), "{twice}");
    let steal = c.end_turn_with(&end(None)).await.unwrap_err();
    assert_eq!(code(&steal), (Some(409), Some("turn-busy")), "{steal}");
    assert!(!w.host("/session/theirs").exists());

    // The owner ends it: one command counted, none of the refused ones.
    let ended = c
        .end_turn_with(&end(Some(turn)))
        .await
        .unwrap()
        .turn
        .unwrap();
    assert_eq!((ended.turn_id.as_str(), ended.commands), (turn, 1));
    // Its id is spent: a command gets turn-ended, a second end is answered `turn: null`.
    let late = c.exec(&in_turn("echo late", turn)).await.unwrap_err();
    assert_eq!(code(&late), (Some(409), Some("turn-ended")), "{late}");
    assert_eq!(c.end_turn_with(&end(Some(turn))).await.unwrap().turn, None);
    // The session is free again: the next client opens, or commands without an id share a turn.
    let next = c.open_turn(&named("agent-b")).await.unwrap().turn_id;
    assert_ne!(next, turn);
    c.end_turn_with(&end(Some(&next))).await.unwrap();
    assert_eq!(
        c.exec(&ExecRequest::new("echo shared"))
            .await
            .unwrap()
            .outcome
            .stdout,
        "shared\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_turn_blocks_an_open_until_it_ends() {
    let w = start().await;
    let c = &w.client;
    c.exec(&ExecRequest::new("true")).await.unwrap();
    let busy = c.open_turn(&OpenTurnRequest::default()).await.unwrap_err();
    assert_eq!(code(&busy), (Some(409), Some("turn-busy")), "{busy}");
    assert!(busy.to_string().contains("shared turn"), "{busy}");
    c.end_turn().await.unwrap().turn.expect("the shared turn");
    let turn = c
        .open_turn(&OpenTurnRequest::default())
        .await
        .unwrap()
        .turn_id;
    let anonymous = c.exec(&ExecRequest::new("true")).await.unwrap_err();
    assert!(
        anonymous.to_string().contains("of another client"),
        "{anonymous}"
    );
    c.end_turn_with(&end(Some(&turn)))
        .await
        .unwrap()
        .turn
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_turn_is_ended_but_never_while_its_command_runs() {
    let (tmp, mut cfg) = config();
    cfg.turn_idle_timeout = Duration::from_secs(1);
    let w = start_with(tmp, cfg).await;
    let c = &w.client;
    let turn = c.open_turn(&named("slow")).await.unwrap().turn_id;
    // Longer than the bound: the turn is in use meanwhile, and idle time counts from its end.
    let r = c
        .exec(&in_turn("sleep 2.5; echo done > /session/slow", &turn))
        .await;
    assert_eq!(r.unwrap().outcome.exit_code, 0);
    let again = c.exec(&in_turn("cat /session/slow", &turn)).await.unwrap();
    assert_eq!(again.outcome.stdout, "done\n");
    // Abandoned: within a couple of ticks past the bound, it is ended and the session is free.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let late = c.exec(&in_turn("true", &turn)).await.unwrap_err();
    assert_eq!(code(&late), (Some(409), Some("turn-ended")), "{late}");
    let next = c.open_turn(&named("next")).await.unwrap();
    assert_eq!(next.idle_timeout_ms, 1000);
    // Its files were kept (ending is not discarding).
    let cat = c
        .exec(&in_turn("cat /session/slow", &next.turn_id))
        .await
        .unwrap();
    assert_eq!(cat.outcome.stdout, "done\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_turn_ids_and_client_names_are_refused_and_open_nothing() {
    let w = start().await;
    let post = |path: &'static str, body: &str| {
        raw(
            &w.base_url,
            reqwest::Method::POST,
            path,
            Some(TOKEN),
            Some(body.as_bytes().to_vec()),
        )
    };
    let long = "x".repeat(129);
    for (path, body) in [
        ("/v1/turns", format!(r#"{{"client":"{long}"}}"#)),
        ("/v1/turns", r#"{"client":"a\nb"}"#.to_string()),
        ("/v1/turns", r#"{"client":7}"#.to_string()),
        ("/v1/turns", r#"{"owner":"x"}"#.to_string()),
        ("/v1/exec", r#"{"script":"true","turnId":""}"#.to_string()),
        (
            "/v1/exec",
            format!(r#"{{"script":"true","turnId":"{long}"}}"#),
        ),
        (
            "/v1/exec",
            r#"{"script":"true","turnId":"a\u0000b"}"#.to_string(),
        ),
        ("/v1/turns/end", r#"{"turnId":""}"#.to_string()),
    ] {
        let (status, answer) = post(path, &body).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("bad-request")),
            "{path} {body}: {answer}"
        );
    }
    // Nothing was opened: an empty body opens a turn of an unnamed client.
    let (status, answer) = post("/v1/turns", "").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["turnId"].as_str().unwrap().starts_with("turn_"));
}

/// Issue 31's attacker: an upload while another client's turn was open was written and counted
/// as that turn's change. Uploads are admitted as commands are: `&turnId=` of the open turn, or
/// 409 `turn-busy`, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_into_another_clients_turn_is_refused() {
    let w = start().await;
    let turn = w.client.open_turn(&named("owner")).await.unwrap().turn_id;
    let base = w.base_url.clone();
    let put = |query: String| {
        let path = format!("{base}/v1/files?{query}");
        async move {
            raw(
                &path,
                reqwest::Method::PUT,
                "",
                Some(TOKEN),
                Some(b"x".to_vec()),
            )
            .await
        }
    };
    let (status, body) = put("path=/session/intruder".into()).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("turn-busy")),
        "{body}"
    );
    assert!(!w.host("/session/intruder").exists());
    let (status, body) = put("path=/session/intruder&turnId=turn_0_x".into()).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("turn-busy")),
        "{body}"
    );
    let (status, body) = put("path=/session/x&turnId=".into()).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad-request")),
        "{body}"
    );
    let (status, body) = put(format!("path=/session/x&turnId={turn}&turnId={turn}")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad-request")),
        "{body}"
    );
    let (status, body) = put(format!("path=/session/mine&turnId={turn}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["events"][0]["turnId"], turn.as_str());
    assert!(w.host("/session/mine").exists());
}
