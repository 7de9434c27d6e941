//! Polls the worker API for the usage counters and last activity shown in the session status.

use kube::runtime::reflector::ObjectRef;
use kube_harness_crds::session::Usage;
use kube_harness_crds::HarnessSession;
use kube_harness_protocol::{WorkerClient, WorkerClientError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// How long the reconcile waits for the worker's answer.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(3);

/// What the worker reported.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerReport {
    /// The worker process's own counters (from zero at its start).
    pub usage: Usage,
    /// The worker process's instance id and start time; `None` from a worker older than them.
    pub instance: Option<String>,
    pub started_at: Option<String>,
    pub tier: u8,
    pub busy: bool,
    pub last_activity: String,
    /// The worker's own readiness (what its `/readyz` says).
    pub ready: bool,
    /// An adopted worker's adoption digest.
    pub settings: Option<String>,
}

/// Asks the worker at `ip:port` for its status; `None` when it does not answer within
/// [`POLL_TIMEOUT`] or answers with an error (the status keeps its previous figures; the worker's
/// readiness is the kubelet's business). A failed poll never fails the reconcile.
///
/// Bounded and kept on the reconcile rather than moved to a task of its own: the idle-hibernation
/// decision needs the worker's current `busy` and last activity, and a second writer of the same
/// status fields would race the reconcile's resourceVersion-conditioned apply. The bound makes
/// the cost of a hung worker one short wait for that session alone (reconciles of different
/// sessions run concurrently), every [`super::status::READY_REQUEUE`] at most.
pub async fn poll(ip: &str, port: u16, token: &str) -> Option<WorkerReport> {
    poll_within(ip, port, token, POLL_TIMEOUT).await
}

/// How long the early-readiness poll (a started container whose probe has not passed yet) waits.
/// A worker on its node answers in milliseconds; one that cannot be reached at all (a blackholed
/// address, as every pod of the kwok scale run) must not hold the reconcile for [`POLL_TIMEOUT`]:
/// at 300 sessions that was the reconcile p99 of 3.9 s (docs/performance.md, "Scale").
pub const EARLY_POLL_TIMEOUT: Duration = Duration::from_millis(300);

/// [`poll`] with its own bound.
pub async fn poll_within(
    ip: &str,
    port: u16,
    token: &str,
    within: Duration,
) -> Option<WorkerReport> {
    let http = crate::pod_http::client(within).ok()?;
    let client = WorkerClient::new(format!("http://{ip}:{port}"), token)
        .ok()?
        .with_http(http);
    // A read: any transport failure may be tried again on a new connection (`pod_http`).
    let read = || client.status();
    let transport = |e: &WorkerClientError| matches!(e, WorkerClientError::Transport(_));
    let status = tokio::time::timeout(
        within,
        crate::pod_http::retry_connect(within, read, transport),
    )
    .await
    .ok()?
    .map_err(|e| tracing::debug!(error = %e, ip, "worker status poll failed"))
    .ok()?;
    Some(WorkerReport {
        usage: Usage::new(
            status.turns,
            status.commands.tier0,
            status.commands.tier1,
            status.refusals,
        ),
        instance: status.instance,
        started_at: status.started_at,
        tier: status.tier,
        busy: status.busy,
        last_activity: status.last_activity,
        ready: status.ready,
        settings: status.settings,
    })
}

/// How often a Ready worker is asked for its figures while it answers.
pub const POLL_PERIOD: Duration = Duration::from_secs(15);
/// The longest pause between polls of a worker that stopped answering: the period doubles with
/// each miss up to this.
pub const POLL_PERIOD_MAX: Duration = Duration::from_secs(240);
/// Polls in flight at once, across all sessions.
pub const POLLS_IN_FLIGHT: usize = 64;

/// The Ready workers' latest reports, polled in the background so that a worker that does not
/// answer costs a reconcile nothing: the reconcile reads the cached report (waiting a moment for a
/// poll it starts), and a poll that finishes later with a different report asks for a reconcile of
/// its session. A worker that does not answer is asked less and less often ([`Polls::due_in`]).
pub struct Polls {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    limit: Arc<Semaphore>,
    trigger: mpsc::UnboundedSender<ObjectRef<HarnessSession>>,
}

