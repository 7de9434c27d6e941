//! Model-based tests: random operation sequences (with time jumps) applied to each ledger and to a
//! small reference model; every answer and every record must agree. Run on the memory store (many
//! cases) and the file store (fewer cases, real files), both through the same ledger code.

use super::common::{open_store, Backend};
use kube_harness_ledger::ledger::*;
use kube_harness_ledger::ManualClock;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

const T0: u64 = 1_000_000;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn ledgers(backend: Backend) -> (OrchestrationServices, ManualClock, super::common::Fixture) {
    let clock = ManualClock::new(T0);
    let fixture = open_store(backend, "model").await.unwrap();
    let l = create_durable_orchestration_services_with_clock(
        "m",
        fixture.store.clone(),
        Arc::new(clock.clone()),
    )
    .unwrap();
    (l, clock, fixture)
}

/// An operation's observable outcome: `Ok(summary)` or the error code.
type Out = Result<String, &'static str>;

fn out<T>(r: LedgerResult<T>, f: impl FnOnce(T) -> String) -> Out {
    r.map(f).map_err(|e| e.code())
}

// ---------------------------------------------------------------- tasks

#[derive(Debug, Clone)]
enum TaskOp {
    Create {
        id: u8,
        max_attempts: u32,
        delay: u64,
    },
    Claim {
        lease: u64,
    },
    Heartbeat {
        claim: usize,
        lease: u64,
    },
    Complete {
        claim: usize,
    },
    Fail {
        claim: usize,
        retry: Option<u64>,
    },
    Advance(u64),
}

fn task_op() -> impl Strategy<Value = TaskOp> {
    prop_oneof![
        1 => (0u8..4, 1u32..4, prop_oneof![Just(0u64), Just(30)]).prop_map(|(id, max_attempts, delay)| TaskOp::Create { id, max_attempts, delay }),
        3 => (10u64..60).prop_map(|lease| TaskOp::Claim { lease }),
        1 => (any::<usize>(), 10u64..60).prop_map(|(claim, lease)| TaskOp::Heartbeat { claim, lease }),
        2 => any::<usize>().prop_map(|claim| TaskOp::Complete { claim }),
        1 => (any::<usize>(), prop_oneof![Just(None), Just(Some(0u64)), Just(Some(20))]).prop_map(|(claim, retry)| TaskOp::Fail { claim, retry }),
        2 => (0u64..80).prop_map(TaskOp::Advance),
    ]
}

#[derive(Debug, Clone)]
struct MTask {
    state: TaskState,
    attempts: u32,
    max_attempts: u32,
    available_at: u64,
    /// (claim number, expiry)
    lease: Option<(usize, u64)>,
}

#[derive(Default)]
struct TaskModel {
    tasks: BTreeMap<String, MTask>,
    claims: Vec<String>,
    now: u64,
}

impl TaskModel {
    fn summary(id: &str, t: &MTask) -> String {
        format!("{id}:{:?}:{}:{}", t.state, t.attempts, t.max_attempts)
    }

    fn create(&mut self, id: String, max_attempts: u32, delay: u64) -> Out {
        if let Some(t) = self.tasks.get(&id) {
            return if t.max_attempts == max_attempts {
                Ok(Self::summary(&id, t))
            } else {
                Err("conflict")
            };
        }
        let t = MTask {
            state: TaskState::Pending,
            attempts: 0,
            max_attempts,
            available_at: self.now + delay,
            lease: None,
        };
        let s = Self::summary(&id, &t);
        self.tasks.insert(id, t);
        Ok(s)
    }

    /// The tasks a claim may pick (the first `CLAIM_WINDOW` claimable, in id order), after
    /// failing those whose lease expired on their last attempt.
    fn claim_window(&mut self) -> Vec<String> {
        let now = self.now;
        let mut window = Vec::new();
        for (id, t) in self.tasks.iter_mut() {
            let claimable = match t.state {
                TaskState::Pending => t.available_at <= now,
                TaskState::Running => t.lease.is_none_or(|(_, exp)| exp <= now),
                _ => false,
            };
            if !claimable {
                continue;
            }
            if t.attempts >= t.max_attempts {
                t.state = TaskState::Failed;
                t.lease = None;
                continue;
            }
            window.push(id.clone());
            if window.len() == CLAIM_WINDOW {
                break;
            }
        }
        window
    }

    fn claim(&mut self, id: &str, lease: u64) {
        let claim_no = self.claims.len();
        let t = self.tasks.get_mut(id).unwrap();
        t.state = TaskState::Running;
        t.attempts += 1;
        t.lease = Some((claim_no, self.now + lease));
        self.claims.push(id.to_string());
    }

