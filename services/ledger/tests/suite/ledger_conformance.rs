//! One ledger conformance suite, run on memory, file and PostgreSQL stores, each both in process
//! and through the HTTP service (client -> loopback -> server -> store). Time is a `ManualClock`
//! shared with the server, so leases and timeouts expire on command.

use super::common::{ledgers, Backend};
use kube_harness_ledger::ledger::*;
use kube_harness_ledger::{LedgerError, ManualClock};
use serde_json::json;
use std::sync::Arc;

const T0: u64 = 1_700_000_000_000;

fn bad_input(e: &LedgerError) -> bool {
    matches!(e, LedgerError::InvalidInput(_) | LedgerError::InvalidKey(_))
}

async fn tasks_suite(l: OrchestrationServices, clock: ManualClock) {
    let t = &l.tasks;
    let a = t
        .create(NewTask {
            id: None,
            payload: json!("a"),
            max_attempts: 3,
            delay_ms: 0,
        })
        .await
        .unwrap();
    let b = t
        .create(NewTask {
            id: None,
            payload: json!("b"),
            max_attempts: 3,
            delay_ms: 0,
        })
        .await
        .unwrap();
    assert_eq!((a.state, a.attempts), (TaskState::Pending, 0));

    // Two claims take both tasks (either order: claimants spread over the first claimable tasks)
    // and hand out distinct leases.
    let first = t
        .claim("w1", 1000)
        .await
        .unwrap()
        .expect("a task is claimable");
    let second = t
        .claim("w2", 1000)
        .await
        .unwrap()
        .expect("the other task is claimable");
    let (ca, cb) = if first.id == a.id {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(
        (ca.id.as_str(), cb.id.as_str()),
        (a.id.as_str(), b.id.as_str())
    );
    assert_eq!((ca.attempts, cb.attempts), (1, 1));
    let lease_a = ca.lease.clone().unwrap();
    assert_eq!(lease_a.expires_at, T0 + 1000);
    assert_ne!(lease_a.token, cb.lease.as_ref().unwrap().token);
    assert!(
        t.claim("w3", 1000).await.unwrap().is_none(),
        "everything is leased"
    );

    // Heartbeat extends; a wrong token is refused.
    clock.advance(900);
    let hb = t.heartbeat(&a.id, &lease_a.token, 1000).await.unwrap();
    assert_eq!(hb.lease.unwrap().expires_at, T0 + 1900);
    assert!(matches!(
        t.heartbeat(&a.id, "wrong", 1000).await,
        Err(LedgerError::LeaseLost(_))
    ));

    // b's lease expires: b is claimable again (second attempt), the old token is dead.
    clock.advance(200);
    let cb2 = t
        .claim("w3", 1000)
        .await
        .unwrap()
        .expect("b reclaimable after expiry");
    assert_eq!((cb2.id.as_str(), cb2.attempts), (b.id.as_str(), 2));
    let old_b = cb.lease.unwrap().token;
    assert!(matches!(
        t.complete(&b.id, &old_b, json!(1)).await,
        Err(LedgerError::LeaseLost(_))
    ));

    // Complete a; completing again is refused; get finds it finished.
    let done = t
        .complete(&a.id, &lease_a.token, json!({"ok": true}))
        .await
        .unwrap();
    assert_eq!(done.state, TaskState::Succeeded);
    assert!(matches!(
        t.complete(&a.id, &lease_a.token, json!(2)).await,
        Err(LedgerError::LeaseLost(_))
    ));
    let got = t.get(&a.id).await.unwrap().unwrap();
    assert_eq!(
        (got.state, got.result),
        (TaskState::Succeeded, Some(json!({"ok": true})))
    );

    // Fail with retry: pending again after the delay; the last attempt's failure is final.
    let b_tok = cb2.lease.unwrap().token;
    let f = t.fail(&b.id, &b_tok, "boom", Some(500)).await.unwrap();
    assert_eq!(
        (f.state, f.last_error.as_deref()),
        (TaskState::Pending, Some("boom"))
    );
    assert!(
        t.claim("w", 1000).await.unwrap().is_none(),
        "retry delay not over"
    );
    clock.advance(500);
    let cb3 = t.claim("w", 1000).await.unwrap().unwrap();
    assert_eq!(cb3.attempts, 3);
    let f = t
        .fail(&b.id, &cb3.lease.unwrap().token, "boom again", Some(0))
        .await
        .unwrap();
    assert_eq!(f.state, TaskState::Failed, "no attempts left");
    assert!(t.claim("w", 1000).await.unwrap().is_none());

    // A lease that expires on the last attempt fails the task instead of handing it out again.
    let c = t
        .create(NewTask {
            id: Some("c".into()),
            payload: json!(null),
            max_attempts: 1,
            delay_ms: 0,
        })
        .await
        .unwrap();
    t.claim("w", 100).await.unwrap().unwrap();
    clock.advance(100);
    assert!(t.claim("w", 100).await.unwrap().is_none());
    let c = t.get(&c.id).await.unwrap().unwrap();
    assert_eq!(c.state, TaskState::Failed);
    assert!(c.last_error.unwrap().contains("expired"));

    // Explicit ids are idempotent for the same content and conflict otherwise.
    let d1 = t
        .create(NewTask {
            id: Some("d".into()),
            payload: json!(1),
            max_attempts: 2,
            delay_ms: 10,
        })
        .await
        .unwrap();
    let d2 = t
        .create(NewTask {
            id: Some("d".into()),
            payload: json!(1),
            max_attempts: 2,
            delay_ms: 10,
        })
        .await
        .unwrap();
    assert_eq!(d1, d2);
    assert!(matches!(
        t.create(NewTask {
            id: Some("d".into()),
            payload: json!(2),
            max_attempts: 2,
            delay_ms: 10
        })
        .await,
        Err(LedgerError::Conflict(_))
    ));
    assert!(t.claim("w", 1000).await.unwrap().is_none(), "d is delayed");
    clock.advance(10);
    assert_eq!(t.claim("w", 1000).await.unwrap().unwrap().id, "d");
    assert_eq!(t.list().await.unwrap().len(), 4);

    // Bad input.
    assert!(bad_input(&t.claim("w", 0).await.unwrap_err()));
    assert!(bad_input(&t.claim("", 10).await.unwrap_err()));
    for bad in ["a/b", "..", "x\0y", ".hidden"] {
        let e = t
            .create(NewTask {
                id: Some(bad.into()),
                payload: json!(1),
                max_attempts: 1,
                delay_ms: 0,
            })
            .await
            .unwrap_err();
        assert!(bad_input(&e), "{bad:?}: {e}");
        assert!(bad_input(&t.get(bad).await.unwrap_err()));
    }
    assert!(bad_input(
        &t.create(NewTask {
            id: None,
            payload: json!(1),
            max_attempts: 0,
            delay_ms: 0
        })
        .await
        .unwrap_err()
    ));
    assert!(matches!(
        t.heartbeat("nope", "t", 10).await,
        Err(LedgerError::NotFound(_))
    ));
    assert_eq!(
        t.list().await.unwrap().len(),
        4,
        "nothing written by bad input"
    );
}

async fn continuations_suite(l: OrchestrationServices, _clock: ManualClock) {
    let c = &l.continuations;
    let p = c.park("s1", "k1", json!({"step": 1})).await.unwrap();
    assert_eq!(p.state, ContinuationState::Parked);
    assert_eq!(
        c.park("s1", "k1", json!({"step": 1})).await.unwrap(),
        p,
        "same park is idempotent"
    );
    assert!(matches!(
        c.park("s1", "k1", json!({"step": 2})).await,
        Err(LedgerError::Conflict(_))
    ));
    c.park("s1", "k2", json!(2)).await.unwrap();
    c.park("s2", "k1", json!(3)).await.unwrap();
    let parked: Vec<String> = c
        .list_parked("s1")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(parked, vec!["k1", "k2"]);

    let r = c.resume("s1", "k1", json!("input")).await.unwrap();
    assert_eq!(
        (r.state, r.payload, r.resume_input),
        (
            ContinuationState::Resumed,
            json!({"step": 1}),
            Some(json!("input"))
        )
    );
    assert!(matches!(
        c.resume("s1", "k1", json!("again")).await,
        Err(LedgerError::AlreadyResumed(_))
    ));
    assert!(matches!(
        c.park("s1", "k1", json!({"step": 1})).await,
        Err(LedgerError::Conflict(_))
    ));
    assert!(matches!(
        c.resume("s1", "missing", json!(0)).await,
        Err(LedgerError::NotFound(_))
    ));
    assert_eq!(c.list_parked("s1").await.unwrap().len(), 1);
    assert_eq!(
        c.get("s1", "k1").await.unwrap().unwrap().resume_input,
        Some(json!("input"))
    );
    assert_eq!(c.get("s1", "nope").await.unwrap(), None);
    assert!(c.list_parked("nobody").await.unwrap().is_empty());
    assert!(bad_input(&c.park("..", "k", json!(1)).await.unwrap_err()));
    assert!(bad_input(
        &c.resume("s1", "a/b", json!(1)).await.unwrap_err()
    ));

    // Exactly once under concurrency: of 8 racing resumers one wins.
    c.park("s3", "race", json!(0)).await.unwrap();
    let mut handles = Vec::new();
    for i in 0..8 {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            c.resume("s3", "race", json!(i)).await
        }));
    }
    let mut wins = 0;
    for h in handles {
        match h.await.unwrap() {
            Ok(_) => wins += 1,
            Err(LedgerError::AlreadyResumed(_)) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(wins, 1);
}

async fn wakeups_suite(l: OrchestrationServices, clock: ManualClock) {
    let w = &l.wakeups;
    let late = w
        .schedule(NewWakeup {
            id: None,
            due_at: T0 + 200,
            payload: json!("late"),
        })
        .await
        .unwrap();
    let mid = w
        .schedule(NewWakeup {
            id: None,
            due_at: T0 + 100,
            payload: json!("mid"),
        })
        .await
        .unwrap();
    let early = w
        .schedule(NewWakeup {
            id: Some("early".into()),
            due_at: T0 + 50,
            payload: json!("early"),
        })
        .await
        .unwrap();
    assert!(w.list_due(10).await.unwrap().is_empty());
    assert!(w.claim_due("w", 1000).await.unwrap().is_none());

    clock.advance(100);
    let due: Vec<String> = w
        .list_due(10)
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(due, vec![early.id.clone(), mid.id.clone()]);
    assert_eq!(w.list_due(1).await.unwrap().len(), 1);

    let c1 = w.claim_due("w1", 1000).await.unwrap().unwrap();
    assert_eq!(
        (c1.id.as_str(), c1.state, c1.claims),
        ("early", WakeupState::Claimed, 1)
    );
    let c2 = w.claim_due("w2", 1000).await.unwrap().unwrap();
    assert_eq!(c2.id, mid.id);
    assert!(
        w.claim_due("w3", 1000).await.unwrap().is_none(),
        "each due wakeup is claimed once"
    );
    assert!(w.list_due(10).await.unwrap().is_empty());

    let done = w.complete("early", &c1.lease.unwrap().token).await.unwrap();
    assert_eq!(done.state, WakeupState::Done);
    assert_eq!(
        w.get("early").await.unwrap().unwrap().state,
        WakeupState::Done
    );

    // mid's claimant dies: after the lease it is due again, and the old token is dead.
    clock.advance(1000);
    let due: Vec<String> = w
        .list_due(10)
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(
        due,
        vec![mid.id.clone(), late.id.clone()],
        "expired claim is due again, by due time"
    );
    let c3 = w.claim_due("w4", 1000).await.unwrap().unwrap();
    assert_eq!((c3.id.as_str(), c3.claims), (mid.id.as_str(), 2));
    assert!(matches!(
        w.complete(&mid.id, &c2.lease.unwrap().token).await,
        Err(LedgerError::LeaseLost(_))
    ));
    w.complete(&mid.id, &c3.lease.unwrap().token).await.unwrap();

    // Idempotent scheduling with an explicit id, cancel.
    assert_eq!(
        w.schedule(NewWakeup {
            id: Some("early".into()),
            due_at: T0 + 50,
            payload: json!("early")
        })
        .await
        .unwrap()
        .state,
        WakeupState::Done
    );
    assert!(matches!(
        w.schedule(NewWakeup {
            id: Some("early".into()),
            due_at: T0 + 51,
            payload: json!("early")
        })
        .await,
        Err(LedgerError::Conflict(_))
    ));
    assert!(w.cancel(&late.id).await.unwrap());
    assert!(!w.cancel(&late.id).await.unwrap());
    assert_eq!(w.get(&late.id).await.unwrap(), None);
    assert!(bad_input(&w.claim_due("w", 0).await.unwrap_err()));
    assert!(bad_input(
        &w.schedule(NewWakeup {
            id: Some("a/../b".into()),
            due_at: 0,
            payload: json!(1)
        })
        .await
        .unwrap_err()
    ));
}

async fn queues_suite(l: OrchestrationServices, clock: ManualClock) {
    let q = &l.queues;
    let enq = |payload: serde_json::Value, max| EnqueueRequest {
        payload,
        delay_ms: 0,
        max_deliveries: max,
    };
    let a = q.enqueue("jobs", enq(json!("a"), 5)).await.unwrap();
    let b = q.enqueue("jobs", enq(json!("b"), 5)).await.unwrap();
    q.enqueue("other", enq(json!("o"), 5)).await.unwrap();

    let d1 = q.dequeue("jobs", "c1", 1000).await.unwrap().unwrap();
    assert_eq!(
        (d1.id.as_str(), d1.deliveries, d1.state),
        (a.id.as_str(), 1, MessageState::InFlight)
    );
    let d2 = q.dequeue("jobs", "c2", 1000).await.unwrap().unwrap();
    assert_eq!(d2.id, b.id);
    assert!(
        q.dequeue("jobs", "c3", 1000).await.unwrap().is_none(),
        "in-flight messages are invisible"
    );

    q.ack("jobs", &a.id, d1.receipt.as_deref().unwrap())
        .await
        .unwrap();
    assert!(matches!(
        q.ack("jobs", &a.id, d1.receipt.as_deref().unwrap()).await,
        Err(LedgerError::NotFound(_))
    ));

    // b's visibility timeout passes: redelivered, and the first receipt is stale.
    clock.advance(1000);
    let d3 = q.dequeue("jobs", "c3", 1000).await.unwrap().unwrap();
    assert_eq!((d3.id.as_str(), d3.deliveries), (b.id.as_str(), 2));
    assert!(matches!(
        q.ack("jobs", &b.id, d2.receipt.as_deref().unwrap()).await,
        Err(LedgerError::LeaseLost(_))
    ));
    q.ack("jobs", &b.id, d3.receipt.as_deref().unwrap())
        .await
        .unwrap();
    assert!(q.list("jobs").await.unwrap().is_empty());
    assert_eq!(
        q.list("other").await.unwrap().len(),
        1,
        "queues are separate"
    );

    // Dead-letter after max_deliveries unacknowledged deliveries.
    let c = q.enqueue("jobs", enq(json!("poison"), 2)).await.unwrap();
    for n in 1..=2 {
        let d = q.dequeue("jobs", "c", 100).await.unwrap().unwrap();
        assert_eq!((d.id.as_str(), d.deliveries), (c.id.as_str(), n));
        clock.advance(100);
    }
    assert!(q.dequeue("jobs", "c", 100).await.unwrap().is_none());
    let dead = q.dead_letters("jobs").await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].id.as_str(), dead[0].state, dead[0].deliveries),
        (c.id.as_str(), MessageState::DeadLettered, 2)
    );
    assert!(q.list("jobs").await.unwrap().is_empty());

    // Delayed messages, expired receipts.
    let d = q
        .enqueue(
            "jobs",
            EnqueueRequest {
                payload: json!("later"),
                delay_ms: 50,
                max_deliveries: 3,
            },
        )
        .await
        .unwrap();
    assert!(q.dequeue("jobs", "c", 100).await.unwrap().is_none());
    clock.advance(50);
    let got = q.dequeue("jobs", "c", 100).await.unwrap().unwrap();
    assert_eq!(got.id, d.id);
    clock.advance(100);
    assert!(matches!(
        q.ack("jobs", &d.id, got.receipt.as_deref().unwrap()).await,
        Err(LedgerError::LeaseLost(_))
    ));

    assert!(bad_input(
        &q.enqueue("a/b", enq(json!(1), 1)).await.unwrap_err()
    ));
    assert!(bad_input(
        &q.enqueue("jobs", enq(json!(1), 0)).await.unwrap_err()
    ));
    assert!(bad_input(&q.dequeue("jobs", "c", 0).await.unwrap_err()));
}