#[derive(Debug)]
struct Entry {
    /// The worker's `ip:port`: a new pod starts the entry over.
    addr: String,
    /// The last answer, if the last poll got one.
    report: Option<WorkerReport>,
    polled_at: Option<Instant>,
    /// Polls in a row that got no answer.
    misses: u32,
    in_flight: bool,
}

impl Entry {
    fn new(addr: &str) -> Self {
        Entry {
            addr: addr.to_string(),
            report: None,
            polled_at: None,
            misses: 0,
            in_flight: false,
        }
    }

    fn period(&self) -> Duration {
        POLL_PERIOD
            .saturating_mul(1 << self.misses.min(8))
            .min(POLL_PERIOD_MAX)
    }

    fn due(&self, now: Instant) -> bool {
        self.polled_at
            .is_none_or(|t| now.saturating_duration_since(t) >= self.period())
    }
}

impl Polls {
    /// Polls whose finished reports ask for reconciles through `trigger`.
    pub fn new(trigger: mpsc::UnboundedSender<ObjectRef<HarnessSession>>) -> Self {
        Polls {
            entries: Arc::new(Mutex::new(HashMap::new())),
            limit: Arc::new(Semaphore::new(POLLS_IN_FLIGHT)),
            trigger,
        }
    }

    /// The latest report of `session`'s worker at `ip`. When a poll is due it starts one in the
    /// background and waits at most `wait` for it; otherwise (or when the wait runs out) it returns
    /// the cached report, `None` when the last poll got no answer.
    pub async fn report(
        &self,
        session: ObjectRef<HarnessSession>,
        ip: &str,
        port: u16,
        token: &str,
        wait: Duration,
    ) -> Option<WorkerReport> {
        let key = session.to_string();
        let addr = format!("{ip}:{port}");
        let answer = {
            let mut all = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            let entry = all.entry(key.clone()).or_insert_with(|| Entry::new(&addr));
            if entry.addr != addr {
                *entry = Entry::new(&addr);
            }
            if entry.in_flight || !entry.due(Instant::now()) {
                return entry.report.clone();
            }
            entry.in_flight = true;
            let (tx, rx) = oneshot::channel();
            let task = PollTask {
                entries: self.entries.clone(),
                limit: self.limit.clone(),
                trigger: self.trigger.clone(),
                session,
                key: key.clone(),
                ip: ip.to_string(),
                port,
                token: token.to_string(),
            };
            tokio::spawn(task.run(tx));
            rx
        };
        match tokio::time::timeout(wait, answer).await {
            Ok(Ok(report)) => report,
            // Still polling: the previous answer, if any.
            _ => self
                .entries
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .filter(|e| e.addr == addr)
                .and_then(|e| e.report.clone()),
        }
    }

    /// How long until the worker of `session` is due for its next poll; `POLL_PERIOD` when it
    /// was never polled.
    pub fn due_in(&self, session: &ObjectRef<HarnessSession>) -> Duration {
        let all = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match all.get(&session.to_string()) {
            // Polling now: the next one is a period away.
            Some(e) if e.in_flight => e.period(),
            Some(e) => match e.polled_at {
                Some(t) => e
                    .period()
                    .saturating_sub(t.elapsed())
                    .max(Duration::from_secs(1)),
                None => POLL_PERIOD,
            },
            None => POLL_PERIOD,
        }
    }

    /// Forgets a session (deleted, or its worker gone).
    pub fn forget(&self, session: &ObjectRef<HarnessSession>) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&session.to_string());
    }

    /// How many sessions have an entry.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One background poll.
struct PollTask {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    limit: Arc<Semaphore>,
    trigger: mpsc::UnboundedSender<ObjectRef<HarnessSession>>,
    session: ObjectRef<HarnessSession>,
    key: String,
    ip: String,
    port: u16,
    token: String,
}