    /// The task held under claim `claim_no`, if that lease is still valid.
    fn held(&mut self, claim_no: usize) -> Result<&mut MTask, &'static str> {
        let now = self.now;
        let t = self.tasks.get_mut(&self.claims[claim_no]).unwrap();
        match (t.state, t.lease) {
            (TaskState::Running, Some((c, exp))) if c == claim_no && now < exp => Ok(t),
            _ => Err("lease-lost"),
        }
    }
}

async fn run_tasks(backend: Backend, ops: Vec<TaskOp>) {
    let (l, clock, fixture) = ledgers(backend).await;
    let mut m = TaskModel {
        now: T0,
        ..Default::default()
    };
    let mut tokens: Vec<(String, String)> = Vec::new();
    for op in ops {
        match op {
            TaskOp::Create {
                id,
                max_attempts,
                delay,
            } => {
                let id = format!("t{id}");
                let want = m.create(id.clone(), max_attempts, delay);
                let got = out(
                    l.tasks
                        .create(NewTask {
                            id: Some(id.clone()),
                            payload: json!(id),
                            max_attempts,
                            delay_ms: delay,
                        })
                        .await,
                    |t| format!("{}:{:?}:{}:{}", t.id, t.state, t.attempts, t.max_attempts),
                );
                assert_eq!(got, want, "create {id}");
            }
            TaskOp::Claim { lease } => {
                let window = m.claim_window();
                let got = l.tasks.claim("w", lease).await.unwrap();
                match got {
                    None => assert!(
                        window.is_empty(),
                        "claim found nothing but {window:?} were claimable"
                    ),
                    Some(t) => {
                        assert!(
                            window.contains(&t.id),
                            "claimed {} outside the window {window:?}",
                            t.id
                        );
                        m.claim(&t.id, lease);
                        tokens.push((t.id, t.lease.unwrap().token));
                    }
                }
            }
            TaskOp::Heartbeat { claim, lease } if !tokens.is_empty() => {
                let c = claim % tokens.len();
                let now = m.now;
                let want = m.held(c).map(|t| {
                    t.lease = Some((c, now + lease));
                    "ok".to_string()
                });
                let got = out(
                    l.tasks.heartbeat(&tokens[c].0, &tokens[c].1, lease).await,
                    |_| "ok".into(),
                );
                assert_eq!(got, want, "heartbeat claim {c}");
            }
            TaskOp::Complete { claim } if !tokens.is_empty() => {
                let c = claim % tokens.len();
                let want = m.held(c).map(|t| {
                    t.state = TaskState::Succeeded;
                    t.lease = None;
                    "ok".to_string()
                });
                let got = out(
                    l.tasks.complete(&tokens[c].0, &tokens[c].1, json!(c)).await,
                    |_| "ok".into(),
                );
                assert_eq!(got, want, "complete claim {c}");
            }
            TaskOp::Fail { claim, retry } if !tokens.is_empty() => {
                let c = claim % tokens.len();
                let now = m.now;
                let want = m.held(c).map(|t| {
                    t.lease = None;
                    match retry {
                        Some(d) if t.attempts < t.max_attempts => {
                            t.state = TaskState::Pending;
                            t.available_at = now + d;
                        }
                        _ => t.state = TaskState::Failed,
                    }
                    "ok".to_string()
                });
                let got = out(
                    l.tasks.fail(&tokens[c].0, &tokens[c].1, "e", retry).await,
                    |_| "ok".into(),
                );
                assert_eq!(got, want, "fail claim {c}");
            }
            TaskOp::Advance(ms) => {
                clock.advance(ms);
                m.now += ms;
            }
            _ => {}
        }
        for (id, t) in &m.tasks {
            let real = l.tasks.get(id).await.unwrap().expect("task exists");
            assert_eq!(
                (real.state, real.attempts, real.max_attempts),
                (t.state, t.attempts, t.max_attempts),
                "task {id}"
            );
        }
    }
    fixture.cleanup().await;
}

// ---------------------------------------------------------------- continuations

#[derive(Debug, Clone)]
enum ContOp {
    Park { s: u8, k: u8, p: u8 },
    Resume { s: u8, k: u8 },
    List { s: u8 },
}

fn cont_op() -> impl Strategy<Value = ContOp> {
    prop_oneof![
        (0u8..2, 0u8..3, 0u8..2).prop_map(|(s, k, p)| ContOp::Park { s, k, p }),
        (0u8..2, 0u8..3).prop_map(|(s, k)| ContOp::Resume { s, k }),
        (0u8..2).prop_map(|s| ContOp::List { s }),
    ]
}