async fn results_suite(l: OrchestrationServices, _clock: ManualClock) {
    let r = &l.results;
    assert_eq!(r.get("k").await.unwrap(), None);
    assert_eq!(
        r.put("k", json!({"v": 1})).await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(
        r.put("k", json!({"v": 1})).await.unwrap(),
        PutOutcome::AlreadyStored
    );
    assert!(matches!(
        r.put("k", json!({"v": 2})).await,
        Err(LedgerError::Conflict(_))
    ));
    let got = r.get("k").await.unwrap().unwrap();
    assert_eq!((got.key.as_str(), got.value), ("k", json!({"v": 1})));
    for bad in ["..", "a/b", "nul\0", ""] {
        assert!(
            bad_input(&r.put(bad, json!(1)).await.unwrap_err()),
            "{bad:?}"
        );
    }
    let big = json!("x".repeat(kube_harness_ledger::store::MAX_DOCUMENT_BYTES));
    assert!(matches!(
        r.put("big", big).await,
        Err(LedgerError::TooLarge(_))
    ));
    assert_eq!(r.get("big").await.unwrap(), None, "nothing written");

    // Concurrent puts of different values: exactly one wins, the rest conflict.
    let mut handles = Vec::new();
    for i in 0..6 {
        let r = r.clone();
        handles.push(tokio::spawn(async move { r.put("race", json!(i)).await }));
    }
    let mut created = 0;
    for h in handles {
        match h.await.unwrap() {
            Ok(PutOutcome::Created) => created += 1,
            Err(LedgerError::Conflict(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(created, 1);
}

macro_rules! conformance {
    ($($name:ident: $backend:expr, $http:expr, $suite:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let clock = ManualClock::new(T0);
            let Some((ledgers, fixture)) =
                ledgers($backend, $http, stringify!($name), Arc::new(clock.clone())).await
            else {
                return;
            };
            $suite(ledgers, clock).await;
            fixture.cleanup().await;
        }
    )*};
}

conformance! {
    tasks_memory: Backend::Memory, false, tasks_suite;
    tasks_memory_http: Backend::Memory, true, tasks_suite;
    tasks_file: Backend::File, false, tasks_suite;
    tasks_file_http: Backend::File, true, tasks_suite;
    tasks_postgres: Backend::Postgres, false, tasks_suite;
    tasks_postgres_http: Backend::Postgres, true, tasks_suite;
    continuations_memory: Backend::Memory, false, continuations_suite;
    continuations_memory_http: Backend::Memory, true, continuations_suite;
    continuations_file: Backend::File, false, continuations_suite;
    continuations_file_http: Backend::File, true, continuations_suite;
    continuations_postgres: Backend::Postgres, false, continuations_suite;
    continuations_postgres_http: Backend::Postgres, true, continuations_suite;
    wakeups_memory: Backend::Memory, false, wakeups_suite;
    wakeups_memory_http: Backend::Memory, true, wakeups_suite;
    wakeups_file: Backend::File, false, wakeups_suite;
    wakeups_file_http: Backend::File, true, wakeups_suite;
    wakeups_postgres: Backend::Postgres, false, wakeups_suite;
    wakeups_postgres_http: Backend::Postgres, true, wakeups_suite;
    queues_memory: Backend::Memory, false, queues_suite;
    queues_memory_http: Backend::Memory, true, queues_suite;
    queues_file: Backend::File, false, queues_suite;
    queues_file_http: Backend::File, true, queues_suite;
    queues_postgres: Backend::Postgres, false, queues_suite;
    queues_postgres_http: Backend::Postgres, true, queues_suite;
    results_memory: Backend::Memory, false, results_suite;
    results_memory_http: Backend::Memory, true, results_suite;
    results_file: Backend::File, false, results_suite;
    results_file_http: Backend::File, true, results_suite;
    results_postgres: Backend::Postgres, false, results_suite;
    results_postgres_http: Backend::Postgres, true, results_suite;
}