impl PollTask {
    async fn run(self, answer: oneshot::Sender<Option<WorkerReport>>) {
        let report = match self.limit.acquire().await {
            Ok(_permit) => poll(&self.ip, self.port, &self.token).await,
            Err(_) => None,
        };
        let changed = {
            let mut all = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            match all.get_mut(&self.key) {
                // Forgotten, or another pod's entry by now: this answer is nobody's.
                Some(e) if e.addr == format!("{}:{}", self.ip, self.port) => {
                    e.in_flight = false;
                    e.polled_at = Some(Instant::now());
                    e.misses = if report.is_some() {
                        0
                    } else {
                        e.misses.saturating_add(1)
                    };
                    let changed = e.report != report;
                    e.report = report.clone();
                    changed
                }
                _ => false,
            }
        };
        // The reconcile that started the poll takes the answer itself if it still waits;
        // otherwise a different answer asks for a reconcile of its own.
        if answer.send(report).is_err() && changed {
            let _ = self.trigger.send(self.session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn session() -> ObjectRef<HarnessSession> {
        ObjectRef::new("demo").within("team-a")
    }

    /// A worker that answers `/v1/status` after `delay`; counts the requests it got.
    async fn worker(delay: Duration) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    tokio::time::sleep(delay).await;
                    let body = r#"{"session":"demo","ready":true,"busy":false,"tier":0,"turns":2,"commands":{"tier0":3,"tier1":1},"refusals":0,"lastActivity":"2026-01-01T00:00:00Z"}"#;
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                });
            }
        });
        (port, hits)
    }

    #[tokio::test]
    async fn a_report_in_time_is_used_at_once_and_then_served_from_the_cache() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let polls = Polls::new(tx);
        let (port, hits) = worker(Duration::ZERO).await;
        let r = polls
            .report(session(), "127.0.0.1", port, "t", Duration::from_secs(2))
            .await
            .expect("the worker answered");
        assert_eq!((r.usage.commands_tier0, r.usage.turns), (3, 2));
        // Not due again: from the cache, no second request.
        let again = polls
            .report(session(), "127.0.0.1", port, "t", Duration::from_secs(2))
            .await;
        assert_eq!(again, Some(r));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(
            rx.try_recv().is_err(),
            "the waiting reconcile took the answer"
        );
        assert!(polls.due_in(&session()) > Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_slow_answer_is_not_waited_for_and_asks_for_a_reconcile_when_it_comes() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let polls = Polls::new(tx);
        let (port, _) = worker(Duration::from_millis(300)).await;
        let started = Instant::now();
        let r = polls
            .report(session(), "127.0.0.1", port, "t", Duration::from_millis(20))
            .await;
        assert!(r.is_none() && started.elapsed() < Duration::from_millis(250));
        let asked = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a reconcile is asked for")
            .unwrap();
        assert_eq!(asked, session());
        let cached = polls
            .report(session(), "127.0.0.1", port, "t", Duration::ZERO)
            .await;
        assert_eq!(cached.map(|r| r.usage.turns), Some(2));
    }

    #[tokio::test]
    async fn a_worker_that_does_not_answer_is_asked_less_and_less_often() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let polls = Polls::new(tx);
        // A closed port: refused at once.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        for misses in 1..=5u32 {
            // Make the entry due again, as if its period had passed.
            if let Some(e) = polls
                .entries
                .lock()
                .unwrap()
                .get_mut(&session().to_string())
            {
                e.polled_at = Some(Instant::now() - POLL_PERIOD_MAX);
            }
            let r = polls
                .report(session(), "127.0.0.1", port, "t", Duration::from_secs(5))
                .await;
            assert!(r.is_none());
            let e = &polls.entries.lock().unwrap()[&session().to_string()];
            assert_eq!(e.misses, misses);
            let expected = POLL_PERIOD.saturating_mul(1 << misses).min(POLL_PERIOD_MAX);
            assert_eq!(e.period(), expected);
        }
        assert!(polls.due_in(&session()) > Duration::from_secs(200));
        assert!(
            rx.try_recv().is_err(),
            "nothing changed: no reconcile asked for"
        );
        // A new pod (another address) starts over. The OS may hand the closed port above out
        // again (then it is the same address, not a new pod): take another.
        let mut port2 = worker(Duration::ZERO).await.0;
        while port2 == port {
            port2 = worker(Duration::ZERO).await.0;
        }
        let _ = polls
            .report(session(), "127.0.0.1", port2, "t", Duration::from_secs(2))
            .await;
        assert!(polls.due_in(&session()) <= POLL_PERIOD);
        polls.forget(&session());
        assert!(polls.is_empty());
    }
}