async fn run_continuations(backend: Backend, ops: Vec<ContOp>) {
    let (l, _clock, fixture) = ledgers(backend).await;
    let mut m: BTreeMap<(u8, u8), (u8, bool)> = BTreeMap::new();
    for op in ops {
        match op {
            ContOp::Park { s, k, p } => {
                let want: Out = match m.get(&(s, k)) {
                    None => {
                        m.insert((s, k), (p, false));
                        Ok("parked".into())
                    }
                    Some((q, false)) if *q == p => Ok("parked".into()),
                    Some(_) => Err("conflict"),
                };
                let got = out(
                    l.continuations
                        .park(&format!("s{s}"), &format!("k{k}"), json!(p))
                        .await,
                    |c| format!("{:?}", c.state).to_lowercase(),
                );
                assert_eq!(got, want, "park s{s}/k{k}");
            }
            ContOp::Resume { s, k } => {
                let want: Out = match m.get_mut(&(s, k)) {
                    None => Err("not-found"),
                    Some((_, true)) => Err("already-resumed"),
                    Some((p, resumed)) => {
                        *resumed = true;
                        Ok(format!("payload {p}"))
                    }
                };
                let got = out(
                    l.continuations
                        .resume(&format!("s{s}"), &format!("k{k}"), json!("in"))
                        .await,
                    |c| format!("payload {}", c.payload),
                );
                assert_eq!(got, want, "resume s{s}/k{k}");
            }
            ContOp::List { s } => {
                let want: Vec<String> = m
                    .iter()
                    .filter(|((ms, _), (_, r))| *ms == s && !r)
                    .map(|((_, k), _)| format!("k{k}"))
                    .collect();
                let got: Vec<String> = l
                    .continuations
                    .list_parked(&format!("s{s}"))
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|c| c.id)
                    .collect();
                assert_eq!(got, want, "list s{s}");
            }
        }
    }
    fixture.cleanup().await;
}

// ---------------------------------------------------------------- wakeups

#[derive(Debug, Clone)]
enum WakeOp {
    Schedule { id: u8, due: u64 },
    ClaimDue { lease: u64 },
    Complete { claim: usize },
    Cancel { id: u8 },
    ListDue,
    Advance(u64),
}

fn wake_op() -> impl Strategy<Value = WakeOp> {
    prop_oneof![
        2 => (0u8..4, 0u64..100).prop_map(|(id, due)| WakeOp::Schedule { id, due }),
        3 => (10u64..60).prop_map(|lease| WakeOp::ClaimDue { lease }),
        2 => any::<usize>().prop_map(|claim| WakeOp::Complete { claim }),
        1 => (0u8..4).prop_map(|id| WakeOp::Cancel { id }),
        1 => Just(WakeOp::ListDue),
        2 => (0u64..60).prop_map(WakeOp::Advance),
    ]
}

#[derive(Debug, Clone)]
struct MWake {
    due_at: u64,
    state: WakeupState,
    lease: Option<(usize, u64)>,
    claims: u32,
}

fn m_due(open: &BTreeMap<String, MWake>, now: u64) -> Vec<String> {
    let mut due: Vec<(u64, String)> = open
        .iter()
        .filter(|(_, w)| match w.state {
            WakeupState::Scheduled => w.due_at <= now,
            WakeupState::Claimed => w.lease.is_none_or(|(_, e)| e <= now),
            WakeupState::Done => false,
        })
        .map(|(id, w)| (w.due_at, id.clone()))
        .collect();
    due.sort();
    due.into_iter().map(|(_, id)| id).collect()
}

