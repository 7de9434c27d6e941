//! The worker's `GET /metrics` against a real worker over loopback: behind the bearer, and its
//! figures follow what really ran (commands by tier and their wall time, a refusal, a turn, busy,
//! streamed and kept output bytes, a session log that was down).

use super::api_support::{config, start, start_with, wait_busy, TestLog, TOKEN};
use kube_harness_worker::api::model::ExecRequest;

/// The exposition, with its status and content type.
async fn scrape(base_url: &str, token: Option<&str>) -> (u16, String, String) {
    let mut request = reqwest::Client::new().get(format!("{base_url}/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, content_type, response.text().await.unwrap())
}

async fn metrics(base_url: &str) -> String {
    let (status, content_type, text) = scrape(base_url, Some(TOKEN)).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    text
}

/// The value of one sample (`name{labels}` exactly as exposed); `None` when absent.
fn value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(sample)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(|v| v.parse().unwrap())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_bearer() {
    let w = start().await;
    for token in [None, Some("wrong-token")] {
        let (status, _, body) = scrape(&w.base_url, token).await;
        assert_eq!(status, 401, "{body}");
        assert!(!body.contains("kube_harness_worker"), "{body}");
    }
    // Unused, the series are there at zero.
    let text = metrics(&w.base_url).await;
    assert_eq!(
        value(&text, "kube_harness_worker_commands_total{tier=\"0\"}"),
        Some(0.0)
    );
    assert_eq!(value(&text, "kube_harness_worker_busy"), Some(0.0));
    assert_eq!(value(&text, "kube_harness_worker_tier"), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_commands_refusals_turns_busy_and_streamed_output() {
    let w = start().await;
    let c = &w.client;
    let r = c
        .exec(&ExecRequest::new("sleep 0.3; echo hi"))
        .await
        .unwrap();
    assert_eq!(r.outcome.exit_code, 0);
    // Needs Tier-1, which this worker has not: refused (126), nothing runs.
    let r = c.exec(&ExecRequest::new("make --version")).await.unwrap();
    assert_eq!(r.outcome.exit_code, 126);
    // 2 MiB on stdout (past the 1 MiB cap: kept whole in /artifacts), 10 bytes on stderr.
    let script =
        "python3 -c 'import sys; sys.stdout.write(\"y\\n\" * 1048576)'; echo small-err >&2";
    let streamed = c
        .exec_stream(&ExecRequest::new(script), |_| {})
        .await
        .unwrap();
    let kept = streamed.stdout_file.as_ref().expect("stdout kept").bytes;
    assert_eq!(kept, 2 << 20);

    // Busy while a command holds the session.
    let running = {
        let c = c.clone();
        tokio::spawn(async move { c.exec(&ExecRequest::new("sleep 1")).await })
    };
    wait_busy(c).await;
    let during = metrics(&w.base_url).await;
    assert_eq!(value(&during, "kube_harness_worker_busy"), Some(1.0));
    running.await.unwrap().unwrap();
    c.end_turn().await.unwrap();

    let text = metrics(&w.base_url).await;
    let get =
        |sample: &str| value(&text, sample).unwrap_or_else(|| panic!("no {sample} in\n{text}"));
    assert_eq!(get("kube_harness_worker_busy"), 0.0);
    assert_eq!(get("kube_harness_worker_commands_total{tier=\"0\"}"), 3.0);
    assert_eq!(
        get("kube_harness_worker_command_seconds_count{tier=\"0\"}"),
        3.0
    );
    let seconds = get("kube_harness_worker_command_seconds_sum{tier=\"0\"}");
    assert!(
        (1.3..60.0).contains(&seconds),
        "sleep 0.3 and sleep 1 took {seconds} s in all"
    );
    // The 0.3 s and 1 s commands are past the 0.256 s bucket; the streamed one may not be.
    assert!(get("kube_harness_worker_command_seconds_bucket{le=\"0.256\",tier=\"0\"}") <= 1.0);
    assert_eq!(get("kube_harness_worker_refusals_total"), 1.0);
    assert_eq!(get("kube_harness_worker_turns_total"), 1.0);
    assert_eq!(
        get("kube_harness_worker_streamed_bytes_total{stream=\"stdout\"}"),
        (2 << 20) as f64
    );
    assert_eq!(
        get("kube_harness_worker_streamed_bytes_total{stream=\"stderr\"}"),
        10.0
    );
    assert_eq!(
        get("kube_harness_worker_kept_bytes_total{stream=\"stdout\"}"),
        kept as f64
    );
    assert_eq!(
        value(
            &text,
            "kube_harness_worker_kept_bytes_total{stream=\"stderr\"}"
        ),
        None,
        "10 bytes stay in the result"
    );
    // The status says the same.
    let status = c.status().await.unwrap();
    assert_eq!(
        (status.commands.tier0, status.refusals, status.turns),
        (3, 1, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_session_log_did_not_record_counts_as_a_start_failure() {
    let mut log = TestLog::start().await;
    let (tmp, mut cfg) = config();
    cfg.session_log = Some(log.config());
    let w = start_with(tmp, cfg).await;
    w.client.exec(&ExecRequest::new("true")).await.unwrap();
    let before = metrics(&w.base_url).await;
    assert_eq!(
        value(
            &before,
            "kube_harness_worker_session_log_failures_total{failure=\"start\"}"
        ),
        Some(0.0)
    );
    log.pause().await;
    let err = w
        .client
        .exec(&ExecRequest::new("touch /session/x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("session-log-unavailable"));
    assert!(!w.host("/session/x").exists());
    let text = metrics(&w.base_url).await;
    assert_eq!(
        value(
            &text,
            "kube_harness_worker_session_log_failures_total{failure=\"start\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "kube_harness_worker_commands_total{tier=\"0\"}"),
        Some(1.0)
    );
    log.resume().await;
}
