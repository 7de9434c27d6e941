//! Exec over HTTP against the real Tier-0 sandbox: output, cwd and env carried across commands
//! and turns, files in the workspace, refusals (escalation, policy), time limits, end-turn
//! reports, status counters, and the worker's own environment kept from scripts.

use super::api_support::{config, start, start_with};
use kube_harness_protocol::worker_api::ExecRequest;
use kube_harness_runtime::event::kind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_output_cwd_and_env_carry_over_within_and_across_turns() {
    let w = start().await;
    let c = &w.client;
    let r = c
        .exec(&ExecRequest::new("echo hello; echo oops >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(
        (
            r.outcome.stdout.as_str(),
            r.outcome.stderr.as_str(),
            r.outcome.exit_code
        ),
        ("hello\n", "oops\n", 3)
    );
    assert_eq!(r.outcome.tier, 0);
    assert!(!r.replayed && !r.outcome.timed_out && !r.outcome.truncated);
    assert_eq!(r.run_id, "s1", "the default run is the session");
    let kinds: Vec<&str> = r.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, [kind::COMMAND_STARTED, kind::COMMAND_COMPLETED]);
    assert_eq!(r.events[1].data["exitCode"], 3);

    c.exec(&ExecRequest::new(
        "mkdir -p /session/sub && cd /session/sub && export GREETING=hi",
    ))
    .await
    .unwrap();
    let r = c
        .exec(&ExecRequest::new("pwd; echo $GREETING"))
        .await
        .unwrap();
    assert_eq!(r.outcome.stdout, "/session/sub\nhi\n");

    let ended = c.end_turn().await.unwrap().turn.expect("a turn was open");
    assert_eq!(ended.commands, 3);
    // A new turn starts where the last one left off.
    let r = c
        .exec(&ExecRequest::new("pwd; echo ${GREETING:-unset}"))
        .await
        .unwrap();
    assert_eq!(r.outcome.stdout, "/session/sub\nhi\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_land_in_the_workspace_and_end_turn_reports_them() {
    let w = start().await;
    let c = &w.client;
    assert_eq!(c.end_turn().await.unwrap().turn, None, "no turn open yet");
    std::fs::write(w.host("/session/old.txt"), "old\n").unwrap();
    let r = c
        .exec(&ExecRequest::new(
            "echo hi > /session/a.txt && cat /session/a.txt && rm /session/old.txt && echo art > /artifacts/r.md",
        ))
        .await
        .unwrap();
    assert_eq!(
        (r.outcome.stdout.as_str(), r.outcome.exit_code),
        ("hi\n", 0)
    );
    assert_eq!(
        std::fs::read_to_string(w.host("/session/a.txt")).unwrap(),
        "hi\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.host("/artifacts/r.md")).unwrap(),
        "art\n"
    );
    assert!(r
        .events
        .iter()
        .any(|e| e.kind == kind::FILE_CREATED && e.data["path"] == "/session/a.txt"));
    c.exec(&ExecRequest::new("echo again >> /session/a.txt"))
        .await
        .unwrap();

    let turn = c.end_turn().await.unwrap().turn.unwrap();
    let changes: Vec<(&str, &str)> = turn
        .file_changes
        .iter()
        .map(|f| (f.path.as_str(), f.change.as_str()))
        .collect();
    assert_eq!(
        changes,
        [
            ("/artifacts/r.md", "created"),
            ("/session/a.txt", "modified"),
            ("/session/old.txt", "deleted"),
        ]
    );
    assert_eq!(turn.usage["stayedOnTier0"], true);
    assert_eq!(turn.usage["tier0"]["commands"], 2);
    assert!(turn.events.iter().any(|e| e.kind == kind::TURN_USAGE));
    assert_eq!(c.end_turn().await.unwrap().turn, None, "the turn is gone");
    let status = c.status().await.unwrap();
    assert_eq!(
        (status.turns, status.commands.tier0, status.commands.tier1),
        (1, 2, 0)
    );
    assert!(!status.busy);
    let last: jiff::Timestamp = status.last_activity.parse().expect("RFC 3339");
    let age = jiff::Timestamp::now().duration_since(last);
    assert!(
        age.as_secs() < 60,
        "lastActivity is recent: {}",
        status.last_activity
    );
    // The process is named, so the operator can carry usage across a replaced worker.
    let started: jiff::Timestamp = status
        .started_at
        .as_deref()
        .unwrap()
        .parse()
        .expect("RFC 3339");
    assert!(started <= last, "started {started}, last activity {last}");
    assert!(
        status
            .instance
            .as_deref()
            .is_some_and(|i| i.starts_with('w')),
        "{status:?}"
    );
    assert_eq!(
        c.status().await.unwrap().instance,
        status.instance,
        "the same process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalation_and_denied_commands_are_refused_with_126() {
    let (tmp, mut cfg) = config();
    cfg.deny_commands = vec!["docker".into()];
    let w = start_with(tmp, cfg).await;
    let c = &w.client;
    let r = c.exec(&ExecRequest::new("make --version")).await.unwrap();
    assert_eq!(r.outcome.exit_code, 126);
    assert!(
        r.outcome.stderr.contains("Tier-1"),
        "names the missing tier: {}",
        r.outcome.stderr
    );
    assert!(r.events.iter().any(|e| e.kind == kind::TIER_REFUSED));
    assert!(
        !r.events.iter().any(|e| e.kind == kind::COMMAND_STARTED),
        "nothing ran"
    );

    let r = c
        .exec(&ExecRequest::new(
            "touch /session/should-not-exist; docker ps",
        ))
        .await
        .unwrap();
    assert_eq!(r.outcome.exit_code, 126);
    assert!(
        r.outcome.stderr.contains("refused by policy: docker"),
        "{}",
        r.outcome.stderr
    );
    assert!(
        !w.host("/session/should-not-exist").exists(),
        "a refused script runs no part"
    );

    let status = c.status().await.unwrap();
    assert_eq!(status.refusals, 2);
    assert_eq!(status.commands.tier0, 0);
    // The explain flag returns the classifier's verdict.
    let mut req = ExecRequest::new("echo ok");
    req.explain = true;
    let r = c.exec(&req).await.unwrap();
    assert_eq!(
        r.classification.unwrap().decision,
        kube_harness_protocol::trace::Decision::Tier0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_timeout_kills_the_command() {
    let w = start().await;
    let mut req = ExecRequest::new("echo before; sleep 5; echo after");
    req.timeout_ms = Some(300);
    let started = std::time::Instant::now();
    let r = w.client.exec(&req).await.unwrap();
    assert!(r.outcome.timed_out, "{r:?}");
    assert_eq!(r.outcome.exit_code, 124);
    assert_eq!(r.outcome.stdout, "before\n");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    // The default limit still applies to the next command.
    let r = w
        .client
        .exec(&ExecRequest::new("sleep 0.5; echo done"))
        .await
        .unwrap();
    assert_eq!(
        (r.outcome.stdout.as_str(), r.outcome.timed_out),
        ("done\n", false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_process_environment_is_invisible_to_scripts() {
    // Set on this (the server's) process before the worker starts.
    std::env::set_var("KH_FAKE_API_KEY", "sk-live-do-not-leak-4242");
    let w = start().await;
    let r = w
        .client
        .exec(&ExecRequest::new(
            "env; echo \"key=${KH_FAKE_API_KEY:-unset}\"; cat /proc/self/environ | tr '\\0' '\\n'; cat /proc/$PPID/environ 2>/dev/null | tr '\\0' '\\n'",
        ))
        .await
        .unwrap();
    assert!(
        r.outcome.stdout.contains("key=unset"),
        "{}",
        r.outcome.stdout
    );
    assert!(
        !r.outcome.stdout.contains("sk-live-do-not-leak-4242"),
        "{}",
        r.outcome.stdout
    );
    assert!(!r.outcome.stderr.contains("sk-live-do-not-leak-4242"));
}