async fn run_wakeups(backend: Backend, ops: Vec<WakeOp>) {
    let (l, clock, fixture) = ledgers(backend).await;
    let mut open: BTreeMap<String, MWake> = BTreeMap::new();
    let mut done: BTreeMap<String, MWake> = BTreeMap::new();
    let mut claims: Vec<(String, String)> = Vec::new();
    for op in ops {
        let now = clock.now_ms();
        match op {
            WakeOp::Schedule { id, due } => {
                let id = format!("w{id}");
                let due_at = T0 + due;
                let want: Out = match open.get(&id).or(done.get(&id)) {
                    Some(w) if w.due_at == due_at => Ok(format!("{:?}", w.state)),
                    Some(_) => Err("conflict"),
                    None => {
                        open.insert(
                            id.clone(),
                            MWake {
                                due_at,
                                state: WakeupState::Scheduled,
                                lease: None,
                                claims: 0,
                            },
                        );
                        Ok("Scheduled".into())
                    }
                };
                let got = out(
                    l.wakeups
                        .schedule(NewWakeup {
                            id: Some(id.clone()),
                            due_at,
                            payload: json!(null),
                        })
                        .await,
                    |w| format!("{:?}", w.state),
                );
                assert_eq!(got, want, "schedule {id}");
            }
            WakeOp::ClaimDue { lease } => {
                let want = m_due(&open, now).into_iter().next();
                if let Some(id) = &want {
                    let w = open.get_mut(id).unwrap();
                    w.state = WakeupState::Claimed;
                    w.claims += 1;
                    w.lease = Some((claims.len(), now + lease));
                }
                let got = l.wakeups.claim_due("w", lease).await.unwrap();
                assert_eq!(got.as_ref().map(|w| w.id.clone()), want, "claim_due");
                if let Some(w) = got {
                    assert_eq!(w.claims, open[&w.id].claims);
                    claims.push((w.id, w.lease.unwrap().token));
                }
            }
            WakeOp::Complete { claim } if !claims.is_empty() => {
                let c = claim % claims.len();
                let id = claims[c].0.clone();
                let want: Out = match open.get(&id) {
                    None if done.contains_key(&id) => Err("lease-lost"),
                    None => Err("not-found"),
                    Some(w) => match w.lease {
                        Some((lc, exp))
                            if w.state == WakeupState::Claimed && lc == c && now < exp =>
                        {
                            let mut w = open.remove(&id).unwrap();
                            w.state = WakeupState::Done;
                            w.lease = None;
                            done.insert(id.clone(), w);
                            Ok("Done".into())
                        }
                        _ => Err("lease-lost"),
                    },
                };
                let got = out(l.wakeups.complete(&id, &claims[c].1).await, |w| {
                    format!("{:?}", w.state)
                });
                assert_eq!(got, want, "complete claim {c} of {id}");
            }
            WakeOp::Cancel { id } => {
                let id = format!("w{id}");
                let want = open.remove(&id).is_some();
                assert_eq!(l.wakeups.cancel(&id).await.unwrap(), want, "cancel {id}");
            }
            WakeOp::ListDue => {
                let got: Vec<String> = l
                    .wakeups
                    .list_due(100)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|w| w.id)
                    .collect();
                assert_eq!(got, m_due(&open, now), "list_due");
            }
            WakeOp::Advance(ms) => clock.advance(ms),
            _ => {}
        }
    }
    fixture.cleanup().await;
}

// ---------------------------------------------------------------- queues

#[derive(Debug, Clone)]
enum QueueOp {
    Enqueue { max: u32, delay: u64 },
    Dequeue { vt: u64 },
    Ack { delivery: usize },
    Advance(u64),
}

fn queue_op() -> impl Strategy<Value = QueueOp> {
    prop_oneof![
        2 => (1u32..4, prop_oneof![Just(0u64), Just(20)]).prop_map(|(max, delay)| QueueOp::Enqueue { max, delay }),
        3 => (10u64..50).prop_map(|vt| QueueOp::Dequeue { vt }),
        2 => any::<usize>().prop_map(|delivery| QueueOp::Ack { delivery }),
        2 => (0u64..60).prop_map(QueueOp::Advance),
    ]
}

#[derive(Debug, Clone)]
struct MMsg {
    deliveries: u32,
    max: u32,
    visible_at: u64,
    receipt: Option<usize>,
}

async fn run_queues(backend: Backend, ops: Vec<QueueOp>) {
    let (l, clock, fixture) = ledgers(backend).await;
    let mut live: BTreeMap<usize, MMsg> = BTreeMap::new();
    let mut dead: Vec<usize> = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    let mut deliveries: Vec<(usize, String)> = Vec::new();
    for op in ops {
        let now = clock.now_ms();
        match op {
            QueueOp::Enqueue { max, delay } => {
                let m = l
                    .queues
                    .enqueue(
                        "q",
                        EnqueueRequest {
                            payload: json!(ids.len()),
                            delay_ms: delay,
                            max_deliveries: max,
                        },
                    )
                    .await
                    .unwrap();
                live.insert(
                    ids.len(),
                    MMsg {
                        deliveries: 0,
                        max,
                        visible_at: now + delay,
                        receipt: None,
                    },
                );
                ids.push(m.id);
            }
            QueueOp::Dequeue { vt } => {
                let mut want = None;
                let idxs: Vec<usize> = live.keys().copied().collect();
                for i in idxs {
                    let m = live.get_mut(&i).unwrap();
                    if m.visible_at > now {
                        continue;
                    }
                    if m.deliveries >= m.max {
                        live.remove(&i);
                        dead.push(i);
                        continue;
                    }
                    m.deliveries += 1;
                    m.visible_at = now + vt;
                    m.receipt = Some(deliveries.len());
                    want = Some((i, m.deliveries));
                    break;
                }
                let got = l.queues.dequeue("q", "c", vt).await.unwrap();
                let got_idx = got
                    .as_ref()
                    .map(|m| (ids.iter().position(|id| *id == m.id).unwrap(), m.deliveries));
                assert_eq!(got_idx, want, "dequeue");
                if let Some(m) = got {
                    deliveries.push((got_idx.unwrap().0, m.receipt.unwrap()));
                }
            }
            QueueOp::Ack { delivery } if !deliveries.is_empty() => {
                let d = delivery % deliveries.len();
                let i = deliveries[d].0;
                let want: Out = match live.get(&i) {
                    None => Err("not-found"),
                    Some(m) if m.receipt == Some(d) && now < m.visible_at => {
                        live.remove(&i);
                        Ok("acked".into())
                    }
                    Some(_) => Err("lease-lost"),
                };
                let got = out(l.queues.ack("q", &ids[i], &deliveries[d].1).await, |_| {
                    "acked".into()
                });
                assert_eq!(got, want, "ack delivery {d} of message {i}");
            }
            QueueOp::Advance(ms) => clock.advance(ms),
            _ => {}
        }
        let real_live: Vec<(usize, u32)> = l
            .queues
            .list("q")
            .await
            .unwrap()
            .iter()
            .map(|m| (ids.iter().position(|id| *id == m.id).unwrap(), m.deliveries))
            .collect();
        let want_live: Vec<(usize, u32)> = live.iter().map(|(i, m)| (*i, m.deliveries)).collect();
        assert_eq!(real_live, want_live, "live messages");
        let mut real_dead: Vec<usize> = l
            .queues
            .dead_letters("q")
            .await
            .unwrap()
            .iter()
            .map(|m| ids.iter().position(|id| *id == m.id).unwrap())
            .collect();
        real_dead.sort();
        let mut want_dead = dead.clone();
        want_dead.sort();
        assert_eq!(real_dead, want_dead, "dead letters");
    }
    fixture.cleanup().await;
}

// ---------------------------------------------------------------- results

async fn run_results(backend: Backend, ops: Vec<(bool, u8, u8)>) {
    let (l, _clock, fixture) = ledgers(backend).await;
    let mut m: BTreeMap<u8, u8> = BTreeMap::new();
    for (put, k, v) in ops {
        let key = format!("r{k}");
        if put {
            let want: Out = match m.get(&k) {
                None => {
                    m.insert(k, v);
                    Ok("Created".into())
                }
                Some(old) if *old == v => Ok("AlreadyStored".into()),
                Some(_) => Err("conflict"),
            };
            assert_eq!(
                out(l.results.put(&key, json!(v)).await, |o| format!("{o:?}")),
                want,
                "put {key}={v}"
            );
        } else {
            let got = l.results.get(&key).await.unwrap().map(|r| r.value);
            assert_eq!(got, m.get(&k).map(|v| json!(v)), "get {key}");
        }
    }
    fixture.cleanup().await;
}

use kube_harness_ledger::Clock;

fn cases(backend: Backend) -> ProptestConfig {
    ProptestConfig::with_cases(if backend == Backend::Memory { 96 } else { 12 })
}

macro_rules! model_tests {
    ($($name:ident: $backend:expr, $run:ident, $strategy:expr;)*) => {$(
        proptest! {
            #![proptest_config(cases($backend))]
            #[test]
            fn $name(ops in proptest::collection::vec($strategy, 1..40)) {
                rt().block_on($run($backend, ops));
            }
        }
    )*};
}

model_tests! {
    tasks_model_memory: Backend::Memory, run_tasks, task_op();
    tasks_model_file: Backend::File, run_tasks, task_op();
    continuations_model_memory: Backend::Memory, run_continuations, cont_op();
    continuations_model_file: Backend::File, run_continuations, cont_op();
    wakeups_model_memory: Backend::Memory, run_wakeups, wake_op();
    wakeups_model_file: Backend::File, run_wakeups, wake_op();
    queues_model_memory: Backend::Memory, run_queues, queue_op();
    queues_model_file: Backend::File, run_queues, queue_op();
    results_model_memory: Backend::Memory, run_results, (any::<bool>(), 0u8..3, 0u8..2);
    results_model_file: Backend::File, run_results, (any::<bool>(), 0u8..3, 0u8..2);
}
